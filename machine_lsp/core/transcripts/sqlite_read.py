"""Reading an SQLite database another program is writing (OpenCode's), without writing it and without hanging.

A `mode=ro` connection reads the live database and its WAL; when that is refused (a read-only folder, a lock held
past LOCK_WAIT_S, a missing WAL index) the database and its WAL are copied to a private temporary folder and read
there, so the user's files are never touched. The copy serves every later read of the same state of the files.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from machine_lsp.core.transcripts.base import TranscriptError

LOCK_WAIT_S = (
    2.0  # the longest a read waits for OpenCode's lock, once per database state (then a copy is read)
)
# Copies of databases found locked, by path: (state of the files when copied, the copy). Reused while the files stay
# as they were, so listing 20 sessions of a locked database waits once, not 40 times.
_snapshots: dict[Path, tuple[tuple[int, ...], Path]] = {}
_scratch: tempfile.TemporaryDirectory[str] | None = None
_snapshot_lock = threading.Lock()


def _state(path: Path) -> tuple[int, ...]:
    state: list[int] = []
    for side in (path, path.with_name(path.name + "-wal")):
        try:
            st = side.stat()
        except FileNotFoundError:
            state += [0, 0]
            continue
        state += [st.st_mtime_ns, st.st_size]
    return tuple(state)


@contextmanager
def open_read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection that never writes the database (nor its -wal/-shm files); waits for a lock at most
    LOCK_WAIT_S once per state of the files. A database that cannot be read at all raises TranscriptError (one
    line), never OSError."""
    path = path.absolute()
    connection = _connect_live(path)
    if connection is None:
        copy = _snapshot(path)
        try:
            connection = sqlite3.connect(f"file:{quote(str(copy))}?mode=ro", uri=True, timeout=LOCK_WAIT_S)
        except sqlite3.Error as exc:
            raise TranscriptError(path.as_uri(), f"cannot open the OpenCode database: {exc}") from None
    try:
        yield connection
    finally:
        connection.close()


def _connect_live(path: Path) -> sqlite3.Connection | None:
    cached = _snapshots.get(path)
    if cached is not None and cached[0] == _state(path):
        return None  # found locked in this state before: do not wait again
    connection: sqlite3.Connection | None = None
    try:
        connection = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=LOCK_WAIT_S)
        connection.execute("select count(*) from sqlite_master").fetchone()
    except sqlite3.Error:
        if connection is not None:
            connection.close()
        return None
    return connection


def _snapshot(path: Path) -> Path:
    """A private copy of the database and its WAL, made once per state of the files (one thread at a time: the
    language server lists sessions in worker threads)."""
    with _snapshot_lock:
        return _snapshot_locked(path)


def _snapshot_locked(path: Path) -> Path:
    global _scratch
    state = _state(path)
    cached = _snapshots.get(path)
    if cached is not None and cached[0] == state:
        return cached[1]
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="machine-opencode-")  # removed at exit
    copy = Path(tempfile.mkdtemp(dir=_scratch.name)) / path.name
    try:
        shutil.copyfile(path, copy)
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
    except OSError as exc:
        shutil.rmtree(copy.parent, ignore_errors=True)
        raise TranscriptError(
            path.as_uri(), f"cannot read the OpenCode database: {exc.strerror or exc}"
        ) from None
    if cached is not None:  # one copy per database: the older state's goes (the language server lives long)
        shutil.rmtree(cached[1].parent, ignore_errors=True)
    _snapshots[path] = (state, copy)
    return copy
