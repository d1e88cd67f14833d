"""Exports from the store: SFT rows (good only) and preference pairs (a good and a bad answer to one prompt)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.conflicts import resolve
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
        key = encode(record.messages)
        if key in seen or record.id in copies:
            continue
        seen.add(key)
        rows.append(TrainingRow(messages=list(record.messages), extra=dict(record.extra)))
    return rows


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
    return list(record.messages[:-1]), record.messages[-1]


def export_pairs(records: Iterable[TagRecord]) -> list[dict[str, Any]]:
    """Preference pairs `{"prompt": [...], "chosen": [answer], "rejected": [answer]}`.

    Messages are plain dicts (the conversational format preference trainers and tinker-cookbook's Comparison
    take). A pair is made wherever a rejected answer and a chosen one share a prompt: a bad record against each
    good (or rewritten) answer to the same prompt, and every rewrite against the model's original answer.
    """
    chosen: dict[bytes, list[Message]] = {}
    rejected: dict[bytes, list[Message]] = {}
    prompts: dict[bytes, list[Message]] = {}
    for record in resolve(records).kept:  # the last tag of a turn wins
        if not record.messages or record.messages[-1].role != "assistant":
            continue
        prompt, answer = _answer_of(record)
        key = encode(prompt)
        prompts.setdefault(key, prompt)
        if record.verdict == "good":
            chosen.setdefault(key, []).append(answer)
            if record.original is not None:
                original = msgspec.structs.replace(answer, content=record.original)
                rejected.setdefault(key, []).append(original)
        else:
            rejected.setdefault(key, []).append(answer)
    pairs: list[dict[str, Any]] = []
    seen: set[tuple[bytes, bytes, bytes]] = set()
    for key, prompt in prompts.items():
        for good in chosen.get(key, []):
            for bad in rejected.get(key, []):
                identity = (key, encode(good), encode(bad))
                if identity[1] == identity[2] or identity in seen:
                    continue  # a pair of equal answers teaches nothing
                seen.add(identity)
                pairs.append(
                    {
                        "prompt": to_cookbook_messages(prompt),
                        "chosen": to_cookbook_messages([good]),
                        "rejected": to_cookbook_messages([bad]),
                    }
                )
    return pairs
