"""`.machine/promotions.jsonl`: which checkpoint is promoted, and the record of how it got there (pure).

One line per event, appended: the gate's promotions (`by: gate`), and `machine train promote` / `rollback` by hand
(`by: hand`). The promoted checkpoint is the top of a stack replayed from the file: a promotion pushes its
checkpoint, a rollback pops the top and so restores the one promoted before it (or the base model).

Written with the store's rules (core/safe_files.py): `.machine` and the file are opened without following a symlink
and refused when they are a FIFO or a device; one `os.write` of a whole line under an exclusive `flock`, then
`fsync`; a failed write is cut back so no half line remains. A line that does not decode is reported, not dropped.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Literal

import msgspec

from machine_lsp.core.runs import now_iso
from machine_lsp.core.safe_files import NotRegularFile, open_store_dir, open_store_file

PROMOTIONS = "promotions.jsonl"


class PromotionError(Exception):
    """The record cannot be read or written; one line saying why."""


class Promotion(msgspec.Struct, kw_only=True, omit_defaults=True):
    at: str
    action: Literal["promote", "rollback"]
    checkpoint: str  # promote: the one promoted; rollback: the one restored ("base" when none is left)
    by: Literal["gate", "hand"]
    previous: str | None = None  # what was promoted before this event
    run_id: str | None = None
    reason: str = ""


class PromotionLog(msgspec.Struct):
    events: list[Promotion]
    warnings: list[str]

    def stack(self) -> list[str]:
        stack: list[str] = []
        for event in self.events:
            if event.action == "promote":
                stack.append(event.checkpoint)
            elif stack:
                stack.pop()
        return stack

    def current(self) -> str | None:
        """The promoted checkpoint, or None (nothing promoted: the base model)."""
        stack = self.stack()
        return stack[-1] if stack else None


def _path(machine_dir: Path) -> Path:
    return machine_dir / PROMOTIONS


def read_log(machine_dir: Path) -> PromotionLog:
    """Every event in file order; an absent file is an empty log."""
    try:
        dir_fd = open_store_dir(machine_dir)
    except FileNotFoundError:
        return PromotionLog([], [])
    except OSError as exc:
        raise PromotionError(f"{machine_dir}: {exc}") from None
    try:
        fd = open_store_file(dir_fd, PROMOTIONS, os.O_RDONLY, _path(machine_dir))
    except FileNotFoundError:
        return PromotionLog([], [])
    except OSError as exc:
        raise PromotionError(str(exc)) from None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read()
    events: list[Promotion] = []
    warnings: list[str] = []
    for line_no, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            events.append(msgspec.json.decode(raw, type=Promotion))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            warnings.append(f"{_path(machine_dir)}:{line_no}: skipped, not a promotion record: {exc}")
    return PromotionLog(events, warnings)


def append(machine_dir: Path, event: Promotion) -> Promotion:
    line = msgspec.json.encode(event) + b"\n"
    path = _path(machine_dir)
    try:
        machine_dir.mkdir(exist_ok=True)
        dir_fd = open_store_dir(machine_dir)
    except OSError as exc:
        raise PromotionError(f"{machine_dir}: {exc}") from None
    try:
        fd = open_store_file(dir_fd, PROMOTIONS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, path)
    except OSError as exc:
        raise PromotionError(str(exc) if isinstance(exc, NotRegularFile) else f"{path}: {exc}") from None
    finally:
        os.close(dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        try:
            if os.write(fd, line) != len(line):
                raise OSError(errno.EIO, "short write")
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, size)
            raise PromotionError(
                f"cannot write {path}: {exc.strerror or exc}; nothing was recorded"
            ) from None
    finally:
        os.close(fd)
    return event


def promote(
    machine_dir: Path, checkpoint: str, *, by: Literal["gate", "hand"], reason: str, run_id: str | None = None
) -> Promotion:
    previous = read_log(machine_dir).current()
    event = Promotion(
        at=now_iso(),
        action="promote",
        checkpoint=checkpoint,
        by=by,
        previous=previous,
        run_id=run_id,
        reason=reason,
    )
    return append(machine_dir, event)


def rollback(machine_dir: Path, *, reason: str = "by hand") -> Promotion:
    """Restore the checkpoint promoted before the current one; PromotionError when nothing is promoted."""
    stack = read_log(machine_dir).stack()
    if not stack:
        raise PromotionError("nothing is promoted: the base model is already what `promoted` names")
    restored = stack[-2] if len(stack) > 1 else "base"
    event = Promotion(
        at=now_iso(), action="rollback", checkpoint=restored, by="hand", previous=stack[-1], reason=reason
    )
    return append(machine_dir, event)
