"""The tag verbs under attack (issue 9): store errors, special files as inputs and outputs, a full disk.

Each case runs the real `machine` CLI in a child process (so a hang is caught by a timeout and a traceback is
seen as the user would see it) against a real store in a temp project. Exit codes (docs/ARCHITECTURE.md):
0 ok, 1 findings/refused, 2 usage or unreadable input, 3 the store or an output cannot be read or written.
"""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHAT = FIXTURES / "chat.jsonl"
REPO_ROOT = Path(__file__).resolve().parents[2]
MEMORY_CAP = 2 << 30  # a child that reads /dev/zero dies of MemoryError here instead of taking the machine


def machine(
    project: Path, *argv: str, timeout: float = 60, fsize: int | None = None, machine_home: bool = True
) -> subprocess.CompletedProcess[str]:
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("MACHINE_HOME", None)
    if machine_home:
        env["MACHINE_HOME"] = str(project / ".machine")
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limits,
    )


def one_line_error(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("machine: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tmp_path


# -- store errors: one line, exit 3 --------------------------------------------------------------------------


@pytest.mark.parametrize("verb", [["good", "--from", f"{CHAT}:1"], ["data"], ["tagged"], ["export", "sft"]])
def test_machine_dir_that_is_a_file_exits_3_with_one_line(project: Path, verb: list[str]) -> None:
    (project / ".machine").write_text("a file where the store should be")
    one_line_error(machine(project, *verb), 3, "store:", "not a directory")


def test_symlinked_tagged_jsonl_is_never_followed(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"someone else's file\nwith a last line and no newline")
    (project / ".machine").mkdir()
    (project / ".machine" / "tagged.jsonl").symlink_to(outside)
    for verb in (["data"], ["tagged"], ["good", "--from", f"{CHAT}:1"], ["bad", "--from", f"{CHAT}:2"]):
        one_line_error(machine(project, *verb), 3, "symbolic link")
    assert outside.read_bytes() == b"someone else's file\nwith a last line and no newline"


def test_symlinked_machine_dir_in_a_cloned_repo_is_never_followed(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    elsewhere = tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / ".git").mkdir()
    (project / ".machine").symlink_to(elsewhere)
    for verb in (["data"], ["good", "--from", f"{CHAT}:1"]):
        one_line_error(machine(project, *verb, machine_home=False), 3, "symbolic link")
    assert list(elsewhere.iterdir()) == []


def test_fifo_as_tagged_jsonl_exits_3_without_blocking(project: Path) -> None:
    (project / ".machine").mkdir()
    os.mkfifo(project / ".machine" / "tagged.jsonl")
    for verb in (["data"], ["good", "--from", f"{CHAT}:1"]):
        one_line_error(machine(project, *verb, timeout=30), 3, "FIFO")


def test_a_write_refused_by_the_kernel_exits_3_and_loses_nothing(project: Path) -> None:
    assert machine(project, "good", "--from", f"{CHAT}:1").returncode == 0
    tagged = project / ".machine" / "tagged.jsonl"
    before = tagged.read_bytes()
    done = machine(project, "bad", "--from", f"{CHAT}:2", fsize=len(before) + 20)  # a disk with 20 bytes left
    one_line_error(done, 3, "disk is full", "nothing was added")
    assert tagged.read_bytes() == before
    assert sorted(os.listdir(project / ".machine")) == [".gitignore", "tagged.jsonl"]
    assert machine(project, "bad", "--from", f"{CHAT}:2").returncode == 0
    assert "tagged: 2" in machine(project, "data").stdout


def test_read_only_store_reads_work_and_writes_exit_3(tmpfs: Path) -> None:
    assert machine(tmpfs, "good", "--from", f"{CHAT}:1").returncode == 0
    with open(tmpfs / ".machine" / "tagged.jsonl", "ab") as handle:
        handle.write(b'{"id":"half a rec')
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    data = machine(tmpfs, "data")
    assert data.returncode == 0 and "tagged: 1" in data.stdout, data.stderr
    assert "torn last line" in data.stderr and "Traceback" not in data.stderr
    tagged = machine(tmpfs, "tagged", "--json")
    assert tagged.returncode == 0 and '"answer: 56"' in tagged.stdout
    one_line_error(machine(tmpfs, "bad", "--from", f"{CHAT}:2"), 3, "read-only file system")


def test_full_disk_tag_exits_3_and_the_next_tag_works(tmpfs: Path, fill_disk: Callable[[Path], Path]) -> None:
    assert machine(tmpfs, "good", "--from", f"{CHAT}:1").returncode == 0
    tagged = tmpfs / ".machine" / "tagged.jsonl"
    before = tagged.read_bytes()
    filler = fill_disk(tmpfs)
    long_turn = tmpfs.parent / "long.jsonl"  # the input lives off the full disk; its reply needs new pages
    long_turn.write_text(
        '{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"' + "w" * 9000 + '"}]}\n'
    )
    for _ in range(2):
        one_line_error(machine(tmpfs, "good", "--from", str(long_turn)), 3, "disk is full")
    assert tagged.read_bytes() == before
    assert sorted(os.listdir(tmpfs / ".machine")) == [".gitignore", "tagged.jsonl"]
    filler.unlink()
    assert machine(tmpfs, "good", "--from", str(long_turn)).returncode == 0
    assert "tagged: 2" in machine(tmpfs, "data").stdout


# -- special files as inputs: refused, never read until out of memory, never blocking ----------------------------


@pytest.mark.parametrize("verb", [["good", "--from"], ["bad", "--from"], ["train", "validate"]])
def test_dev_zero_as_input_is_refused(project: Path, verb: list[str]) -> None:
    one_line_error(machine(project, *verb, "/dev/zero", timeout=60), 2, "/dev/zero", "character device")


@pytest.mark.parametrize("verb", [["good", "--from"], ["train", "validate"]])
def test_fifo_as_input_is_refused_without_blocking(project: Path, verb: list[str]) -> None:
    fifo = project / "pipe.jsonl"
    os.mkfifo(fifo)
    one_line_error(machine(project, *verb, str(fifo), timeout=30), 2, "pipe.jsonl", "FIFO")


def test_a_symlink_to_a_regular_input_still_works(project: Path) -> None:
    (project / "link.jsonl").symlink_to(CHAT)
    assert machine(project, "good", "--from", f"{project / 'link.jsonl'}:1").returncode == 0
    done = machine(project, "train", "validate", "link.jsonl")
    assert done.returncode == 0 and "link.jsonl" in done.stdout, done.stderr


# -- special files and symlinks as outputs: written into / through, never replaced -------------------------------


def tag_two(project: Path) -> None:
    assert machine(project, "good", "--from", f"{CHAT}:1").returncode == 0
    assert machine(project, "good", "--as", "answer: 42", "--from", f"{CHAT}:2").returncode == 0


def test_export_into_a_fifo_writes_into_it_and_keeps_it_a_fifo(project: Path) -> None:
    tag_two(project)
    expected = machine(project, "export", "sft").stdout.encode()
    fifo = project / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            received.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    done = machine(project, "export", "sft", "--out", str(fifo), timeout=30)
    reader.join(10)
    assert done.returncode == 0, done.stderr
    assert received == [expected]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # the old export renamed a regular file over it


def test_export_through_a_symlink_keeps_the_link(project: Path) -> None:
    tag_two(project)
    (project / "data").mkdir()
    target = project / "data" / "train.jsonl"
    target.write_text("old contents\n")
    target.chmod(0o640)
    link = project / "train.jsonl"
    link.symlink_to(target)
    done = machine(project, "export", "sft", "--out", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == machine(project, "export", "sft").stdout
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file keeps its mode
    assert sorted(os.listdir(project / "data")) == ["train.jsonl"]  # no temp file left


def test_export_to_a_regular_file_is_still_atomic(project: Path) -> None:
    tag_two(project)
    out = project / "train.jsonl"
    out.write_text("old\n")
    with open(out, "rb") as held:  # a reader holding the old file sees the old file, whole
        done = machine(project, "export", "sft", "--out", str(out))
        assert done.returncode == 0 and held.read() == b"old\n"
    assert out.read_text() == machine(project, "export", "sft").stdout


@pytest.fixture
def char_devices(tmp_path: Path) -> dict[str, Path]:
    """Private copies of /dev/full and /dev/null (so a regression can never replace the real ones)."""
    if os.geteuid() != 0:
        pytest.skip("creating device nodes needs root")
    devices = {"full": tmp_path / "full", "null": tmp_path / "null"}
    try:
        os.mknod(devices["full"], stat.S_IFCHR | 0o666, os.makedev(1, 7))
        os.mknod(devices["null"], stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with open(devices["null"], "wb") as handle:
            handle.write(b"probe")
    except OSError as exc:
        pytest.skip(f"device nodes cannot be created or used here ({exc})")
    return devices


def test_export_to_dev_full_exits_3_and_keeps_the_device(
    project: Path, char_devices: dict[str, Path]
) -> None:
    tag_two(project)
    full = char_devices["full"]
    one_line_error(machine(project, "export", "sft", "--out", str(full)), 3, "disk is full")
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    done = machine(project, "export", "pairs", "--out", str(char_devices["null"]))
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(os.lstat(char_devices["null"]).st_mode)


def test_export_to_stdout_on_a_full_device_exits_3(project: Path) -> None:
    tag_two(project)
    with open("/dev/full", "wb") as full:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MACHINE_HOME": str(project / ".machine")}
        done = subprocess.run(
            [sys.executable, "-m", "machine_lsp.cli.main", "export", "sft"],
            cwd=project,
            env=env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    one_line_error(done, 3, "stdout", "disk is full")
