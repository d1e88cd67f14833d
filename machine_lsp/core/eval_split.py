"""An eval set made from the store: held-out tagged rows, and the rule that they never train.

`machine train eval split` (and the editor's *Make Eval Set…*) holds out a share of the store's good rows, whole
sessions together (core.gate.holdout_split, the gate's own split), and writes them as eval rows to the eval file:
each row's prompt is its messages before the answer, and the answer is what the eval expects. Those rows stay
tagged; a run that trains on the store leaves out every row the eval set holds (`without_eval_rows`), so the
eval keeps measuring rows the model never saw. The key of an eval row is its prompt messages and expected text
(`eval_key`), the same key that refuses an eval set sharing a row with training data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from machine_lsp.core import gate
from machine_lsp.core.evals import EvalCase
from machine_lsp.core.export import chat_order, export_sft
from machine_lsp.core.schema import EvalRow, Message, TagRecord, TrainingRow, encode, text_of


class EvalSplit(msgspec.Struct):
    held_out: list[TrainingRow]  # the eval set's rows (chat rows: the last message is the expected answer)
    training: int  # good rows left to train on
    by: str  # "session" or "row" (core.gate.Split.by)
    sessions_held_out: int


def eval_key(prompt: Sequence[Message], expected: str) -> bytes:
    """One eval row: its prompt messages and the answer it expects."""
    return encode(list(prompt)) + b"\0" + expected.encode("utf-8", "surrogatepass")


def row_eval_key(row: TrainingRow) -> bytes:
    """The eval key a training row has when it is used as an eval row (prompt = all but the last message)."""
    return eval_key(row.messages[:-1], text_of(row.messages[-1]))


def case_keys(cases: Iterable[EvalCase]) -> set[bytes]:
    return {eval_key(case.messages, case.expected) for case in cases}


def split_store(records: Sequence[TagRecord], *, min_rows: int, fraction: float) -> EvalSplit | str:
    """The store's good rows split into an eval set and the rest; a string saying why not (too few rows)."""
    rows = export_sft(records)
    session_of: dict[bytes, str] = {}
    for record in records:  # rows of one session stay on one side (a session's turns are alike)
        source = record.source
        session_of.setdefault(
            encode(chat_order(record.messages)), source.session_id or source.uri or record.id
        )
    keys = [session_of.get(encode(row.messages), f"row {i}") for i, row in enumerate(rows)]
    split = gate.holdout_split(keys, min_rows=min_rows, fraction=fraction)
    if isinstance(split, str):
        return split.replace("the gate needs", "an eval set needs").replace(
            "; set [eval] data to a held-out file or tag more turns", "; tag more turns"
        )
    return EvalSplit(
        held_out=[rows[i] for i in split.held_out],
        training=len(split.train),
        by=split.by,
        sessions_held_out=split.sessions_held_out,
    )


def encode_eval_rows(rows: Iterable[TrainingRow]) -> bytes:
    """The held-out rows as eval rows (`{messages, expected}`: the prompt, and the answer an exact match expects),
    the format the eval-file diagnostics check."""
    return b"".join(
        encode(EvalRow(messages=list(row.messages[:-1]), expected=text_of(row.messages[-1]))) + b"\n"
        for row in rows
    )


def without_eval_rows(rows: Sequence[TrainingRow], keys: set[bytes]) -> tuple[list[TrainingRow], int]:
    """The rows an eval set does not hold, and how many it held."""
    kept = [row for row in rows if row_eval_key(row) not in keys]
    return kept, len(rows) - len(kept)
