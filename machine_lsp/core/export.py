"""Exports from the store: SFT rows (good only), preference pairs (DPO: a chosen and a rejected answer to one
prompt, in tinker-cookbook's comparison format) and KTO examples (every good and bad answer, unpaired)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from machine_lsp.core.conflicts import resolve
from machine_lsp.core.preference import Comparison, ComparisonRow, KtoRow, PairCounts
from machine_lsp.core.schema import Message, TagRecord, TrainingRow, encode, text_of, to_cookbook_messages


def export_sft(records: Iterable[TagRecord]) -> list[TrainingRow]:
    """Good records as training rows, rewrites applied (a record's messages already end with the rewrite).

    Bad records never enter SFT; the same conversation tagged good twice is written once, and so is one exchange
    tagged twice from two copies of it (see `exchange_copies`).
    """
    rows: list[TrainingRow] = []
    seen: set[bytes] = set()
    good = [
        record for record in resolve(records).kept if record.verdict == "good"
    ]  # the last tag of a turn wins
    copies = exchange_copies(good)
    for record in good:
        messages = chat_order(record.messages)
        key = encode(messages)
        if key in seen or record.id in copies:
            continue
        seen.add(key)
        rows.append(TrainingRow(messages=messages, extra=dict(record.extra)))
    return rows


def chat_order(messages: Iterable[Message]) -> list[Message]:
    """The messages in the order chat-format consumers accept: an assistant message's tool calls followed directly
    by their results. OpenAI Chat Completions refuses anything else between them (400: tool_calls "must be
    followed by tool messages"), and the cookbook renderers, converting that API's messages, expect the same.

    Codex logs can put a developer message (an approval, a notice) between a call and its result, faithfully to
    the Responses API, which accepts it; such a message is moved to just after the call's last result (or before
    the next assistant message, when a result never came). Nothing else changes place.
    """
    ordered: list[Message] = []
    held: list[Message] = []  # what came between the open calls and their results
    pending: set[str] = set()  # the open calls' ids
    for message in messages:
        if pending and message.role == "tool" and message.tool_call_id in pending:
            ordered.append(message)
            pending.discard(message.tool_call_id)
            if not pending:
                ordered.extend(held)
                held.clear()
            continue
        if pending and message.role not in ("assistant", "tool"):
            held.append(message)
            continue
        ordered.extend(held)
        held.clear()
        ordered.append(message)
        pending = {call.id for call in message.tool_calls or []} if message.role == "assistant" else set()
    return ordered + held


def exchange_copies(records: Iterable[TagRecord]) -> dict[str, TagRecord]:
    """Good records that are a copy of another one's exchange, id -> the record that trains instead.

    The same answer is often tagged twice: from the agent's session log, which does not hold the agent's system
    prompt, and from `.machine/served/`, which holds the whole request the model answered. Both say the same about
    the same exchange (the user, assistant and tool messages match), but as two rows they would train it twice,
    once in a context the model never saw. The record with the system prompt trains: it is what the model saw,
    and what it sees when it is served to that agent again. Only a copy without any system message gives way;
    two records under different system prompts are two contexts and both train.
    """
    by_exchange: dict[bytes, list[TagRecord]] = {}
    for record in records:
        by_exchange.setdefault(_exchange_key(record.messages), []).append(record)
    copies: dict[str, TagRecord] = {}
    for group in by_exchange.values():
        with_system = [record for record in group if any(m.role == "system" for m in record.messages)]
        if not with_system or len(with_system) == len(group):
            continue
        keeper = with_system[-1]  # the newest tag of that context
        for record in group:
            if not any(m.role == "system" for m in record.messages):
                copies[record.id] = keeper
    return copies


def describe_copy(dropped: TagRecord, kept: TagRecord) -> str:
    """One line for an export: which copy of an exchange was left out, and which record trains it."""
    return (
        f"left out record {dropped.id} ({_place(dropped)}): record {kept.id} ({_place(kept)}) tags the same "
        "exchange with the system prompt the model saw, and trains it once"
    )


def _place(record: TagRecord) -> str:
    where = record.source.harness or Path(record.source.uri.removeprefix("file://")).name
    return f"{where}:{record.source.line}" if record.source.line and not record.source.harness else where


def _exchange_key(messages: Iterable[Message]) -> bytes:
    """The exchange without its system messages, as the model sees text: roles, visible texts, tool calls."""
    return encode(
        [
            [m.role, text_of(m), [[c.function.name, c.function.arguments] for c in m.tool_calls or []]]
            for m in messages
            if m.role != "system"
        ]
    )


def _answer_of(record: TagRecord) -> tuple[list[Message], Message]:
    messages = chat_order(record.messages)
    return messages[:-1], messages[-1]


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
    for _key, prompt, good, bad, from_rewrite in _pairs(records):
        comparison = Comparison(
            prompt_conversation=to_cookbook_messages(prompt),
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


def _pairs(records: Iterable[TagRecord]) -> Iterator[tuple[bytes, list[Message], Message, Message, bool]]:
    """(prompt key, prompt, chosen, rejected, from a rewrite) of every distinct pair the standing tags make."""
    seen: set[tuple[bytes, bytes, bytes]] = set()
    for key, entry in _answers(records).items():
        for good in entry.chosen:
            for bad, from_rewrite in entry.rejected:
                identity = (key, encode(good), encode(bad))
                if identity[1] == identity[2] or identity in seen:
                    continue
                seen.add(identity)
                yield key, entry.prompt, good, bad, from_rewrite


def pairs_by_prompt(records: Iterable[TagRecord]) -> dict[bytes, int]:
    """How many pairs `build_pairs` makes on each prompt, keyed `encode(prompt messages)` (the Sessions view's
    marker on the turns that train a preference objective)."""
    counts: dict[bytes, int] = {}
    for key, *_ in _pairs(records):
        counts[key] = counts.get(key, 0) + 1
    return counts


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
