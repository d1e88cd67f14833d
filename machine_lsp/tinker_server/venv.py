"""SkyRL tx's own virtualenv, created on first use from the pinned `requirements/skyrl-tx.txt`.

SkyRL tx pins transformers, jax, flax, fastapi ... at versions that clash with ours, so it never shares our venv.
The venv lives in the user cache, `$MACHINE_CACHE/tinker-server/venv` (MACHINE_CACHE defaults to
`~/.cache/machine-lsp`); `MACHINE_TINKER_SERVER_CACHE` moves this directory alone (CI: under the repo's `.tools/`,
without moving the converted model). It is built in a temporary directory next to its final place and renamed into
place under a file lock (`core.build_once`), so two processes never install at once and a killed install leaves
nothing half-built behind. A stamp inside the venv holds the sha256 of the requirements file it was built
from: a changed pin list builds a fresh venv.

SkyRL tx unpacks checkpoints with tarfile's extraction filters (`extractall(..., filter="data")`), which Python has
from 3.11.4 on: under 3.11.0-3.11.3 (Debian 12's python3 is 3.11.2) the server starts and trains, then fails the
first sampler checkpoint with "TarFile.extractall() got an unexpected keyword argument 'filter'". The venv is built
from the interpreter running machine-lsp only if it is new enough, and a cached venv on an older one is rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from machine_lsp.core.build_once import build_once
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


def ensure_venv(progress: Progress, requirements: Path = REQUIREMENTS, python: str | None = None) -> Path:
    """The server venv's directory, installing it once if needed (atomic, locked: `core.build_once`)."""
    target = venv_dir()
    started = time.monotonic()
    built = build_once(
        target,
        lambda directory: is_ready(directory, requirements),
        lambda temp: _install(temp, target, requirements, python or sys.executable, progress),
        progress,
        waiting="another process is installing the SkyRL tx venv; waiting for it",
        error=ServerSetupError,
        timeout_s=LOCK_TIMEOUT_S,
    )
    if built:
        progress(f"SkyRL tx venv ready in {time.monotonic() - started:.0f} s")
    return target


def _install(temp: Path, target: Path, requirements: Path, python: str, progress: Progress) -> None:
    """Create the venv in `temp` and install the pinned requirements (`build_once` renames it to `target`)."""
    check_python(python)  # SkyRL tx needs >= 3.11.4: refuse before building anything
    digest = requirements_digest(requirements)
    progress(f"creating the SkyRL tx venv in {target} from {requirements.name} (first use only; minutes)")
    _run([python, "-m", "venv", str(temp)], "create the venv")
    pip = [str(venv_python(temp)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # Every package is pinned in the file; --no-deps keeps pip from resolving anything else.
    _run([*pip, "--no-deps", "-r", str(requirements)], f"install {requirements.name}")
    (temp / STAMP).write_text(f'{{"requirements_sha256": "{digest}"}}\n')


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ServerSetupError(f"could not {what}: still running after {INSTALL_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ServerSetupError(f"could not {what} (exit {done.returncode}): " + " | ".join(tail))
