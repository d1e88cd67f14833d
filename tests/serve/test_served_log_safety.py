"""The served-exchange log by the safe-write rule: a linked `.machine/served/` or day file is never followed, a FIFO
is refused at once, and a full disk (a real RLIMIT_FSIZE refusal in a child process) leaves no partial line."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from machine_lsp.core.schema import Message
from machine_lsp.serve.served_log import ServedLog, ServedLogError, ServedRow, now_iso

REPO = Path(__file__).resolve().parents[2]


def row(answer: str = "answer: 4") -> ServedRow:
    return ServedRow(
        messages=[Message(role="user", content="2+2?"), Message(role="assistant", content=answer)],
        model="machine",
        checkpoint="base",
        time=now_iso(),
        api="chat.completions",
        finish_reason="stop",
    )


@pytest.fixture
def machine_dir(tmp_path: Path) -> Path:
    (tmp_path / "proj" / ".machine").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return tmp_path / "proj" / ".machine"


def test_a_linked_served_folder_is_not_followed(machine_dir: Path) -> None:
    outside = machine_dir.parent.parent / "outside"
    (machine_dir / "served").symlink_to(outside)
    with pytest.raises(ServedLogError, match=r"served is a symbolic link, not a directory"):
        ServedLog(machine_dir).append_or_raise(row())
    assert list(outside.iterdir()) == []
    assert (
        ServedLog(machine_dir).append(row()) is None
    )  # the server's path: warned, the answer still goes out


def test_a_linked_day_file_is_not_followed(machine_dir: Path) -> None:
    log = ServedLog(machine_dir)
    victim = machine_dir.parent.parent / "outside" / "victim.jsonl"
    victim.write_text("mine\n")
    (machine_dir / "served").mkdir()
    log.path_for(datetime.now(UTC)).symlink_to(victim)
    with pytest.raises(ServedLogError, match="is a symbolic link, not a regular file"):
        log.append_or_raise(row())
    assert victim.read_text() == "mine\n"


def test_a_fifo_as_the_day_file_is_refused_not_hung_on(machine_dir: Path) -> None:
    log = ServedLog(machine_dir)
    (machine_dir / "served").mkdir()
    os.mkfifo(log.path_for(datetime.now(UTC)))
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]);"
        "from test_served_log_safety import row; from machine_lsp.serve.served_log import ServedLog, ServedLogError\n"
        "try:\n    ServedLog(Path(sys.argv[1])).append_or_raise(row())\n"
        "except ServedLogError as exc:\n    print(exc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(machine_dir), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=60,  # the old code blocked in open() forever
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert "is a FIFO (named pipe), not a regular file" in done.stdout, done.stderr


FSIZE_APPEND = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from test_served_log_safety import row
    from machine_lsp.serve.served_log import ServedLog, ServedLogError
    try:
        ServedLog(Path(sys.argv[1])).append_or_raise(row("y" * 20000))
    except ServedLogError as exc:
        print(exc)
    """
)


def test_a_full_disk_leaves_no_partial_line(machine_dir: Path) -> None:
    log = ServedLog(machine_dir)
    path, line = log.append_or_raise(row())
    assert line == 1
    before = path.read_bytes()
    limit = len(before) + 4096  # room for part of the next row only

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG as a full disk does
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-c", FSIZE_APPEND, str(machine_dir), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit_file_size,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert "exchange not logged" in done.stdout and "the file is as it was" in done.stdout, done.stderr
    assert path.read_bytes() == before
    assert log.append_or_raise(row()) == (path, 2)
