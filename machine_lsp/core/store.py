"""The Machine store: `.machine/` at the project root, tagged turns in `.machine/tagged.jsonl`.

Durability rules: every append is one `os.write` of a whole line while holding an exclusive `fcntl.flock` on the
file, followed by `fsync`, so concurrent taggers never interleave. What to append is decided under that same lock
(`append_decided`: the duplicate check of a tag, the record an edit supersedes), so two processes tagging one turn
at once store it once. A write that fails (disk full) is cut back to
where the file ended, so nothing earlier is lost and no half line stays behind.

A crash can still leave a torn last line (no trailing newline). Readers skip it with a warning and never write;
the next writer moves it aside to `tagged.jsonl.torn-<timestamp>` (kept for the user), so it is never silently
dropped or glued to the next record.

Safety: `.machine`, `tagged.jsonl` and the runs dir are opened without following symlinks (`O_NOFOLLOW`) and
must be a real directory / regular file; reads open the file read-only, so a read-only store can be read. Every
problem is a StoreError with a one-line message (the CLI exits 3).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from machine_lsp.core.conflicts import standing
from machine_lsp.core.disk_room import DISK_FULL_ERRNOS
from machine_lsp.core.safe_files import NotRegularFile, open_store_dir, open_store_file
from machine_lsp.core.schema import Message, TagRecord, Verdict, decode_tag_record, encode

MACHINE_DIR = ".machine"
TAGGED_FILE = "tagged.jsonl"
RUNS_DIR = "runs"
MACHINE_HOME_ENV = "MACHINE_HOME"


class StoreError(Exception):
    """The store cannot be read or written (permissions, a file where a directory should be, ...)."""


#: A file created here, never one already there, never through a link.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def describe_os_error(exc: OSError) -> str:
    """A short reason for an OSError, in words a person acts on."""
    if isinstance(exc, NotRegularFile):
        return exc.strerror or str(exc)
    if exc.errno in DISK_FULL_ERRNOS:
        return f"the disk is full ({exc.strerror})"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    return exc.strerror or str(exc)


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
        # The user's own setting: a link there is theirs, so resolve it (a discovered `.machine` never is).
        return Path(override).expanduser().resolve()
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


GITIGNORE = ".gitignore"
GITIGNORE_TEXT = (
    "# Created by machine-lsp: the store (tagged turns, runs, checkpoints) stays out of git.\n*\n"
)


def make_machine_dir(machine_dir: Path) -> None:
    """Create `.machine` (and its parents) if it does not exist; when this call creates it, write
    `.machine/.gitignore` holding `*`, as ruff's and pytest's caches do, so a store that grows to hundreds of MB
    never lands in a commit. A user who removes that file keeps it removed. The file is created with O_EXCL and
    O_NOFOLLOW inside the directory opened without following links: a planted link is never written through.
    Raises FileExistsError when something that is not a directory is there, OSError as it comes."""
    machine_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        machine_dir.mkdir()
    except FileExistsError:
        if machine_dir.is_dir() and not machine_dir.is_symlink():
            return
        raise
    dir_fd = open_store_dir(machine_dir)
    try:
        fd = os.open(GITIGNORE, _NEW_FILE, 0o644, dir_fd=dir_fd)
        try:
            _write_all(fd, GITIGNORE_TEXT.encode())
        finally:
            os.close(fd)
    except FileExistsError:
        pass  # another process created the directory and its file an instant ago
    finally:
        os.close(dir_fd)


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
        """Append `record` (no duplicate check)."""
        self._append(lambda _data: record)
        return record

    def append_decided(self, decide: Callable[[list[TagRecord]], TagRecord | None]) -> TagRecord | None:
        """Append the record `decide` returns, given every stored record (store order), or nothing when it returns
        None; returns what was appended. `decide` runs under the exclusive lock, so what it saw is still the store
        when its record lands: two taggers of one turn store it once, two editors of one record cannot both win."""
        return self._append(lambda data: decide(_decode_whole(data)))

    def _append(self, decide: Callable[[bytes], TagRecord | None]) -> TagRecord | None:
        """Append what `decide` returns given the file's bytes (under the lock); return it (None: nothing)."""
        with self._opened(write=True) as (root_fd, fd):
            assert root_fd is not None and fd is not None
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A torn tail must be moved aside first, or this line would be glued onto it.
            self._repair_torn_tail_locked(root_fd, fd)
            record = decide(_read_all(fd))
            if record is None:
                return None
            line = encode(record) + b"\n"
            size = os.fstat(fd).st_size
            try:
                _write_all(fd, line)
            except OSError as exc:
                # Disk full or similar: cut the half line back off so the file ends where it did.
                try:
                    os.ftruncate(fd, size)
                    left = "nothing was added, earlier records are intact"
                except OSError:
                    left = "a partial line may remain; the next tag moves it aside"
                raise StoreError(
                    f"cannot write {self.tagged_path}: {describe_os_error(exc)}; {left}"
                ) from None
            # The line is whole in the file: let the next writer in while this one waits for the disk.
            fcntl.flock(fd, fcntl.LOCK_UN)
            try:
                os.fsync(fd)
            except OSError as exc:
                raise StoreError(
                    f"{self.tagged_path}: the record was written but not flushed to disk: {describe_os_error(exc)}"
                ) from None
        return record

    # -- reading --------------------------------------------------------------------------------------------

    def records(self) -> list[TagRecord]:
        """Every whole record, in file order. Never writes: a torn tail is skipped with a warning (the next append
        moves it aside); lines that do not decode stay in the file and are reported in `warnings`."""
        data = self._read()
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
        return _find_same(self._read(), messages, verdict)

    def counts(self, records: Sequence[TagRecord] | None = None) -> StoreCounts:
        """What the store says now: records a later edit untagged or replaced are history, not counted."""
        counts = StoreCounts()
        for record in standing(self.records() if records is None else records):
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
        root_fd = self._open_root(create=False)
        if root_fd is None:
            return []
        try:
            names = os.listdir(root_fd)
        finally:
            os.close(root_fd)
        return sorted(self.root / name for name in names if name.startswith(f"{TAGGED_FILE}.torn-"))

    # -- internals ------------------------------------------------------------------------------------------

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _error(self, path: Path, exc: OSError, action: str) -> StoreError:
        if isinstance(exc, NotRegularFile):
            return StoreError(f"{path} {exc.strerror}; the store never follows links or reads special files")
        return StoreError(f"cannot {action} {path}: {describe_os_error(exc)}")

    def _open_root(self, *, create: bool) -> int | None:
        """A descriptor of `.machine` (never through a symlink); None when it does not exist and create=False."""
        if create:
            try:
                make_machine_dir(self.root)
            except FileExistsError:
                pass  # a file or a link where the directory should be: reported just below
            except OSError as exc:
                raise self._error(self.root, exc, "create the store at") from None
        try:
            return open_store_dir(self.root)
        except FileNotFoundError:
            if create:
                raise StoreError(f"cannot create the store at {self.root}") from None
            return None
        except OSError as exc:
            raise self._error(self.root, exc, "open the store at") from None

    @contextmanager
    def _opened(self, *, write: bool) -> Iterator[tuple[int | None, int | None]]:
        """(root fd, tagged.jsonl fd), unlocked; (None, None) when there is nothing to read yet. Reads open the
        file read-only; writes create the store and the file."""
        root_fd = self._open_root(create=write)
        if root_fd is None:
            yield None, None
            return
        try:
            flags = (os.O_RDWR | os.O_APPEND | os.O_CREAT) if write else os.O_RDONLY
            try:
                fd = open_store_file(root_fd, TAGGED_FILE, flags, self.tagged_path)
            except FileNotFoundError:
                if write:
                    raise StoreError(f"cannot create {self.tagged_path}") from None
                yield root_fd, None
                return
            except OSError as exc:
                raise self._error(self.tagged_path, exc, "write" if write else "read") from None
            try:
                yield root_fd, fd
            finally:
                os.close(fd)  # closing releases the flock
        finally:
            os.close(root_fd)

    def _read(self) -> bytes:
        """The file's whole lines (plus a torn last line that is a whole record lacking only its newline)."""
        with self._opened(write=False) as (_root_fd, fd):
            if fd is None:
                return b""
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                data = _read_all(fd)
            except OSError as exc:
                raise self._error(self.tagged_path, exc, "read") from None
        if not data or data.endswith(b"\n"):
            return data
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        if _is_record(tail):
            return data + b"\n"  # a hand-edited file: the record is whole, only its newline is missing
        line_no = data.count(b"\n") + 1
        self._warn(
            f"{self.tagged_path}:{line_no}: torn last line ({len(tail)} bytes, an interrupted write) skipped; "
            "the next tag moves it aside"
        )
        return data[:cut]

    def _repair_torn_tail_locked(self, root_fd: int, fd: int) -> None:
        """With the exclusive lock held: if the file does not end in a newline, deal with the last line."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        data = _read_all(fd)
        cut = data.rfind(b"\n") + 1  # 0 when the whole file is one unterminated line
        tail = data[cut:]
        try:
            if _is_record(tail):
                # A whole record that only lacks its newline (hand-edited file): complete it rather than move it.
                _write_all(fd, b"\n")
                os.fsync(fd)
                return
            torn_name = self._save_torn_tail(root_fd, tail)
            os.ftruncate(fd, cut)
            os.fsync(fd)
        except OSError as exc:
            raise StoreError(
                f"cannot repair the torn last line of {self.tagged_path}: {describe_os_error(exc)}; "
                "nothing was added"
            ) from None
        line_no = data[:cut].count(b"\n") + 1
        self._warn(
            f"{self.tagged_path}:{line_no}: torn last line ({len(tail)} bytes, an interrupted write) "
            f"moved aside to {torn_name}"
        )

    def _save_torn_tail(self, root_fd: int, tail: bytes) -> str:
        """Write the torn tail to a new `tagged.jsonl.torn-*` file; on failure leave no file behind."""
        stamp = _timestamp()
        for suffix in range(1000):
            name = f"{TAGGED_FILE}.torn-{stamp}" + (f"-{suffix}" if suffix else "")
            try:
                torn_fd = os.open(name, _NEW_FILE, 0o644, dir_fd=root_fd)
            except FileExistsError:
                continue
            try:
                _write_all(torn_fd, tail)
                os.fsync(torn_fd)
            except OSError:
                os.unlink(name, dir_fd=root_fd)  # an empty or partial copy helps nobody
                raise
            finally:
                os.close(torn_fd)
            return name
        raise OSError(errno.EEXIST, "too many torn files with the same timestamp")


def _is_record(raw: bytes) -> bool:
    try:
        decode_tag_record(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return True


def _decode_whole(data: bytes) -> list[TagRecord]:
    records = []
    for raw in data.split(b"\n"):
        if raw.strip():
            try:
                records.append(decode_tag_record(raw))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # reported by records(); a writer never stops on it
    return records


def _find_same(data: bytes, messages: Sequence[Message], verdict: Verdict) -> TagRecord | None:
    key = _conversation_key(messages)
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = decode_tag_record(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if record.verdict == verdict and _conversation_key(record.messages) == key:
            return record
    return None


def _write_all(fd: int, data: bytes) -> None:
    # One write for the whole line; a short write on a regular file is rare (disk full, a signal): finish it.
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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
