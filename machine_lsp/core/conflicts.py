"""Contradictions in the store: one turn told two different things, and which tag wins.

A record speaks about one turn: the conversation up to the answer the model gave (for a rewrite, the model's
original answer, not the rewrite). What it says about that answer is its claim: `good`, `bad`, or "rewrite it to X"
(which also says the original was not good enough). Two claims on the same turn contradict when they cannot both
hold: good vs bad, good vs any rewrite, and two different rewrites. A bad tag and a rewrite agree.

The tag that came last (store order, which is append order) wins: walking from the newest record back, a record is
kept unless it contradicts one already kept. Before that, edits are applied: a record that a later one
`supersedes` (`machine retag`, `machine untag`) is history, not a claim, and an untag record claims nothing.
Nothing is deleted from the store; this only decides what an export uses and lets `machine tagged --conflicts`
show the history. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from machine_lsp.core.schema import TagRecord, encode


@dataclass
class Conflict:
    """One turn whose records contradict each other: all of them (store order), the winners and the dropped."""

    records: list[TagRecord]
    kept: list[TagRecord] = field(default_factory=list)
    dropped: list[TagRecord] = field(default_factory=list)
    winners: dict[str, TagRecord] = field(
        default_factory=dict
    )  # dropped record id -> the newest one it contradicts

    @property
    def kinds(self) -> list[str]:
        """What contradicts what, e.g. ["good and bad", "rewrite of an answer also tagged good"]."""
        claims = {_claim_kind(record) for record in self.records}
        out = []
        if {"good", "bad"} <= claims:
            out.append("good and bad")
        if {"good", "rewrite"} <= claims:
            out.append("rewrite of an answer also tagged good")
        rewrites = {encode(record.messages[-1]) for record in self.records if record.original is not None}
        if len(rewrites) > 1:
            out.append("different rewrites")
        return out

    def dropped_because(self, record: TagRecord) -> TagRecord:
        """The later kept record that `record` contradicts (the newest such: the tag that won)."""
        return self.winners[record.id]


@dataclass
class Resolution:
    kept: list[TagRecord]  # every record an export should use, store order
    conflicts: list[Conflict]
    replaced: dict[str, TagRecord] = field(
        default_factory=dict
    )  # superseded record id -> the record replacing it

    @property
    def dropped(self) -> list[TagRecord]:
        return [record for conflict in self.conflicts for record in conflict.dropped]


def turn_key(record: TagRecord) -> bytes:
    """The turn a record speaks about: its prompt and the answer the model gave (the original of a rewrite)."""
    if not record.messages:
        return encode(["empty", record.id])
    *prompt, answer = record.messages
    if record.original is not None:
        answer = msgspec.structs.replace(answer, content=record.original)
    return encode([*prompt, answer])


def claim_kind(record: TagRecord) -> str:
    """What a record says of its turn, in a word: good, bad, rewrite (or untag, for a withdrawal)."""
    return "untag" if record.untag else _claim_kind(record)


def _claim_kind(record: TagRecord) -> str:
    if record.verdict == "bad":
        return "bad"
    return "rewrite" if record.original is not None else "good"


def _contradicts(a: TagRecord, b: TagRecord) -> bool:
    kinds = {_claim_kind(a), _claim_kind(b)}
    if kinds == {"good", "bad"} or kinds == {"good", "rewrite"}:
        return True
    if kinds == {"rewrite"}:
        return encode(a.messages[-1]) != encode(b.messages[-1])
    return False


def edits(records: Iterable[TagRecord]) -> dict[str, TagRecord]:
    """Superseded record id -> the later record that replaces or withdraws it (the first one, store order)."""
    replaced: dict[str, TagRecord] = {}
    for record in records:
        if record.supersedes is not None:
            replaced.setdefault(record.supersedes, record)
    return replaced


def standing(records: Iterable[TagRecord]) -> list[TagRecord]:
    """The records that still claim something: neither superseded by a later edit nor an untag."""
    ordered = list(records)
    replaced = edits(ordered)
    return [record for record in ordered if not record.untag and record.id not in replaced]


def resolve(records: Iterable[TagRecord]) -> Resolution:
    """Which records stand (edits applied, then the last tag wins) and the contradictions found, in store order."""
    everything = list(records)
    replaced = edits(everything)
    ordered = standing(everything)
    groups: dict[bytes, list[int]] = {}
    for index, record in enumerate(ordered):
        groups.setdefault(turn_key(record), []).append(index)
    dropped_indexes: set[int] = set()
    conflicts: list[tuple[int, Conflict]] = []
    for indexes in groups.values():
        if len(indexes) < 2:
            continue
        kept: list[int] = []
        dropped: list[int] = []
        winners: dict[str, TagRecord] = {}
        for index in reversed(
            indexes
        ):  # newest first: a record stands unless a later standing one contradicts it
            winner = next((other for other in kept if _contradicts(ordered[index], ordered[other])), None)
            if winner is None:
                kept.append(index)
            else:
                dropped.append(index)
                winners[ordered[index].id] = ordered[winner]
        if not dropped:
            continue
        dropped_indexes.update(dropped)
        conflict = Conflict(
            records=[ordered[i] for i in indexes],
            kept=[ordered[i] for i in sorted(kept)],
            dropped=[ordered[i] for i in sorted(dropped)],
            winners=winners,
        )
        conflicts.append((indexes[0], conflict))
    conflicts.sort(key=lambda item: item[0])
    kept_records = [record for index, record in enumerate(ordered) if index not in dropped_indexes]
    return Resolution(kept=kept_records, conflicts=[conflict for _, conflict in conflicts], replaced=replaced)


def describe_drop(conflict: Conflict, record: TagRecord) -> str:
    """One line for an export: which record was left out and which later one won."""
    winner = conflict.dropped_because(record)
    return (
        f"left out record {record.id} ({_claim_kind(record)}, {record.created_at}): "
        f"record {winner.id} ({_claim_kind(winner)}, {winner.created_at}) tags the same turn later"
    )
