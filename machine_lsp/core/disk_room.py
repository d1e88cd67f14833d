"""Room on the disk for a large write, and a one-line reason when there is none.

A checkpoint is tens of MB and a converted model hundreds. Written on a nearly full disk they fail deep inside
torch or safetensors with a message that names neither the file nor the cause (torch says
`[enforce fail at inline_container.cc:672] . unexpected pos 29057728 vs 29057616`). So a writer asks
`shortfall` twice: before the first byte (refuse early, leaving the little room there is to the run's own record),
and after a failed write, once its partial output is removed (another process may have filled the disk meanwhile).
Both answers come from the free space the file system reports (`statvfs`), or from the failure itself when it is
the disk-full error: an `OSError` with ENOSPC/EDQUOT/EFBIG, or a library's wrapper that carries its text (safetensors
and tokenizers, written in Rust, raise their own exception types with "No space left on device" in the message).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

_MiB = 1 << 20
# Room kept on top of the estimate: the writer's own small files (config, manifest) and the run's record after it.
MARGIN = 2 * _MiB
#: The errors a write that does not fit fails with, for every writer (the store words them too). EFBIG is a
#: file-size limit (RLIMIT_FSIZE, the file system's maximum): the write is refused the same way, and the remedy is too.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_DISK_FULL_TEXTS = tuple(os.strerror(code) for code in DISK_FULL_ERRNOS)


def _megabytes(n: int) -> str:
    return f"{n / _MiB:.1f} MiB"


def shortfall(directory: Path, need: int, what: str, failure: BaseException | None = None) -> str | None:
    """Why `what` (about `need` bytes) cannot be written under `directory`, or None when there is room.

    With `failure` (the exception a write raised), a disk-full error anywhere in its chain also counts as a lack
    of room, whatever is free now.
    """
    free = shutil.disk_usage(_existing(directory)).free
    refused = _disk_full(failure) if failure is not None else None
    if free >= need + MARGIN:
        if refused is None:
            return None
        # Room by statvfs, yet the write was refused for room: a quota, a file-size limit, or another writer.
        return (
            f"no room for {what} in {directory}: the write was refused ({refused}) with {_megabytes(free)} free; "
            "a disk quota or a file-size limit (ulimit -f) may be lower than it needs"
        )
    return (
        f"no room on the disk for {what} in {directory}: it needs about {_megabytes(need + MARGIN)}, "
        f"{_megabytes(free)} free"
    )


def _existing(directory: Path) -> Path:
    """The nearest existing directory at or above `directory` (statvfs needs one; the target may not exist yet)."""
    path = directory
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _disk_full(exc: BaseException) -> str | None:
    """The disk-full reason in `exc`'s chain (its strerror), or None when it is some other failure."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno in DISK_FULL_ERRNOS:
            return os.strerror(link.errno)
        for text in _DISK_FULL_TEXTS:
            if text in str(link):
                return text
        link = link.__cause__ or link.__context__
    return None
