"""OpenCode sessions: the SQLite database (`~/.local/share/opencode/opencode.db`, read-only) and `opencode export`.

OpenCode (npm `opencode-ai`, checked against 1.18.33) keeps each session as messages (`info`: role, parentID,
finish, error, summary, modelID/providerID) with parts (text, reasoning, tool, file, step-start/step-finish,
compaction, subtask). The export JSON is `{"info": session, "messages": [{"info", "parts"}]}`; the database holds
the same objects in the `session`, `message` and `part` tables (`data` columns, JSON).

The messages become turns in opencode_messages.py, for the export and the database alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.transcripts.base import TranscriptError, TurnList
from machine_lsp.core.transcripts.opencode_messages import HARNESS, MessageReader, text_value
from machine_lsp.core.transcripts.session_files import Homes, Session

CHECKED_VERSION = "1.18.33"


class OpenCodeExportAdapter:
    """`opencode export <id> > session.json` (pretty-printed or on one line)."""

    name = HARNESS
    supported = "OpenCode (opencode.db, `opencode export` JSON)"

    def __init__(self, describe_document: Callable[[Any], str]) -> None:
        """`describe_document`: the registry's words for a JSON document that is not an export (they list every
        format read, which only the registry knows)."""
        self.describe_document = describe_document

    def sessions_home(self, homes: Homes) -> Path:
        return homes.dir("XDG_DATA_HOME", homes.home() / ".local" / "share") / "opencode" / "opencode.db"

    def find_sessions(self, homes: Homes, project: Path) -> Iterator[Session]:
        """The database's top-level sessions; `session.directory` is the directory each ran in."""
        from machine_lsp.core.transcripts.opencode_db import db_sessions

        database = self.sessions_home(homes)
        if not database.is_file():
            return
        try:
            rows = db_sessions(database)
        except TranscriptError as exc:
            homes.notes.append(f"opencode: {database}: {exc.message}; its sessions are not listed")
            return
        for row in rows:
            if (
                not row.parent_id
            ):  # a sub-agent's session is listed under its parent's tool call, not on its own
                yield Session(self.name, row.id, database, row.directory, row.time_updated / 1000)

    def reads_file(self, path: Path) -> bool:
        """The database is SQLite, not text: it is read here, read-only, before any text sniffing."""
        from machine_lsp.core.transcripts.opencode_db import is_opencode_db

        return is_opencode_db(path)

    def load_file(self, path: Path, *, trace: bool, thinking: bool) -> TurnList:
        from machine_lsp.core.transcripts.opencode_db import load_db_turns

        return load_db_turns(path, trace=trace, thinking=thinking)

    def load_session(self, session: Session, *, trace: bool, thinking: bool) -> TurnList:
        from machine_lsp.core.transcripts.opencode_db import load_db_turns

        return load_db_turns(session.path, session.id, trace=trace, thinking=thinking)

    def sniff(self, first_line: str) -> bool:
        stripped = first_line.strip()
        if stripped == "{":
            return True  # a pretty-printed JSON document; turns() says so if it is not an OpenCode export
        try:
            obj = msgspec.json.decode(stripped)
        except (msgspec.DecodeError, RecursionError):
            return False
        return _is_export(obj)

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        result = TurnList()
        result.line_count = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        try:
            document = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            reason = str(exc).split(" (byte", 1)[0].removeprefix("JSON is malformed: ")
            result.problems.append(TranscriptError(uri, f"not valid JSON: {reason}", 1, 1))
            return result
        except RecursionError:
            result.problems.append(TranscriptError(uri, "JSON nested too deeply to read", 1, 1))
            return result
        if not _is_export(document):
            result.adapter = (
                "unknown"  # nobody's format: every line of it gets this answer (transcripts.turn_at)
            )
            result.problems.append(
                TranscriptError(
                    uri,
                    self.describe_document(document),
                    1,
                    1,
                )
            )
            return result
        messages = [m for m in document["messages"] if isinstance(m, dict)]
        session = document["info"]
        lines = _id_lines(text, messages)
        reader = MessageReader(uri, text_value(session.get("id")), trace=trace, thinking=thinking)
        return reader.read(messages, lambda index, message_id: lines.get(message_id, 1), result)


def _is_export(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("info"), dict)
        and isinstance(obj.get("messages"), list)
        and isinstance(obj["info"].get("id"), str)
        and obj["info"]["id"].startswith("ses_")
    )


def _id_lines(text: str, messages: list[dict[str, Any]]) -> dict[str, int]:
    """Line of each message id's first appearance (its `info`, which the export writes before its parts)."""
    lines: dict[str, int] = {}
    position = 0
    line = 1
    for message in messages:
        message_id = text_value((message.get("info") or {}).get("id"))
        if not message_id:
            continue
        found = text.find(f'"{message_id}"', position)
        if found == -1:
            continue
        line += text.count("\n", position, found)
        position = found
        lines[message_id] = line
    return lines
