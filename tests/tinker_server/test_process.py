"""`machine tinker serve|status|stop` bad cases, the server record and machine.toml, without starting SkyRL tx.

Every case here is refused before the server venv or the model is touched, so these run in seconds; the real
server is started in test_server_e2e.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import msgspec
import pytest

from machine_lsp.cli.main import main
from machine_lsp.scaffold.config import ConfigError, load_config
from machine_lsp.tinker_server import process, project

TOKEN = "test-token-0123456789abcdef"
TOKEN_ENV = {**os.environ, process.TOKEN_ENV: TOKEN}  # what `start` puts into the server's environment


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return ["gone"]


def _record(pid: int, **changes: object) -> process.ServerRecord:
    record = process.ServerRecord(
        pid=pid,
        start_ticks=process.process_start_ticks(pid) or 0,
        boot_id=process.boot_id(),
        host=process.HOST,
        port=8000,
        base_url="http://127.0.0.1:8000",
        model="/m",
        log="/dev/null",
        started_at="2026-11-30T00:00:00+00:00",
        cmdline=_cmdline(pid),
        token=TOKEN,
    )
    return msgspec.structs.replace(record, **changes)


@pytest.fixture
def machine_dir(tmp_path: Path) -> Path:
    directory = tmp_path / ".machine"
    process.server_dir(directory).mkdir(parents=True)
    return directory


def _spawn(argv: list[str], **options: object) -> subprocess.Popen[bytes]:
    """Start ARGV and return once /proc shows its own command line.

    Popen returns when the exec has begun, not ended: before it /proc/PID/cmdline is still pytest's, and for a
    moment after it is empty (the kernel has not yet laid out the new argv). A record taken then names the wrong
    program or none (both seen on a loaded machine), so wait, bounded generously, for the exec'd argv.
    """
    proc = subprocess.Popen(argv, **options)  # type: ignore[call-overload]
    deadline = time.monotonic() + 120
    while _cmdline(proc.pid) != argv and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


@pytest.fixture
def sleeper() -> subprocess.Popen[bytes]:
    proc = _spawn([sys.executable, "-c", "import time; time.sleep(60)"], env=TOKEN_ENV)
    yield proc
    proc.kill()
    proc.wait()


def test_a_running_server_is_found_and_a_second_serve_is_refused(
    machine_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    process.write_record(machine_dir, _record(sleeper.pid))
    record, stale = process.live_record(machine_dir)
    assert record is not None and record.pid == sleeper.pid and not stale
    with pytest.raises(process.ServerError, match=f"already running .*pid {sleeper.pid}"):
        process.start(machine_dir, progress=lambda _m: None)
    assert sleeper.poll() is None  # untouched


def test_a_record_of_a_finished_process_is_stale_and_removed(machine_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    process.write_record(machine_dir, _record(int(done.stdout), start_ticks=1))
    assert process.live_record(machine_dir) == (None, True)
    assert not (process.server_dir(machine_dir) / process.RECORD_FILE).exists()
    assert process.live_record(machine_dir) == (None, False)


def test_a_reused_pid_is_not_taken_for_the_server(
    machine_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    ticks = process.process_start_ticks(sleeper.pid)
    assert ticks is not None
    process.write_record(machine_dir, _record(sleeper.pid, start_ticks=ticks - 1))
    assert process.live_record(machine_dir) == (None, True)


def test_a_record_from_before_a_reboot_is_stale(machine_dir: Path, sleeper: subprocess.Popen[bytes]) -> None:
    process.write_record(machine_dir, _record(sleeper.pid, boot_id="00000000-old-boot"))
    assert process.live_record(machine_dir) == (None, True)


def test_stop_without_a_server_signals_nothing(machine_dir: Path, sleeper: subprocess.Popen[bytes]) -> None:
    process.write_record(machine_dir, _record(sleeper.pid, start_ticks=1))  # stale: the pid is someone else's
    assert process.stop(machine_dir).stopped is None
    assert sleeper.poll() is None


def test_stop_ends_the_whole_process_group(machine_dir: Path) -> None:
    # A parent that spawns a child in its own session, like the API server and its engine.
    leader = _spawn(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); time.sleep(60)",
        ],
        start_new_session=True,
        env=TOKEN_ENV,
    )
    process.write_record(machine_dir, _record(leader.pid))
    assert process.stop(machine_dir).stopped is not None
    leader.wait(timeout=30)
    with pytest.raises(ProcessLookupError):
        os.killpg(leader.pid, 0)
    assert process.read_record(machine_dir) is None


def test_a_port_in_use_is_refused(machine_dir: Path) -> None:
    with socket.socket() as busy:
        busy.bind((process.HOST, 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(process.ServerError, match=f"port {port} on 127.0.0.1 is in use"):
            process.start(machine_dir, port=port, progress=lambda _m: None)


def test_a_missing_or_wrong_model_dir_is_refused(machine_dir: Path, tmp_path: Path) -> None:
    port = process.free_port()
    with pytest.raises(process.ServerError, match="no such directory"):
        process.start(machine_dir, model=str(tmp_path / "nope"), port=port, progress=lambda _m: None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(process.ServerError, match="no config.json"):
        process.start(machine_dir, model=str(tmp_path / "empty"), port=port, progress=lambda _m: None)


def test_the_cli_reports_bad_cases_with_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    assert main(["tinker", "status"]) == 1
    assert "no Tinker server running" in capsys.readouterr().out
    assert main(["tinker", "stop"]) == 0
    assert (
        main(["tinker", "serve", "--model", str(tmp_path / "missing"), "--port", str(process.free_port())])
        == 2
    )
    assert "no such directory" in capsys.readouterr().err
    assert not (tmp_path / "machine.toml").exists()


def test_the_base_url_goes_into_machine_toml_keeping_the_rest(tmp_path: Path) -> None:
    project.set_base_url(tmp_path, "http://127.0.0.1:8000")
    assert load_config(tmp_path / "machine.toml").tinker.base_url == "http://127.0.0.1:8000"

    (tmp_path / "machine.toml").write_text(
        "# my settings\n[train]\nengine = 'tinker'  # keep me\n\n[tinker]\nbase_url = 'http://old'\n\n[eval]\nmax_tokens = 9\n"
    )
    project.set_base_url(tmp_path, "http://127.0.0.1:8123")
    text = (tmp_path / "machine.toml").read_text()
    assert "# my settings" in text and "# keep me" in text
    data = tomllib.loads(text)
    assert data["tinker"]["base_url"] == "http://127.0.0.1:8123"
    assert data["eval"]["max_tokens"] == 9
    assert project.configured_base_url(tmp_path) == "http://127.0.0.1:8123"

    (tmp_path / "machine.toml").write_text("[tinker]\n")
    project.set_base_url(tmp_path, "http://127.0.0.1:9")
    assert project.configured_base_url(tmp_path) == "http://127.0.0.1:9"


def test_a_broken_machine_toml_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "machine.toml").write_text("[train]\nepochs = 'many'\n")
    with pytest.raises(ConfigError, match="not updated"):
        project.set_base_url(tmp_path, "http://127.0.0.1:8000")
    assert (tmp_path / "machine.toml").read_text() == "[train]\nepochs = 'many'\n"
    assert project.configured_base_url(tmp_path) is None


def test_the_jobs_find_the_served_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from machine_lsp.engines.tinker import tinker_url
    from machine_lsp.jobs.common import tinker_base_url
    from machine_lsp.scaffold.config import project_tinker_url, tinker_costs_money

    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    assert tinker_base_url(tmp_path) is None
    assert tinker_url.resolve_base_url(tinker_base_url(tmp_path)) == tinker_url.DEFAULT_BASE_URL
    assert project_tinker_url(tmp_path) == tinker_url.DEFAULT_BASE_URL
    assert tinker_costs_money(tmp_path)  # hosted Tinker
    project.set_base_url(tmp_path, "http://127.0.0.1:8765/")
    assert tinker_url.resolve_base_url(tinker_base_url(tmp_path)) == "http://127.0.0.1:8765"
    assert project_tinker_url(tmp_path) == "http://127.0.0.1:8765"
    assert not tinker_costs_money(tmp_path)  # `machine tinker serve` on this machine
    monkeypatch.setenv("TINKER_BASE_URL", "https://tinker.example.com")
    assert tinker_base_url(tmp_path) is None  # the environment wins
    assert project_tinker_url(tmp_path) == "https://tinker.example.com"
    assert tinker_costs_money(tmp_path)
    assert tinker_url.resolve_base_url("http://explicit:1") == "http://explicit:1"


def test_a_transformers_5_model_dir_is_served_through_a_4x_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from machine_lsp.engines import smollm2

    source = smollm2.ensure_model()  # written by transformers 5
    monkeypatch.setenv("MACHINE_TINKER_SERVER_CACHE", str(tmp_path / "cache"))
    view = process.server_model_dir(source)
    assert view != source and view.parent == tmp_path / "cache" / "models"
    config = json.loads((view / "config.json").read_text())
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]
    tokenizer_config = json.loads((view / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "extra_special_tokens" not in tokenizer_config
    assert (view / "model.safetensors").resolve() == (source / "model.safetensors").resolve()
    assert (view / smollm2.MARKER_FILE).exists()  # the engine still picks the SmolLM2 renderer
    assert process.server_model_dir(view) == view  # already in the 4.x form: served as is


def test_the_port_of_a_server_that_just_died_is_free_again() -> None:
    """A crashed server leaves its accepted connections in TIME_WAIT for a minute; a restart on the same port must
    not be refused as "in use" (uvicorn binds with SO_REUSEADDR, and so does the check)."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, time\n"
            "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True)\n"
            "c, _ = s.accept(); time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(server.stdout.readline())
        assert not process.port_free(port)  # listening
        client = socket.create_connection((process.HOST, port))
        time.sleep(0.3)
    finally:
        server.kill()
        server.wait()
    time.sleep(0.3)
    client.close()
    with socket.socket() as plain:  # the connection lingers: a bind without SO_REUSEADDR still fails
        with pytest.raises(OSError):
            plain.bind((process.HOST, port))
    assert process.port_free(port)


