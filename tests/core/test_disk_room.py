"""core/disk_room: the one-line reason a large write has no room, from the free space statvfs reports and from the
failure a write raised (the after-the-fact path; the jobs tests drive both paths end to end on a real tmpfs and a
real file-size limit)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from machine_lsp.core import disk_room


def test_room_enough_is_no_answer_and_a_need_past_the_free_space_says_both_sizes(tmp_path: Path) -> None:
    assert disk_room.shortfall(tmp_path, 1 << 20, "the thing") is None
    free = shutil.disk_usage(tmp_path).free
    short = disk_room.shortfall(tmp_path / "not" / "yet", free, "the thing")
    assert short is not None and short.startswith(
        f"no room on the disk for the thing in {tmp_path}/not/yet: "
    )
    assert "MiB free" in short and "\n" not in short


def test_a_write_refused_for_room_counts_whatever_is_free(tmp_path: Path) -> None:
    """An OSError with ENOSPC, or a Rust library's wrapper that carries only the text (safetensors)."""
    rust = 'Error while serializing: IoError(Os { code: 27, kind: FileTooLarge, message: "File too large" })'
    for failure, reason in (
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "No space left on device"),
        (RuntimeError(rust), "File too large"),
    ):
        short = disk_room.shortfall(tmp_path, 1 << 20, "the thing", failure)
        assert short is not None and f"the write was refused ({reason}) with " in short, short


def test_the_reason_is_found_down_the_exception_chain_and_other_failures_are_not_room(tmp_path: Path) -> None:
    try:
        try:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        except OSError as inner:
            raise RuntimeError("unexpected pos 29057728 vs 29057616") from inner
    except RuntimeError as outer:
        chained = outer
    assert f"({os.strerror(errno.EDQUOT)})" in (disk_room.shortfall(tmp_path, 1, "x", chained) or "")
    assert disk_room.shortfall(tmp_path, 1, "x", PermissionError(errno.EACCES, "Permission denied")) is None
