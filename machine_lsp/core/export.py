"""Exports from the store: SFT rows (good only), preference pairs (DPO: a chosen and a rejected answer to one
prompt, in tinker-cookbook's comparison format) and KTO examples (every good and bad answer, unpaired)."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from machine_lsp.core.conflicts import resolve
from machine_lsp.core.preference import Comparison, ComparisonRow, KtoRow, PairCounts
from machine_lsp.core.schema import Message, TagRecord, TrainingRow, encode, to_cookbook_messages


def export_sft(records: Iterable[TagRecord]) -> list[TrainingRow]:
    """Good records as training rows, rewrites applied (a record's messages already end with the rewrite).

    Bad records never enter SFT; the same conversation tagged good twice is written once.
    """
    rows: list[TrainingRow] = []
    seen: set[bytes] = set()
    for record in resolve(records).kept:  # a turn tagged two ways: the last tag wins
        if record.verdict != "good":
            continue
        key = encode(record.messages)
        if key in seen:
            continue
        seen.add(key)
        rows.append(TrainingRow(messages=list(record.messages), extra=dict(record.extra)))
    return rows


def _answer_of(record: TagRecord) -> tuple[list[Message], Message]:
    return list(record.messages[:-1]), record.messages[-1]


class _Answers(msgspec.Struct):
    prompt: list[Message]
    chosen: list[Message] = msgspec.field(default_factory=list)
    rejected: list[tuple[Message, bool]] = msgspec.field(default_factory=list)  # (answer, from a rewrite)


def _answers(records: Iterable[TagRecord]) -> dict[bytes, _Answers]:
    """The standing tags' answers grouped by prompt: good answers (rewrites applied) and bad ones (a bad tag, or the
    model's original answer a rewrite replaced)."""
    by_prompt: dict[bytes, _Answers] = {}
    for record in resolve(records).kept:  # the last tag of a turn wins
        if not record.messages or record.messages[-1].role != "assistant":
            continue
        prompt, answer = _answer_of(record)
        entry = by_prompt.setdefault(encode(prompt), _Answers(prompt))
        if record.verdict == "good":
            entry.chosen.append(answer)
            if record.original is not None:
                entry.rejected.append((msgspec.structs.replace(answer, content=record.original), True))
        else:
            entry.rejected.append((answer, False))
    return by_prompt


def build_pairs(records: Iterable[TagRecord]) -> tuple[list[ComparisonRow], PairCounts]:
    """Preference pairs in tinker-cookbook's comparison format (chosen = completion_A, label "A"), with counts.

    A pair is made wherever a rejected answer and a chosen one share a prompt: every rewrite against the model's
    original answer, and a bad tag against each good (or rewritten) answer to the same prompt. Equal answers make
    no pair (it teaches nothing); the same pair is written once.
    """
    pairs: list[ComparisonRow] = []
    counts = PairCounts(source="store")
    seen: set[tuple[bytes, bytes, bytes]] = set()
    for key, entry in _answers(records).items():
        for good in entry.chosen:
            for bad, from_rewrite in entry.rejected:
                identity = (key, encode(good), encode(bad))
                if identity[1] == identity[2] or identity in seen:
                    continue
                seen.add(identity)
                comparison = Comparison(
                    prompt_conversation=to_cookbook_messages(entry.prompt),
                    completion_A=to_cookbook_messages([good]),
                    completion_B=to_cookbook_messages([bad]),
                )
                pairs.append(ComparisonRow(comparison=comparison, label="A"))
                if from_rewrite:
                    counts.from_rewrites += 1
                else:
                    counts.from_tags += 1
    counts.pairs = len(pairs)
    return pairs, counts


def export_pairs(records: Iterable[TagRecord]) -> list[ComparisonRow]:
    """`build_pairs` without the counts (what `machine export pairs` writes)."""
    return build_pairs(records)[0]


def build_kto(records: Iterable[TagRecord]) -> tuple[list[KtoRow], PairCounts]:
    """Every standing good and bad tag as a KTO example (TRL's unpaired format), with counts.

    Good tags (rewrites applied) are desirable; bad tags, and the original answer a rewrite replaced, are
    undesirable. The same (prompt, completion, label) is written once."""
    rows: list[KtoRow] = []
    seen: set[tuple[bytes, bytes, bool]] = set()
    for key, entry in _answers(records).items():
        labelled = [(a, True) for a in entry.chosen] + [(a, False) for a, _ in entry.rejected]
        for answer, label in labelled:
            identity = (key, encode(answer), label)
            if identity in seen:
                continue
            seen.add(identity)
            rows.append(
                KtoRow(
                    prompt=to_cookbook_messages(entry.prompt),
                    completion=to_cookbook_messages([answer]),
                    label=label,
                )
            )
    desirable = sum(row.label for row in rows)
    counts = PairCounts(source="store", desirable=desirable, undesirable=len(rows) - desirable)
    return rows, counts


def export_kto(records: Iterable[TagRecord]) -> list[KtoRow]:
    return build_kto(records)[0]
