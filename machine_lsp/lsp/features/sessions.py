"""`machine.sessions` and `machine.sessions.turns`: the project's agent sessions and their turns, for the editor's
session list (the tag itself is `machine.tag` with `from`, in tagging.py).

Reading logs is file work (a long session is megabytes): it runs in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from lsprotocol import types

from machine_lsp.core.agent_names import harness_name
from machine_lsp.core.sessions import HARNESSES, Homes, find_session, find_sessions, project_root
from machine_lsp.core.transcripts import TranscriptError
from machine_lsp.lsp.features import CommandError, CommandMethod, LanguageFeature
from machine_lsp.lsp.replies import SessionEntry, SessionsReply, SessionTurn, SessionTurnsReply

PREVIEW_CHARS = 200


class SessionsFeature(LanguageFeature):
    def commands(self) -> dict[str, CommandMethod]:
        return {"machine.sessions": self.sessions, "machine.sessions.turns": self.session_turns}

    async def sessions(self, args: dict[str, Any]) -> SessionsReply:
        harness = args.get("harness")
        harness = harness_name(harness) if isinstance(harness, str) else harness
        if harness is not None and harness not in HARNESSES:
            raise CommandError(message=f"harness must be one of {', '.join(HARNESSES)}, not {harness!r}")
        limit = args.get("limit", 20)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise CommandError(message="limit must be a whole number ≥ 0")
        project = project_root(self.server.project_start(args.get("uri")))
        homes = Homes()
        found = await _in_thread(find_sessions, project, harness=harness, homes=homes, count_turns=limit)
        for note in homes.notes:  # a source that could not be read (the others are listed): in the output log
            self.server.window_log_message(
                types.LogMessageParams(type=types.MessageType.Warning, message=note)
            )
        return SessionsReply(
            project=str(project),
            sessions=[
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
                for s in found[:limit]
            ],
        )

    async def session_turns(self, args: dict[str, Any]) -> SessionTurnsReply:
        from machine_lsp.core.export import pairs_by_prompt
        from machine_lsp.core.schema import encode
        from machine_lsp.core.store import Store
        from machine_lsp.core.turn_marks import answer_text, last_prompt, turn_marks

        spec = args.get("session")
        if not isinstance(spec, str) or not spec:
            raise CommandError(message="missing 'session' (a session id or a unique prefix of one)")
        start = self.server.project_start(args.get("uri"))
        try:
            session = await _in_thread(find_session, spec, start)
            turns = await _in_thread(session.load)
        except TranscriptError as exc:
            raise CommandError(message=str(exc)) from None
        store = Store.open(start)
        records = await _in_thread(store.records)
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


async def _in_thread(func: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(func, *args, **kwargs))
