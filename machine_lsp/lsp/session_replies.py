"""`machine.sessions` and `machine.sessions.turns` replies from what the core found: each session's entry, and each
turn with its standing tag and the preference pairs its prompt makes. Pure (no server)."""

from __future__ import annotations

from typing import Any

from machine_lsp.core.export import pairs_by_prompt
from machine_lsp.core.schema import TagRecord, encode
from machine_lsp.core.turn_marks import answer_text, last_prompt, turn_marks
from machine_lsp.lsp.replies import SessionEntry, SessionTurn, SessionTurnsReply

PREVIEW_CHARS = 200


def session_entries(found: list[Any]) -> list[SessionEntry]:
    """The sessions core.sessions.find_sessions found, as the editor's session list shows them."""
    return [
        SessionEntry(
            harness=s.harness,
            id=s.id,
            path=str(s.path),
            cwd=s.cwd,
            updated=s.updated,
            turns=s.turns,
            first_prompt=s.first_prompt,
            problem=s.problem,
        )
        for s in found
    ]


def session_turns_reply(session: Any, turns: Any, records: list[TagRecord]) -> SessionTurnsReply:
    """`session`'s `turns`, numbered from 1, each marked with what the store's `records` say of it."""
    marks = turn_marks(turns, records)
    pairs = pairs_by_prompt(records)
    return SessionTurnsReply(
        harness=session.harness,
        id=session.id,
        path=str(session.path),
        turns=[
            SessionTurn(
                number=number,
                line=turn.line,
                end_line=turn.end_line,
                uri=turn.source.uri,
                prompt=_short(last_prompt(turn)),
                answer=_short(answer_text(turn)),
                blocked=turn.tags_blocked,
                verdict=mark.verdict,
                rewritten=mark.rewritten,
                records=mark.records,
                conflict=mark.conflict,
                pairs=pairs.get(encode(turn.messages[: turn.answer_index]), 0) if mark.verdict else 0,
            )
            for number, (turn, mark) in enumerate(zip(turns, marks, strict=True), start=1)
        ],
        problems=[str(problem) for problem in getattr(turns, "problems", [])],
    )


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"
