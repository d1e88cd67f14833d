"""The served-exchange log: `.machine/served/<YYYY-MM-DD>.jsonl`, one chat JSONL row per answered request.

Each row is `{"messages": [... the conversation as the model saw it, then its reply], "model", "checkpoint",
"time", "api", "finish_reason", "usage"}`: a chat row like any other, so `machine good --from FILE:LINE` and the
editor tag it (the extra keys ride along). Appends follow the store's discipline: the whole line in one `os.write`
under an exclusive `flock`, then `fsync`, so concurrent requests never interleave lines; a write that fails (a full
disk) is cut back to where the file ended, so no partial line stays. The log is opened by the safe-write rule
(core/safe_files.py): a linked `.machine/served/` or day file is never followed and a FIFO is refused, not hung on.
A row that cannot be logged costs the request nothing: the answer goes out and the server warns in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.safe_files import NotRegularFile, open_append_safely
from machine_lsp.core.schema import Message
from machine_lsp.core.store import describe_os_error, make_machine_dir

SERVED_DIR = "served"


class ServedRow(msgspec.Struct, omit_defaults=True):
    messages: list[Message]
    model: str
    checkpoint: str
    time: str
    api: str
    finish_reason: str
    usage: dict[str, int] = msgspec.field(default_factory=dict)


class ServedLogError(OSError):
    """A row could not be logged; the message is one line naming the file and why."""


class ServedLog:
    def __init__(self, machine_dir: Path) -> None:
        self.directory = machine_dir / SERVED_DIR
        self.project_dir = machine_dir.parent  # the no-link walk starts here (`.machine` itself is checked)
        self.warned: set[str] = set()

    def path_for(self, when: datetime) -> Path:
        return self.directory / f"{when.strftime('%Y-%m-%d')}.jsonl"

    def append(self, row: ServedRow) -> tuple[Path, int] | None:
        """Append one row; returns (file, 1-based line number of the row), or None when it could not be logged
        (warned once per reason on the `machine.serve` logger)."""
        try:
            return self.append_or_raise(row)
        except ServedLogError as exc:
            if str(exc) not in self.warned:
                self.warned.add(str(exc))
                logging.getLogger("machine.serve").warning("%s", exc)
            return None

    def append_or_raise(self, row: ServedRow) -> tuple[Path, int]:
        """Append one row; ServedLogError when it cannot be, with the file left as it was."""
        when = datetime.fromisoformat(row.time.replace("Z", "+00:00"))
        path = self.path_for(when)
        with contextlib.suppress(OSError):  # .gitignore in a new .machine; a link there is refused below
            make_machine_dir(self.directory.parent)
        line = msgspec.json.encode(row) + b"\n"
        try:
            fd = open_append_safely(path, root=self.project_dir)
        except NotRegularFile as exc:
            raise ServedLogError(
                f"exchange not logged: {exc}; the served log never follows links or writes into special files"
            ) from None
        except OSError as exc:
            raise ServedLogError(
                f"exchange not logged: cannot open {path}: {describe_os_error(exc)}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            # A tail without its newline (a crash mid-write) would swallow this row: end that line first.
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            line_no = _count_lines(fd, size) + 1 + (1 if line.startswith(b"\n") else 0)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError as exc:
                os.ftruncate(fd, size)  # no partial line stays
                raise ServedLogError(
                    f"exchange not logged: cannot write {path}: {describe_os_error(exc)}; the file is as it was"
                ) from None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.fsync(fd)
        finally:
            os.close(fd)
        return path, line_no


def _count_lines(fd: int, size: int) -> int:
    count, offset = 0, 0
    while offset < size:
        chunk = os.pread(fd, min(1 << 20, size - offset), offset)
        if not chunk:
            break
        count += chunk.count(b"\n")
        offset += len(chunk)
    return count


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
