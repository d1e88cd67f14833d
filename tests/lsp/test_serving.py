"""The two servers' LSP commands with the real language server over stdio, the real `serve` job (SmolLM2 on the
local engine, a real HTTP server) and the real Tinker-server record logic.

The Tinker server itself (SkyRL tx, ~8.6 GB RSS and minutes to start) is not started here: its start, readiness
and stop are covered by tests/tinker_server; here its LSP commands' answers and failure paths run for real.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from lsp_helpers import WAIT, command, plain
from lsprotocol import types
from pygls.exceptions import JsonRpcException

LOAD_WAIT = 240.0  # the first load of the model on a shared 2-core machine


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    from machine_lsp.engines import smollm2

    return smollm2.ensure_model()  # converted once (a minute) before the server's child needs it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


async def fetch(url: str, body: dict | None = None) -> dict:
    return await asyncio.get_running_loop().run_in_executor(None, http, url, body)


async def call(client, command_id: str, args: dict, timeout: float = WAIT) -> dict:
    return plain(await asyncio.wait_for(command(client, command_id, args), timeout))


async def until_status(client, status: str, timeout: float = WAIT) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        reply = await call(client, "machine.serve.status", {})
        if reply["status"] == status:
            return reply
        if time.monotonic() > deadline:
            raise AssertionError(f"serve status stayed {reply}")
        await asyncio.sleep(0.2)


def shown(client) -> list[str]:
    return [m.message for m in client.messages]


async def test_serve_start_answers_then_stop(vscode, smollm2_dir):
    client, root = vscode, vscode.root
    # A taken port: refused at once, with the reason, before any child starts.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        with pytest.raises(JsonRpcException) as err:
            await call(client, "machine.serve.start", {"checkpoint": "base", "port": busy})
    assert f"port {busy} on 127.0.0.1 is in use" in str(err.value)
    # An unknown checkpoint: the job says so within seconds, nothing is served.
    with pytest.raises(JsonRpcException) as err:
        await call(client, "machine.serve.start", {"checkpoint": "local://no-such-run/step-1", "port": 0}, 60)
    assert "no-such-run" in str(err.value)
    assert (await call(client, "machine.serve.status", {}))["status"] == "stopped"

    port = free_port()
    reply = await call(client, "machine.serve.start", {"checkpoint": "base", "port": port}, LOAD_WAIT)
    assert reply["status"] == "serving" and reply["url"] == f"http://127.0.0.1:{port}", reply
    assert reply["openai_base"] == f"{reply['url']}/v1" and reply["checkpoint"] == "base"
    models = await fetch(f"{reply['openai_base']}/models")
    assert [m["id"] for m in models["data"]] == [reply["model"]]
    answer = await fetch(
        f"{reply['openai_base']}/chat/completions",
        {"model": reply["model"], "messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 8},
    )
    text = answer["choices"][0]["message"]["content"]
    assert isinstance(text, str) and text.strip(), answer
    rows = [json.loads(line) for f in (root / ".machine" / "served").glob("*.jsonl") for line in f.open()]
    assert len(rows) == 1 and rows[0]["messages"][-1]["content"] == text, rows

    status = await call(client, "machine.serve.status", {})
    assert status["status"] == "serving" and status["url"] == reply["url"] and status["pid"] == reply["pid"]
    again = await call(client, "machine.serve.start", {"checkpoint": "base", "port": free_port()})
    assert (
        again["already_running"] is True
        and again["job_id"] == reply["job_id"]
        and again["url"] == reply["url"]
    )

    stopped = await call(client, "machine.serve.stop", {}, 30)
    assert stopped["status"] == "stopped" and "stopped serving base" in stopped["message"]
    assert (await call(client, "machine.serve.status", {}))["status"] == "stopped"
    with pytest.raises(OSError):
        await fetch(f"{reply['openai_base']}/models")
    assert not (root / ".machine" / "runs").exists() or not any((root / ".machine" / "runs").iterdir())


async def test_serve_child_dying_is_told_and_status_says_stopped(vscode, smollm2_dir):
    client = vscode
    # jobReplies "immediate" (wait: false): the reply comes at once; the URL comes with the ready event.
    reply = await call(client, "machine.serve.start", {"checkpoint": "base", "port": 0, "wait": False})
    assert reply["status"] == "starting" and reply["url"] is None, reply
    serving = await until_status(client, "serving", LOAD_WAIT)
    events = [plain(e) for e in client.job_events]
    ready = [e for e in events if e["event"] == "ready" and e["job_id"] == reply["job_id"]]
    assert ready and ready[0]["url"] == serving["url"] and serving["port"] > 0
    # The job's work-done progress: loading, then it ends saying where it serves (serving is no progress: a
    # spinner that stayed would say "starting" for as long as the checkpoint is served).
    reports = client.progress_reports[f"machine-job-{reply['job_id']}"]
    messages = [getattr(r, "message", None) or "" for r in reports]
    assert any(m.startswith("loading base") for m in messages), messages
    assert isinstance(reports[-1], types.WorkDoneProgressEnd), reports
    assert f"serving base at {serving['url']}/v1" in messages[-1], messages
    os.kill(serving["pid"], signal.SIGKILL)
    stopped = await until_status(client, "stopped", 30)
    assert "crashed" in stopped["message"], stopped
    deadline = time.monotonic() + WAIT
    while not any("crashed" in m for m in shown(client)):
        assert time.monotonic() < deadline, shown(client)
        await asyncio.sleep(0.1)


async def test_use_prints_and_writes_the_agent_config(vscode):
    client, root = vscode, vscode.root
    reply = await call(client, "machine.use", {"checkpoint": "base", "agent": "claude", "port": 8799}, 60)
    target = root / ".claude" / "settings.local.json"
    assert reply["path"] == str(target) and reply["written"] == [] and not target.exists()
    assert "http://127.0.0.1:8799" in reply["text"] and reply["local"] is True and reply["serving"] is False
    assert any("start the server" in note for note in reply["notes"])
    written = await call(
        client, "machine.use", {"checkpoint": "base", "agent": "claude", "port": 8799, "write": True}, 60
    )
    assert written["written"] == [str(target)]
    assert json.loads(target.read_text())["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8799"
    with pytest.raises(JsonRpcException) as err:
        await call(client, "machine.use", {"checkpoint": "nope", "agent": "pi"}, 60)
    assert "unknown checkpoint 'nope'" in str(err.value)
    with pytest.raises(JsonRpcException) as err:
        await call(client, "machine.use", {"checkpoint": "base", "agent": "vim"})
    assert "agent must be one of pi, codex, claude, opencode" in str(err.value)
    for port in (0, 99999, -1):  # refused before anything is written (`or` once turned 0 into the default)
        with pytest.raises(JsonRpcException) as err:
            await call(client, "machine.use", {"checkpoint": "base", "agent": "claude-code", "port": port})
        assert f"port {port} is not a TCP port (1-65535)" in str(err.value)
    assert json.loads(target.read_text())["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8799"
    spelled = await call(
        client, "machine.use", {"checkpoint": "base", "agent": "claude-code", "port": 8798}, 60
    )
    assert spelled["agent"] == "claude" and "http://127.0.0.1:8798" in spelled["text"]


async def test_tinker_commands_without_a_server(vscode, tmp_path):
    client, root = vscode, vscode.root
    status = await call(client, "machine.tinker.status", {}, 60)
    assert status["status"] == "stopped" and status["message"] == "no Tinker server running for this project"
    missing = tmp_path / "no-such-model"
    with pytest.raises(JsonRpcException) as err:
        await call(client, "machine.tinker.serve", {"model": str(missing)}, 60)
    assert f"--model {missing}: no such directory" in str(err.value)
    assert not (root / ".machine" / "tinker-server" / "server.json").exists()
    # A record left by a process that is gone (a reboot, a kill -9): status removes it and says so.
    home = root / ".machine" / "tinker-server"
    home.mkdir(parents=True, exist_ok=True)
    record = {
        "pid": 999_999,
        "start_ticks": 1,
        "boot_id": "gone",
        "host": "127.0.0.1",
        "port": 8000,
        "base_url": "http://127.0.0.1:8000",
        "model": "m",
        "log": "l",
        "started_at": "2026-01-01T00:00:00+00:00",
    }
    (home / "server.json").write_text(json.dumps(record))
    stale = await call(client, "machine.tinker.status", {}, 60)
    assert stale["status"] == "stopped" and stale["stale_record_removed"] is True, stale
    assert not (home / "server.json").exists()
    stop = await call(client, "machine.tinker.stop", {}, 60)
    assert stop["status"] == "stopped" and stop["message"] == "no Tinker server running for this project"


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


async def test_a_server_whose_language_server_died_stops(vscode, smollm2_dir):
    client = vscode
    lsp_pid = (await call(client, "machine.server.info", {}))["pid"]
    reply = await call(client, "machine.serve.start", {"checkpoint": "base", "port": 0}, LOAD_WAIT)
    assert reply["status"] == "serving"
    os.kill(
        lsp_pid, signal.SIGKILL
    )  # the editor's server is gone without a shutdown: nothing cancels the job
    deadline = time.monotonic() + 30
    while not gone(reply["pid"]):
        assert time.monotonic() < deadline, "the serve job outlived its language server"
        await asyncio.sleep(0.2)
    with pytest.raises(OSError):
        await fetch(f"{reply['openai_base']}/models")


async def test_tinker_commands_with_a_recorded_process(vscode):
    """The record logic behind the LSP commands with a real process under the record (SkyRL tx itself is started
    by tests/tinker_server; here a process in its own session stands where the server would be)."""
    import subprocess
    import sys

    from machine_lsp.tinker_server import process

    client, root = vscode, vscode.root
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        with pytest.raises(JsonRpcException) as err:
            await call(client, "machine.tinker.serve", {"port": busy}, 60)
    assert f"port {busy} on 127.0.0.1 is in use" in str(err.value)
    holder_argv = [sys.executable, "-c", "import time; time.sleep(120)"]
    token = process.new_token()  # `start` puts one into the server's environment; `stop` checks it
    holder = subprocess.Popen(
        holder_argv, start_new_session=True, env={**os.environ, process.TOKEN_ENV: token}
    )
    try:
        port = free_port()
        machine_dir = root / ".machine"
        process.server_dir(machine_dir).mkdir(parents=True, exist_ok=True)
        process.write_record(
            machine_dir,
            process.ServerRecord(
                pid=holder.pid,
                start_ticks=process.process_start_ticks(holder.pid) or 0,
                boot_id=process.boot_id(),
                host="127.0.0.1",
                port=port,
                base_url=process.base_url_for(port),
                model="m",
                log=str(machine_dir / "tinker-server" / "server.log"),
                started_at="2026-12-01T00:00:00+00:00",
                ready=True,
                cmdline=holder_argv,
                token=token,
            ),
        )
        status = await call(client, "machine.tinker.status", {}, 60)
        assert status["status"] == "running" and status["pid"] == holder.pid and status["answering"] is False
        again = await call(client, "machine.tinker.serve", {}, 60)
        assert again["already_running"] is True and again["base_url"] == f"http://127.0.0.1:{port}", again
        # Reaped here as it ends (it is this test's child; the real server is reparented and reaped by init).
        reaped = asyncio.get_running_loop().run_in_executor(None, holder.wait)
        stopped = await call(client, "machine.tinker.stop", {}, 60)
        assert stopped["status"] == "stopped" and f"pid {holder.pid}" in stopped["message"]
        assert await asyncio.wait_for(reaped, 30) == -signal.SIGTERM
        assert (await call(client, "machine.tinker.status", {}, 60))["status"] == "stopped"
    finally:
        if holder.poll() is None:
            holder.kill()


async def test_shutdown_stops_the_served_checkpoint(vscode, smollm2_dir):
    client = vscode
    reply = await call(client, "machine.serve.start", {"checkpoint": "base", "port": 0}, LOAD_WAIT)
    assert reply["status"] == "serving"
    await asyncio.wait_for(client.shutdown_session(), 30)  # the editor closes: `shutdown` cancels every job
    assert gone(reply["pid"]), "the serve job outlived the server's shutdown"
    with pytest.raises(OSError):
        await fetch(f"{reply['openai_base']}/models")


async def test_serving_promoted_reports_a_failed_swap_and_keeps_the_old_checkpoint(vscode, smollm2_dir):
    """`promoted` is followed: a promoted checkpoint that cannot load comes to the editor as the reply's
    `last_swap` (and a `log` job event), while the server keeps serving what it served."""
    import subprocess
    import sys

    client, root = vscode, vscode.root
    reply = await call(client, "machine.serve.start", {"checkpoint": "promoted", "port": 0}, LOAD_WAIT)
    assert reply["status"] == "serving" and reply["checkpoint"] == "base" and reply["swaps"] == 0, reply
    # Cannot load: an incomplete manifest, an adapter that is no safetensors file.
    broken = root / "broken-checkpoint"
    broken.mkdir()
    manifest = {
        "format": "machine-lsp-local-checkpoint/1",
        "address": str(broken),
        "run_id": "r",
        "name": "n",
    }
    manifest |= {"engine": "local", "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct", "step": 1}
    (broken / "manifest.json").write_text(json.dumps(manifest))
    (broken / "adapter_config.json").write_text("{}")
    (broken / "adapter_model.safetensors").write_bytes(b"not safetensors" * 64)
    promoted = subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", "train", "promote", str(broken)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert promoted.returncode == 0, promoted.stderr
    deadline = time.monotonic() + LOAD_WAIT
    status = await call(client, "machine.serve.status", {})
    while status["last_swap"] is None and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        status = await call(client, "machine.serve.status", {})
    assert status["last_swap"].startswith(f"swap failed: {broken} did not load"), status
    assert status["last_swap"].endswith("still serving base") and status["checkpoint"] == "base", status
    assert status["swaps"] == 0 and status["url"] == reply["url"], status
    health = await fetch(f"{reply['url']}/health")
    assert health["checkpoint"] == "base" and str(broken) in health["swap_error"], health
    await call(client, "machine.serve.stop", {}, 30)


def test_a_swap_event_updates_what_serve_status_names(tmp_path):
    """The `serve` job's second `ready` is a swap: the served checkpoint changes, the port stays, `swaps` counts it;
    a `swap failed:` warning is kept as `last_swap` and changes nothing else."""
    from machine_lsp.jobs import events as ev
    from machine_lsp.lsp.features.serving import _Served

    served = _Served(checkpoint="promoted", port=0, served_dir=tmp_path)
    served.on_event(ev.Ready(url="http://127.0.0.1:4321", name="base", message="serving base"))
    assert (served.checkpoint, served.port, served.swaps, served.last_swap) == ("base", 4321, 0, None)
    line = "swapped: now serving local://r/step-6 (was base; loaded in 3.0 s)"
    served.on_event(ev.Ready(url="http://127.0.0.1:4321", name="local://r/step-6", message=line))
    assert (served.checkpoint, served.port, served.swaps, served.last_swap) == (
        "local://r/step-6",
        4321,
        1,
        line,
    )
    failed = f"{ev.SWAP_FAILED}/x did not load: OSError: no; still serving local://r/step-6"
    served.on_event(ev.Log(message=failed, level="warning"))
    served.on_event(ev.Log(message="some other warning", level="warning"))
    assert (served.checkpoint, served.swaps, served.last_swap) == ("local://r/step-6", 1, failed)
