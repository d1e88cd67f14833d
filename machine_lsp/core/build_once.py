"""Build a directory once, safely shared between processes: the converted SmolLM2, the SkyRL tx venv.

`build_once(target, ready, build, ...)` takes an exclusive `flock` on `.<name>.lock` next to `target` (waiting a
bounded time, saying once that it waits), checks again whether another process finished meanwhile, clears temporary
directories a killed build left, then lets `build` fill a fresh temporary directory next to `target` and renames it
into place. A build that fails or is killed leaves nothing half-built where `target` is looked for.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Progress = Callable[[str], None]


@contextmanager
def exclusive_lock(
    lock_path: Path, progress: Progress, *, waiting: str, error: Callable[[str], Exception], timeout_s: float
) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path`; `waiting` is said once if another process holds it, and `error(...)`
    is raised after `timeout_s` seconds of waiting."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        deadline = time.monotonic() + timeout_s
        told = False
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    progress(waiting)
                    told = True
                if time.monotonic() > deadline:
                    raise error(
                        f"timed out after {timeout_s:.0f} s waiting for the lock {lock_path}; if no other "
                        "machine-lsp process is running, delete that file and retry"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def build_once(
    target: Path,
    ready: Callable[[Path], bool],
    build: Callable[[Path], None],
    progress: Progress,
    *,
    waiting: str,
    error: Callable[[str], Exception],
    timeout_s: float,
) -> bool:
    """Make `target` with `build(temp_dir)` unless `ready(target)`; True when this call built it."""
    if ready(target):
        return False
    lock = target.parent / f".{target.name}.lock"
    with exclusive_lock(lock, progress, waiting=waiting, error=error, timeout_s=timeout_s):
        if ready(target):  # another process finished while we waited
            return False
        for stale in target.parent.glob(f".{target.name}.tmp-*"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            build(temp)
            if target.exists():  # stale or incomplete: move aside, then remove
                aside = target.parent / f".{target.name}.tmp-old-{os.getpid()}"
                os.rename(target, aside)
                shutil.rmtree(aside, ignore_errors=True)
            os.rename(temp, target)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
    return True
