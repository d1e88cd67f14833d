"""OpenCode's SQLite database (`~/.local/share/opencode/opencode.db`), read read-only: its sessions, and one
session's messages in `opencode export`'s shape, read into turns by `opencode`'s reader."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.transcripts.base import TranscriptError, TurnList
from machine_lsp.core.transcripts.opencode_messages import HARNESS, MessageReader
from machine_lsp.core.transcripts.sqlite_read import open_read_only

SQLITE_MAGIC = b"SQLite format 3\x00"


def is_opencode_db(path: Path) -> bool:
    """Whether `path` is an SQLite file. Only a regular file is opened: a FIFO or a device is left to the
    text reader, which refuses it (opening a FIFO to sniff it would block)."""
    try:
        if not path.is_file():
            return False
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


@dataclass
class DbSession:
    id: str
    directory: str
    title: str
    time_updated: int  # ms since the epoch
    time_created: int
    parent_id: str | None
    project_worktree: str | None


def db_sessions(path: Path) -> list[DbSession]:
    """Every session in an OpenCode database, newest first."""
    uri = path.absolute().as_uri()
    try:
        with open_read_only(path) as connection:
            rows = connection.execute(
                "select s.id, s.directory, s.title, s.time_updated, s.time_created, s.parent_id, p.worktree "
                "from session s left join project p on p.id = s.project_id "
                "order by s.time_updated desc, s.id desc"
            ).fetchall()
    except sqlite3.Error as exc:
        raise TranscriptError(uri, f"not an OpenCode database ({exc})") from None
    return [DbSession(*row) for row in rows]


def db_session_messages(connection: sqlite3.Connection, session_id: str) -> list[dict[str, Any]]:
    """A session's messages as `opencode export` writes them: `{"info": {...}, "parts": [...]}` in order."""
    messages: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    for message_id, data in connection.execute(
        "select id, data from message where session_id = ? order by time_created, id", (session_id,)
    ):
        info = _decode_object(data)
        info["id"] = message_id
        entry: dict[str, Any] = {"info": info, "parts": []}
        by_id[message_id] = entry
        messages.append(entry)
    for message_id, part_id, data in connection.execute(
        "select message_id, id, data from part where session_id = ? order by message_id, id", (session_id,)
    ):
        entry = by_id.get(message_id)
        if entry is not None:
            part = _decode_object(data)
            part["id"] = part_id
            entry["parts"].append(part)
    return messages


def load_db_turns(
    path: Path, session_id: str | None = None, *, trace: bool = False, thinking: bool = False
) -> TurnList:
    """The turns of one session of an OpenCode database (default: the one updated last)."""
    base_uri = path.absolute().as_uri()
    sessions = db_sessions(path)
    if session_id is None:
        top_level = [session for session in sessions if not session.parent_id] or sessions
        if not top_level:
            raise TranscriptError(base_uri, "the OpenCode database holds no session")
        session_id = top_level[0].id
    elif not any(session.id == session_id for session in sessions):
        raise TranscriptError(base_uri, f"no session {session_id} in this OpenCode database")
    try:
        with open_read_only(path) as connection:
            messages = db_session_messages(connection, session_id)
    except sqlite3.Error as exc:
        raise TranscriptError(base_uri, f"not an OpenCode database ({exc})") from None
    uri = f"{base_uri}#{session_id}"
    result = TurnList()
    reader = MessageReader(uri, session_id, trace=trace, thinking=thinking)
    turns = reader.read(messages, None, result)
    turns.line_count = len(turns)
    turns.uri = uri
    turns.adapter = HARNESS
    return turns


def _decode_object(data: Any) -> dict[str, Any]:
    try:
        obj = msgspec.json.decode(data)
    except (msgspec.DecodeError, TypeError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}
