"""Which turns of a session the store already speaks about, and what it says (the tag that stands).

A record matches a turn when it holds the same conversation up to the answer the model gave (conflicts.turn_key:
a rewrite is matched by its original), or when it was tagged from the same place (log, line span) — so a tag taken
with the tool trace still marks the turn. Where records contradict, the one that came last stands
(conflicts.resolve), as in an export. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from machine_lsp.core.conflicts import resolve, turn_key
from machine_lsp.core.schema import TagRecord, Verdict, encode, text_of
from machine_lsp.core.transcripts.base import Turn


@dataclass
class TurnMark:
    verdict: Verdict | None = None  # what the standing tag says; None: not tagged
    rewritten: bool = False  # the standing good tag replaced the answer
    records: list[str] = field(default_factory=list)  # ids of every record on this turn, store order
    conflict: bool = False  # some standing records on this turn contradict (the last one stands)


def turn_marks(turns: Sequence[Turn], records: Sequence[TagRecord]) -> list[TurnMark]:
    """One mark per turn, in order."""
    by_key: dict[bytes, list[TagRecord]] = {}
    by_place: dict[tuple[str, int | None], list[TagRecord]] = {}
    for record in records:
        by_key.setdefault(turn_key(record), []).append(record)
        by_place.setdefault((record.source.uri, record.source.end_line), []).append(record)
    resolution = resolve(records)
    kept_ids = {record.id for record in resolution.kept}
    dropped_ids = {record.id for record in resolution.dropped}  # outvoted (a contradiction), not edited away
    position = {record.id: index for index, record in enumerate(records)}
    marks = []
    for turn in turns:
        key = encode(turn.messages[: turn.answer_index + 1])
        matched = {r.id: r for r in by_key.get(key, []) + by_place.get((turn.source.uri, turn.end_line), [])}
        ordered = sorted(matched.values(), key=lambda r: position[r.id])  # store order
        standing = [r for r in ordered if r.id in kept_ids]
        mark = TurnMark(records=[r.id for r in ordered], conflict=any(r.id in dropped_ids for r in ordered))
        if standing:
            last = standing[-1]
            mark.verdict, mark.rewritten = last.verdict, last.original is not None
        marks.append(mark)
    return marks


def last_prompt(turn: Turn) -> str:
    """The last user message before the answer (the prompt the answer replies to)."""
    before = turn.messages[: turn.answer_index]
    return next((text_of(m) for m in reversed(before) if m.role == "user" and text_of(m).strip()), "")


def answer_text(turn: Turn) -> str:
    return text_of(turn.messages[turn.answer_index])
