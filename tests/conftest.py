"""Fixtures several test folders share: a small real tmpfs (a disk that really fills up) and what fills it, a TCP
server that accepts connections and never answers and a closed port (the network boundary of the Tinker jobs)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _closed_local_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/models.json"


# Tests send traffic only to 127.0.0.1: a hosted Tinker run's price (scaffold/pricing.py) is read from a closed local
# port here, in every test and every job and server they start (they inherit it), and reads "price unknown" at once.
# tests/scaffold/test_pricing.py serves the pricing file itself.
os.environ.setdefault("MACHINE_TINKER_PRICING_URL", _closed_local_url())


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs; skipped where mounting is not permitted (the RLIMIT_FSIZE tests cover a full disk there)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the RLIMIT_FSIZE tests cover a full disk here")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here ({done.stderr.strip()})")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        while True:
            try:
                handle.write(b"x" * 512)
            except OSError:
                break
    return filler


@pytest.fixture(scope="session")
def fill_disk() -> Callable[[Path], Path]:
    """`fill_disk(disk)`: fill the disk up completely with one file and return it (delete it to free the space)."""
    return _fill


@pytest.fixture
def silent_server() -> Iterator[int]:
    """The port of a TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)  # never answer
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the per-suite time at the end of a run (issue: CI must show where its minutes go) -------------------------

_SUITE_SECONDS: dict[str, float] = {}
_SUITE_TESTS: dict[str, int] = {}
_FILE_SECONDS: dict[str, float] = {}
SLOWEST_FILES = 15


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    parts = Path(report.nodeid.split("::", 1)[0]).parts
    suite = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
    _SUITE_SECONDS[suite] = _SUITE_SECONDS.get(suite, 0.0) + report.duration
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    if report.when == "call":
        _SUITE_TESTS[suite] = _SUITE_TESTS.get(suite, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _SUITE_SECONDS:
        return
    terminalreporter.section("time per suite (setup + call + teardown)")
    for suite, seconds in sorted(_SUITE_SECONDS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {_SUITE_TESTS.get(suite, 0):4d} tests  {suite}")
    terminalreporter.write_line(f"{sum(_SUITE_SECONDS.values()):8.1f} s  in all")
    # The files behind those minutes (module fixtures such as a server or a trained checkpoint count here).
    terminalreporter.section(f"the {SLOWEST_FILES} slowest test files")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])[:SLOWEST_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
