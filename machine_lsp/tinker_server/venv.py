"""SkyRL tx's own virtualenv, created on first use from the pinned `requirements/skyrl-tx.txt`.

SkyRL tx pins transformers, jax, flax, fastapi ... at versions that clash with ours, so it never shares our venv.
The venv lives in the user cache, `$MACHINE_CACHE/tinker-server/venv` (MACHINE_CACHE defaults to
`~/.cache/machine-lsp`); `MACHINE_TINKER_SERVER_CACHE` moves this directory alone (CI: under the repo's `.tools/`,
without moving the converted model). It is built in a temporary directory next to its
final place and renamed into place under a file lock, so two processes never install at once and a killed install
leaves nothing half-built behind. A stamp inside the venv holds the sha256 of the requirements file it was built
from: a changed pin list builds a fresh venv.

SkyRL tx unpacks checkpoints with tarfile's extraction filters (`extractall(..., filter="data")`), which Python has
from 3.11.4 on: under 3.11.0-3.11.3 (Debian 12's python3 is 3.11.2) the server starts and trains, then fails the
first sampler checkpoint with "TarFile.extractall() got an unexpected keyword argument 'filter'". The venv is built
from the interpreter running machine-lsp only if it is new enough, and a cached venv on an older one is rebuilt.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from machine_lsp.engines import smollm2

Progress = Callable[[str], None]

CACHE_ENV = "MACHINE_TINKER_SERVER_CACHE"  # CI: under the repo's .tools/, kept between runs
REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements" / "skyrl-tx.txt"
STAMP = "machine-lsp-venv.json"
LOCK_TIMEOUT_S = 3600.0
MIN_PYTHON = (3, 11, 4)  # tarfile extraction filters (see the module docstring)
INSTALL_TIMEOUT_S = 3600.0


class ServerSetupError(RuntimeError):
    """The server's environment cannot be prepared; the message says what to do."""


def cache_dir() -> Path:
    """`$MACHINE_TINKER_SERVER_CACHE`, else `$MACHINE_CACHE/tinker-server` (the venv, the JAX compile cache)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser().absolute()
    return smollm2.cache_root() / "tinker-server"


def venv_dir() -> Path:
    return cache_dir() / "venv"


def venv_python(directory: Path | None = None) -> Path:
    return (directory or venv_dir()) / "bin" / "python"


def requirements_digest(path: Path = REQUIREMENTS) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ServerSetupError(
            f"{path}: cannot read the server's pinned requirements: {exc.strerror}"
        ) from None


def venv_python_version(directory: Path) -> tuple[int, ...] | None:
    """The Python version a venv was made from (its pyvenv.cfg), or None if unreadable."""
    try:
        lines = (directory / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() in {"version", "version_info"}:
            parts = value.strip().split(".")[:3]
            if all(p.isdigit() for p in parts):
                return tuple(int(p) for p in parts)
    return None


def check_python(python: str) -> None:
    """Refuse an interpreter too old for SkyRL tx (MIN_PYTHON), before building anything from it."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3], sep='.')"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        version = tuple(int(p) for p in done.stdout.strip().split("."))
    except (OSError, subprocess.TimeoutExpired, ValueError):
        raise ServerSetupError(f"cannot run {python} to build the SkyRL tx venv") from None
    if version < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        raise ServerSetupError(
            f"SkyRL tx needs Python >= {need} (it unpacks checkpoints with tarfile's extraction filters); "
            f"{python} is {'.'.join(map(str, version))}: run machine-lsp from a newer Python"
        )


def is_ready(directory: Path | None = None, requirements: Path = REQUIREMENTS) -> bool:
    directory = directory or venv_dir()
    try:
        stamp = (directory / STAMP).read_text()
    except OSError:
        return False
    version = venv_python_version(directory)
    return (
        venv_python(directory).exists()
        and requirements_digest(requirements) in stamp
        and version is not None
        and version >= MIN_PYTHON
    )


@contextmanager
def exclusive_lock(lock_path: Path, progress: Progress, what: str, timeout_s: float) -> Iterator[None]:
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
                    progress(f"another process is {what}; waiting for it")
                    told = True
                if time.monotonic() > deadline:
                    raise ServerSetupError(
                        f"timed out after {timeout_s:.0f} s waiting for {lock_path}; if no other machine-lsp "
                        "process is running, delete that file and retry"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def ensure_venv(progress: Progress, requirements: Path = REQUIREMENTS, python: str | None = None) -> Path:
    """The server venv's directory, installing it once if needed (atomic, locked). Returns the venv dir."""
    target = venv_dir()
    if is_ready(target, requirements):
        return target
    with exclusive_lock(cache_dir() / ".venv.lock", progress, "installing the SkyRL tx venv", LOCK_TIMEOUT_S):
        if is_ready(target, requirements):
            return target
        python = python or sys.executable
        check_python(python)
        _install(target, requirements, python, progress)
    return target


def _install(target: Path, requirements: Path, python: str, progress: Progress) -> None:
    digest = requirements_digest(requirements)
    for stale in target.parent.glob("venv.tmp-*"):  # left by a killed install; we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    tmp = target.parent / f"venv.tmp-{os.getpid()}"
    started = time.monotonic()
    progress(f"creating the SkyRL tx venv in {target} from {requirements.name} (first use only; minutes)")
    try:
        _run([python, "-m", "venv", str(tmp)], "create the venv")
        pip = [str(venv_python(tmp)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # Every package is pinned in the file; --no-deps keeps pip from resolving anything else.
        _run([*pip, "--no-deps", "-r", str(requirements)], f"install {requirements.name}")
        (tmp / STAMP).write_text(f'{{"requirements_sha256": "{digest}"}}\n')
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    progress(f"SkyRL tx venv ready in {time.monotonic() - started:.0f} s")


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ServerSetupError(f"could not {what}: still running after {INSTALL_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ServerSetupError(f"could not {what} (exit {done.returncode}): " + " | ".join(tail))
