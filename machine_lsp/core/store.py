"""The Machine store: `.machine/` at the project root, tagged turns in `.machine/tagged.jsonl`.

Durability rules: every append is one `os.write` of a whole line while holding an exclusive `fcntl.flock` on the
file, followed by `fsync`, so concurrent taggers never interleave. A crash can still leave a torn last line (no
trailing newline); the next reader or writer moves it aside to `tagged.jsonl.torn-<timestamp>` and records a
warning, so it is never silently dropped or merged into the next record.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from machine_lsp.core.schema import Message, TagRecord, Verdict, decode_tag_record, encode

MACHINE_DIR = ".machine"
TAGGED_FILE = "tagged.jsonl"
RUNS_DIR = "runs"
MACHINE_HOME_ENV = "MACHINE_HOME"


class StoreError(Exception):
    """The store cannot be read or written (permissions, a file where a directory should be, ...)."""


class StoreCounts(msgspec.Struct):
    good: int = 0
    bad: int = 0
    rewritten: int = 0
    traced: int = 0
    total: int = 0


def find_machine_dir(start: Path | None = None) -> Path:
    """The `.machine` directory to use (it may not exist yet).

    `MACHINE_HOME` names it directly; else the nearest ancestor of `start` (default: cwd) holding `.machine/`;
    else `.machine` under the git root; else under `start` itself.
    """
    override = os.environ.get(MACHINE_HOME_ENV)
    if override:
        return Path(override).expanduser().absolute()
    here = (start or Path.cwd()).absolute()
    if here.is_file():
        here = here.parent
    candidates = [here, *here.parents]
    for directory in candidates:
        if (directory / MACHINE_DIR).is_dir():
            return directory / MACHINE_DIR
    for directory in candidates:
        if (directory / ".git").exists():
            return directory / MACHINE_DIR
    return here / MACHINE_DIR


def find_project_root(start: Path | None = None) -> Path:
    """The project directory: the one holding the `.machine` dir (see find_machine_dir)."""
    return find_machine_dir(start).parent


def _timestamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _conversation_key(messages: Sequence[Message]) -> bytes:
    return encode(list(messages))


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.project_dir = root.parent
        self.tagged_path = root / TAGGED_FILE
        self.runs_dir = root / RUNS_DIR
        self.warnings: list[str] = []

    @classmethod
    def open(cls, start: Path | None = None) -> Store:
        """Locate the store; nothing is created until the first write."""
        return cls(find_machine_dir(start))

    # -- writing --------------------------------------------------------------------------------------------

    def append(self, record: TagRecord) -> TagRecord:
        line = encode(record) + b"\n"
        self._ensure_root()
        with self._locked(fcntl.LOCK_EX, create=True) as fd:
            assert fd is not None
            # A torn tail must be moved aside first, or this line would be glued onto it.
            self._repair_torn_tail_locked(fd)
            written = os.write(fd, line)
            # A short write on a regular file is rare (disk full, a signal); finish the line before unlocking.
            while written < len(line):
                written += os.write(fd, line[written:])
            # The line is whole in the file: let the next writer in while this one waits for the disk.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.fsync(fd)
        return record

    # -- reading --------------------------------------------------------------------------------------------

    def records(self) -> list[TagRecord]:
        """Every whole record, in file order. Repairs a torn tail first; lines that do not decode stay in the
        file and are reported in `warnings`."""
        data = self._read_repairing()
        records: list[TagRecord] = []
        for line_no, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                records.append(decode_tag_record(raw))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                self._warn(f"{self.tagged_path}:{line_no}: not a tag record, left in place ({exc})")
        return records

    def find_same(self, messages: Sequence[Message], verdict: Verdict) -> TagRecord | None:
        """The record already holding this exact conversation with this verdict, if any."""
        key = _conversation_key(messages)
        for record in self.records():
            if record.verdict == verdict and _conversation_key(record.messages) == key:
                return record
        return None

    def counts(self, records: Sequence[TagRecord] | None = None) -> StoreCounts:
        counts = StoreCounts()
        for record in self.records() if records is None else records:
            counts.total += 1
            if record.verdict == "good":
                counts.good += 1
            else:
                counts.bad += 1
            if record.original is not None:
                counts.rewritten += 1
            if record.trace:
                counts.traced += 1
        return counts

    def torn_files(self) -> list[Path]:
        """Torn tails moved aside so far (they are kept for the user to inspect)."""
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob(f"{TAGGED_FILE}.torn-*"))

    # -- internals ------------------------------------------------------------------------------------------

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store at {self.root}: {exc.strerror or exc}") from None
        if not self.root.is_dir():
            raise StoreError(f"{self.root} is not a directory")

    @contextmanager
    def _locked(self, mode: int, *, create: bool = False) -> Iterator[int | None]:
        """Open tagged.jsonl and hold a flock on it; yields None when the file does not exist (and create=False)."""
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        try:
            fd = os.open(self.tagged_path, flags, 0o644)
        except FileNotFoundError:
            if create:
                raise StoreError(f"cannot create {self.tagged_path}") from None
            yield None
            return
        except IsADirectoryError:
            raise StoreError(f"{self.tagged_path} is a directory, expected a JSONL file") from None
        except PermissionError:
            if create or mode == fcntl.LOCK_EX:
                raise StoreError(f"cannot write {self.tagged_path}: permission denied") from None
            fd = self._open_read_only()
        try:
            fcntl.flock(fd, mode)
            yield fd
        finally:
            os.close(fd)  # closing releases the flock

    def _open_read_only(self) -> int:
        try:
            return os.open(self.tagged_path, os.O_RDONLY)
        except OSError as exc:
            raise StoreError(f"cannot read {self.tagged_path}: {exc.strerror or exc}") from None

    def _read_repairing(self) -> bytes:
        with self._locked(fcntl.LOCK_SH) as fd:
            if fd is None:
                return b""
            data = _read_all(fd)
        if not data or data.endswith(b"\n"):
            return data
        # Torn tail: take the exclusive lock (re-checking, another process may have repaired it meanwhile).
        try:
            with self._locked(fcntl.LOCK_EX) as fd:
                if fd is None:
                    return b""
                self._repair_torn_tail_locked(fd)
                return _read_all(fd)
        except (StoreError, OSError) as exc:
            self._warn(f"{self.tagged_path}: torn last line left in place and skipped: {exc}")
            return data[: data.rfind(b"\n") + 1]

    def _repair_torn_tail_locked(self, fd: int) -> None:
        """With the exclusive lock held: if the file does not end in a newline, deal with the last line."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        data = _read_all(fd)
        cut = data.rfind(b"\n") + 1  # 0 when the whole file is one unterminated line
        tail = data[cut:]
        try:
            decode_tag_record(tail)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        else:
            # A whole record that only lacks its newline (hand-edited file): complete it rather than move it.
            os.write(fd, b"\n")
            os.fsync(fd)
            return
        torn_path = self.root / f"{TAGGED_FILE}.torn-{_timestamp()}"
        suffix = 1
        while torn_path.exists():
            torn_path = self.root / f"{TAGGED_FILE}.torn-{_timestamp()}-{suffix}"
            suffix += 1
        torn_fd = os.open(torn_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(torn_fd, tail)
            os.fsync(torn_fd)
        finally:
            os.close(torn_fd)
        os.ftruncate(fd, cut)
        os.fsync(fd)
        line_no = data[:cut].count(b"\n") + 1
        self._warn(
            f"{self.tagged_path}:{line_no}: torn last line ({len(tail)} bytes, an interrupted write) "
            f"moved aside to {torn_path.name}"
        )


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 24), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
