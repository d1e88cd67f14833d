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
from machine_lsp.core.transcripts import TranscriptError, load_session
from machine_lsp.lsp.features import CommandError, CommandMethod, LanguageFeature
from machine_lsp.lsp.replies import SessionsReply, SessionTurnsReply
from machine_lsp.lsp.session_replies import session_entries, session_turns_reply


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
        return SessionsReply(project=str(project), sessions=session_entries(found[:limit]))

    async def session_turns(self, args: dict[str, Any]) -> SessionTurnsReply:
        from machine_lsp.core.store import Store

        spec = args.get("session")
        if not isinstance(spec, str) or not spec:
            raise CommandError(message="missing 'session' (a session id or a unique prefix of one)")
        start = self.server.project_start(args.get("uri"))
        try:
            session = await _in_thread(find_session, spec, start)
            turns = await _in_thread(load_session, session)
        except TranscriptError as exc:
            raise CommandError(message=str(exc)) from None
        store = Store.open(start)
        records = await _in_thread(store.records)
        return session_turns_reply(session, turns, records)


async def _in_thread(func: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(func, *args, **kwargs))
