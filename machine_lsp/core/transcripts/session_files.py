"""What a harness adapter needs to find its sessions: where the homes are, and a log's first objects.

`sessions` asks every adapter in `transcripts.ADAPTERS` that has a `find_sessions` for the sessions it keeps; each
adapter says where its harness writes them (from the environment, so tests and unusual setups can move them) and
what in a log's first lines places it (the directory it ran in). The reading of a log's head is shared here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

HEAD_BYTES = 256 * 1024  # enough for the first lines of any log (Claude Code's first lines can be long)


@dataclass
class Session:
    harness: str
    id: str
    path: Path  # the log (for OpenCode: the database)
    cwd: str
    updated: float  # seconds since the epoch
    turns: int | None = None  # None: not counted (or the log could not be read)
    first_prompt: str = ""
    problem: str | None = None  # why the log could not be read


@dataclass
class Homes:
    """The environment the harnesses' homes come from (HOME and each harness's own variable)."""

    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    notes: list[str] = field(default_factory=list)  # one line per source that could not be read

    def home(self) -> Path:
        return Path(self.env.get("HOME") or Path.home())

    def dir(self, variable: str, default: Path) -> Path:
        """The directory `variable` names, else `default`."""
        value = self.env.get(variable)
        return Path(value).expanduser() if value else default


def file_session(harness: str, path: Path, session_id: object, cwd: object) -> Session:
    """A session kept in one log file: its id (else the file's stem), the directory it ran in, its mtime."""
    try:
        updated = path.stat().st_mtime
    except OSError:
        updated = 0.0
    return Session(
        harness,
        session_id if isinstance(session_id, str) and session_id else path.stem,
        path,
        cwd if isinstance(cwd, str) else "",
        updated,
    )


def glob_files(root: Path, pattern: str) -> list[Path]:
    try:
        return [path for path in root.glob(pattern) if path.is_file()] if root.is_dir() else []
    except OSError:
        return []


def head_objects(path: Path) -> Iterable[dict]:
    """The JSON objects among a log's first lines (only its head is read)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return
    for line in head.split(b"\n")[:20]:
        if not line.strip():
            continue
        try:
            obj = msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError):
            continue  # a line longer than the head, or broken: the next one may do
        if isinstance(obj, dict):
            yield obj


def first_object(path: Path) -> dict | None:
    return next(iter(head_objects(path)), None)


def tree_sessions(harness: str, paths: list[Path]) -> Iterable[Session]:
    """Logs whose lines carry `cwd` (Claude Code's, Qwen Code's): the first line naming one places the session."""
    for path in paths:
        cwd = None
        session_id = path.stem
        for obj in head_objects(path):
            if isinstance(obj.get("cwd"), str):
                cwd = obj["cwd"]
                if isinstance(obj.get("sessionId"), str):
                    session_id = obj["sessionId"]
                break
        if cwd is not None:
            yield file_session(harness, path, session_id, cwd)
