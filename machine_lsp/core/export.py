"""Exports from the store: SFT rows (good only) and preference pairs (a good and a bad answer to one prompt)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from machine_lsp.core.conflicts import resolve
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