def test_the_cli_refuses_a_busy_port_and_a_second_serve(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sleeper: subprocess.Popen[bytes],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    with socket.socket() as busy:
        busy.bind((process.HOST, 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["tinker", "serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is in use" in err and len(err.strip().splitlines()) == 1

    machine_dir = tmp_path / ".machine"
    process.server_dir(machine_dir).mkdir(parents=True)
    process.write_record(machine_dir, _record(sleeper.pid))
    assert main(["tinker", "serve", "--port", str(process.free_port())]) == 2
    assert f"already running for this project (pid {sleeper.pid}" in capsys.readouterr().err
    assert process.read_record(machine_dir) == _record(sleeper.pid)  # the running server's record is kept
    assert main(["tinker", "status"]) == 0
    assert f"Tinker server pid {sleeper.pid}" in capsys.readouterr().out
    assert not (tmp_path / "machine.toml").exists()


def test_the_cli_treats_a_record_from_before_a_reboot_as_stale(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sleeper: subprocess.Popen[bytes],
) -> None:
    """After a reboot the recorded pid may belong to another process (here: a live one): status, stop and serve
    all read the record as stale, remove it, and never signal that process."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    machine_dir = tmp_path / ".machine"
    process.server_dir(machine_dir).mkdir(parents=True)
    old_boot = _record(sleeper.pid, boot_id="00000000-0000-0000-0000-before-reboot")

    process.write_record(machine_dir, old_boot)
    assert main(["tinker", "status"]) == 1
    assert "removed a stale record" in capsys.readouterr().out
    assert process.read_record(machine_dir) is None

    process.write_record(machine_dir, old_boot)
    assert main(["tinker", "stop"]) == 0
    assert "no Tinker server running" in capsys.readouterr().out
    assert process.read_record(machine_dir) is None

    process.write_record(machine_dir, old_boot)
    missing = tmp_path / "missing-model"
    assert main(["tinker", "serve", "--model", str(missing), "--port", str(process.free_port())]) == 2
    err = capsys.readouterr().err
    assert "removed a stale server record" in err and "no such directory" in err
    assert process.read_record(machine_dir) is None
    assert sleeper.poll() is None  # the process that now has the pid was never signalled

    (process.server_dir(machine_dir) / process.RECORD_FILE).write_text("{not json")
    assert main(["tinker", "status", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"server": None, "stale_record_removed": True}


def test_a_server_venv_on_a_python_without_tarfile_filters_is_rebuilt(tmp_path: Path) -> None:
    """SkyRL tx unpacks checkpoints with `extractall(filter="data")` (Python >= 3.11.4): a cached venv made from
    an older Python is not ready (it would fail the first sampler checkpoint), nor is one we cannot date."""
    from machine_lsp.tinker_server import venv

    directory = tmp_path / "venv"
    (directory / "bin").mkdir(parents=True)
    (directory / "bin" / "python").symlink_to(sys.executable)
    (directory / venv.STAMP).write_text(f'{{"requirements_sha256": "{venv.requirements_digest()}"}}\n')
    assert not venv.is_ready(directory)  # no pyvenv.cfg
    for version, ready in (("3.11.2", False), ("3.11.4", True), ("3.12.1", True)):
        (directory / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion = {version}\n")
        assert venv.venv_python_version(directory) == tuple(map(int, version.split(".")))
        assert venv.is_ready(directory) is ready
    venv.check_python(sys.executable)  # this interpreter (the one that runs machine-lsp) is new enough


@pytest.mark.skipif(
    not Path("/usr/bin/python3.11").exists()
    or subprocess.run(
        ["/usr/bin/python3.11", "-c", "import tarfile; print(hasattr(tarfile, 'data_filter'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    != "False",
    reason="needs a Python 3.11 older than 3.11.4 at /usr/bin/python3.11 (Debian 12 has 3.11.2)",
)
def test_an_interpreter_without_tarfile_filters_is_refused() -> None:
    from machine_lsp.tinker_server import venv

    with pytest.raises(venv.ServerSetupError, match=r"needs Python >= 3\.11\.4 .* is 3\.11\.[0-3]"):
        venv.check_python("/usr/bin/python3.11")


# -- stop signals only a process it can prove is the server; records by the safe-write rule -----------------------


def test_stop_never_signals_a_process_whose_command_line_is_not_the_servers(machine_dir: Path) -> None:
    # The pid, start time and boot match (a record a cloned repository could hold), but not the command line.
    other = _spawn([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        process.write_record(
            machine_dir, _record(other.pid, cmdline=["python", "compat.py", "--port", "8000"])
        )
        # Status never takes it for the server, and leaves the record for `stop` to explain and clear.
        assert process.live_record(machine_dir) == (None, False)
        assert process.read_record(machine_dir) is not None
        outcome = process.stop(machine_dir)
        assert outcome.stopped is None and outcome.message.startswith("not stopped:"), outcome
        assert "command line is not the server's" in outcome.message
        time.sleep(0.5)
        assert other.poll() is None  # never signalled
        assert process.read_record(machine_dir) is None
    finally:
        other.kill()
        other.wait()


def test_stop_never_signals_a_process_without_the_servers_token(machine_dir: Path) -> None:
    other = _spawn([sys.executable, "-c", "import time; time.sleep(60)"])  # no token in its env
    try:
        process.write_record(machine_dir, _record(other.pid))
        outcome = process.stop(machine_dir)
        assert outcome.stopped is None and "does not hold the server's token" in outcome.message
        time.sleep(0.5)
        assert other.poll() is None
        old_format = _record(other.pid, cmdline=[], token="")  # written before records carried a proof
        process.write_record(machine_dir, old_format)
        assert "carries no proof" in process.stop(machine_dir).message and other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_stop_tells_the_truth_about_a_server_that_ignores_sigterm(
    machine_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "STOP_TIMEOUT_S", 1.0)
    stubborn = _spawn(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
        ],
        env=TOKEN_ENV,  # not a group leader: signalled as a process
    )
    try:
        time.sleep(0.5)  # its SIGTERM handler is in place
        process.write_record(machine_dir, _record(stubborn.pid))
        outcome = process.stop(machine_dir)
        assert outcome.stopped is not None and outcome.message.startswith("stopped the Tinker server")
        assert process.process_start_ticks(stubborn.pid) is None  # it took the SIGKILL: "stopped" is true
    finally:
        if stubborn.poll() is None:
            stubborn.kill()


def test_a_garbled_record_is_cleared_by_stop_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    path = process.record_path(tmp_path / ".machine")
    path.parent.mkdir(parents=True)
    for garbled in ('{"pid": "x"', '{"pid": 1}', "\xff\xfe"):
        path.write_text(garbled, errors="surrogateescape")
        assert main(["tinker", "stop"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("removed a garbled server record") and "nothing was signalled" in out, out
        assert len(out.strip().splitlines()) == 1 and not path.exists()


def test_a_planted_server_tmp_link_is_never_written_through(machine_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (process.server_dir(machine_dir) / "server.tmp").symlink_to(victim)
    (process.server_dir(machine_dir) / ".server.json.machine-tmp").symlink_to(victim)
    process.write_record(machine_dir, _record(os.getpid()))
    assert victim.read_text() == "precious\n"
    assert process.read_record(machine_dir) == _record(os.getpid())


def test_a_linked_server_dir_or_record_is_refused(tmp_path: Path) -> None:
    machine_dir = tmp_path / ".machine"
    machine_dir.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    process.server_dir(machine_dir).symlink_to(outside)
    with pytest.raises(OSError, match="tinker-server is a symbolic link, not a directory"):
        process.write_record(machine_dir, _record(os.getpid()))
    assert list(outside.iterdir()) == []
    process.server_dir(machine_dir).unlink()
    process.server_dir(machine_dir).mkdir()
    (outside / "server.json").write_bytes(msgspec.json.encode(_record(os.getpid())))
    process.record_path(machine_dir).symlink_to(outside / "server.json")
    assert process.stop(machine_dir).message.startswith("removed a garbled server record")
    assert (outside / "server.json").exists()  # only the link was removed
