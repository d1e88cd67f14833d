"""The served-exchange log: `.machine/served/<YYYY-MM-DD>.jsonl`, one chat JSONL row per answered request.

Each row is `{"messages": [... the conversation as the model saw it, then its reply], "model", "checkpoint",
"time", "api", "finish_reason", "usage"}`: a chat row like any other, so `machine good --from FILE:LINE` and the
editor tag it (the extra keys ride along). Appends follow the store's discipline: the whole line in one `os.write`
under an exclusive `flock`, then `fsync`, so concurrent requests never interleave lines.
"""

from __future__ import annotations

import fcntl
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.schema import Message
from machine_lsp.core.store import make_machine_dir

SERVED_DIR = "served"


class ServedRow(msgspec.Struct, omit_defaults=True):
    messages: list[Message]
    model: str
    checkpoint: str
    time: str
    api: str
    finish_reason: str
    usage: dict[str, int] = msgspec.field(default_factory=dict)


class ServedLog:
    def __init__(self, machine_dir: Path) -> None:
        self.directory = machine_dir / SERVED_DIR

    def path_for(self, when: datetime) -> Path:
        return self.directory / f"{when.strftime('%Y-%m-%d')}.jsonl"

    def append(self, row: ServedRow) -> tuple[Path, int]:
        """Append one row; returns (file, 1-based line number of the row)."""
        when = datetime.fromisoformat(row.time.replace("Z", "+00:00"))
        path = self.path_for(when)
        make_machine_dir(self.directory.parent)
        self.directory.mkdir(parents=True, exist_ok=True)
        line = msgspec.json.encode(row) + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A tail without its newline (a crash mid-write) would swallow this row: end that line first.
            size = os.fstat(fd).st_size
            if size:
                with open(path, "rb") as reader:
                    reader.seek(size - 1)
                    if reader.read(1) != b"\n":
                        line = b"\n" + line
            with open(path, "rb") as reader:
                line_no = reader.read(size).count(b"\n") + 1 + (1 if line.startswith(b"\n") else 0)
            written = os.write(fd, line)
            while written < len(line):
                written += os.write(fd, line[written:])
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.fsync(fd)
        finally:
            os.close(fd)
        return path, line_no


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
