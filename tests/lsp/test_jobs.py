"""Jobs end to end: the real validator runs as a child process; progress, events, cancel (three ways), failures."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import uuid
from pathlib import Path

import pytest
from lsp_helpers import WAIT, command
from lsprotocol import types
from pygls.exceptions import JsonRpcException

ROWS = 400_000  # big enough that validating takes seconds on a shared 2-core machine


@pytest.fixture(scope="session")
def big_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "big.jsonl"
    template = json.dumps(
        {
            "messages": [
                {"role": "user", "content": "What is 12 + N?"},
                {"role": "assistant", "content": "answer: N"},
            ]
        }
    )
    with path.open("w") as fh:
        for i in range(ROWS):
            fh.write(template.replace("N", str(i)) + "\n")
    return path


async def until(predicate, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0): check its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


async def test_validate_job_streams_progress_on_client_token(client, tmp_path):
    data = tmp_path / "small.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}
            )
            + "\n"
            for i in range(12000)
        )
        + "{bad\n"
    )
    token = "client-token-1"
    client.progress_reports[token] = []
    result = await command(client, "machine.validate", {"uri": data.as_uri()}, token=token)
    assert result["status"] == "done", result
    assert result["result"]["rows"] >= 12000 and result["result"]["errors"] == 1
    reports = client.progress_reports[token]
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and reports[0].cancellable
    assert isinstance(reports[-1], types.WorkDoneProgressEnd)
    middle = [r for r in reports if isinstance(r, types.WorkDoneProgressReport)]
    assert any(r.percentage is not None and 0 <= r.percentage <= 100 for r in middle)
    assert any("validated" in (r.message or "") for r in middle)
    events = [e for e in client.job_events if e.job_id == result["job_id"]]
    kinds = [e.event for e in events]
    assert kinds[0] == "start" and "progress" in kinds and "done" in kinds and kinds[-1] == "end"
    assert any(m.type == types.MessageType.Info and "rows" in m.message for m in client.messages)


async def test_server_created_progress_token(vscode, tmp_path):
    client = vscode
    data = tmp_path / "tiny.jsonl"
    data.write_text(
        json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
        + "\n"
    )
    result = await command(client, "machine.validate", {"path": str(data)})
    assert result["status"] == "done"
    tokens = [t for t in client.progress_reports if str(t).startswith("machine-job-")]
    assert len(tokens) == 1
    assert isinstance(client.progress_reports[tokens[0]][-1], types.WorkDoneProgressEnd)


async def _running_job(client, big_file: Path, token: str):
    client.progress_reports[token] = []
    task = asyncio.ensure_future(command(client, "machine.validate", {"path": str(big_file)}, token=token))
    await until(lambda: any(e.event == "progress" for e in client.job_events), "first progress event")
    listing = await command(client, "machine.jobs.list")
    (job,) = [j for j in listing["jobs"] if j["status"] == "running"]
    return task, job


async def test_cancel_from_progress(vscode, big_file):
    client = vscode
    task, job = await _running_job(client, big_file, "tok-cancel")
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token="tok-cancel"))
    result = await asyncio.wait_for(task, WAIT)
    assert result["status"] == "cancelled"
    assert pid_gone(job["pid"])
    assert not Path(result["run_dir"]).exists()  # validation is not a run: it leaves no run directory
    assert any(m.type == types.MessageType.Warning and "cancelled" in m.message for m in client.messages)


async def test_cancel_request_stops_the_child(vscode, big_file):
    """$/cancelRequest of the executeCommand request (pygls 2.1.1 needs the protocol override for this)."""
    client = vscode
    msg_id = str(uuid.uuid4())
    future = client.protocol.send_request(
        types.WORKSPACE_EXECUTE_COMMAND,
        types.ExecuteCommandParams(command="machine.validate", arguments=[{"path": str(big_file)}]),
        msg_id=msg_id,
    )
    await until(lambda: any(e.event == "progress" for e in client.job_events), "first progress event")
    listing = await command(client, "machine.jobs.list")
    (job,) = [j for j in listing["jobs"] if j["status"] == "running"]
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
    with pytest.raises(JsonRpcException):
        await asyncio.wait_for(asyncio.wrap_future(future), WAIT)
    await until(lambda: pid_gone(job["pid"]), "the child to exit")
    listing = await command(client, "machine.jobs.list")
    assert [j["status"] for j in listing["jobs"]] == ["cancelled"]


async def test_jobs_cancel_command_and_crash(vscode, big_file):
    client = vscode
    started = await command(client, "machine.validate", {"path": str(big_file), "wait": False})
    await until(lambda: any(e.event == "progress" for e in client.job_events), "first progress event")
    result = await command(client, "machine.jobs.cancel", {"job_id": started["job_id"]})
    assert result["status"] == "cancelled" and result["cancelled"] is True
    # A child that dies without a word (SIGKILL from outside) is reported as a crash; the server stays up.
    client.job_events.clear()
    started = await command(client, "machine.validate", {"path": str(big_file), "wait": False})
    await until(lambda: any(e.event == "progress" for e in client.job_events), "first progress event")
    listing = await command(client, "machine.jobs.list")
    (job,) = [j for j in listing["jobs"] if j["job_id"] == started["job_id"]]
    os.kill(job["pid"], signal.SIGKILL)
    await until(lambda: any(e.event == "end" for e in client.job_events), "the end event")
    end = [e for e in client.job_events if e.event == "end"][-1]
    assert end.status == "failed" and "crashed" in end.message
    assert (await command(client, "machine.server.info"))["pid"] > 0


async def test_failing_job_is_an_error_reply(vscode, tmp_path):
    client = vscode
    binary = tmp_path / "blob.jsonl"
    binary.write_bytes(b"\x00\x01\x02" * 1000)
    with pytest.raises(JsonRpcException, match="binary"):
        await command(client, "machine.validate", {"path": str(binary)})
    with pytest.raises(JsonRpcException, match="no such file"):
        await command(client, "machine.validate", {"path": str(tmp_path / "missing.jsonl")})


async def test_long_runs_ask_first(vscode):
    client = vscode
    row = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n'
    (client.root / "train.jsonl").write_text(row * 2)
    client.answers.append("Cancel")
    declined = await command(client, "machine.train.run", {"data": "train.jsonl"})
    assert declined["status"] == "declined"
    assert "start the training run?" in client.questions[0].message
    # what will run, sized from the rows (core.run_plan: 2 tiny rows need many epochs to reach the floors)
    assert (
        "train-run on local: train.jsonl: 2 rows x 25 epochs = 25 steps of batch 2 (sized from the rows)"
        in client.questions[0].message
    )
    assert "trained of ~" in client.questions[0].message
    assert [a.title for a in client.questions[0].actions] == ["Run", "Cancel"]
    assert not list((client.root / ".machine").glob("runs/*"))  # nothing ran


async def test_tinker_runs_ask_only_when_they_cost_money(vscode):
    """Hosted Tinker is paid: a smoke run there asks first. A server on this machine (`machine tinker serve`
    wrote its loopback URL to machine.toml) is free: the run starts without a question."""
    client = vscode
    row = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n'
    (client.root / "train.jsonl").write_text(row * 2)
    args = {"data": "train.jsonl", "engine": "tinker"}
    plan = await command(client, "machine.train.smoke", {**args, "plan": True})
    assert plan["costs_money"] is True
    client.answers.append("Cancel")
    declined = await command(client, "machine.train.smoke", args)
    assert declined["status"] == "declined" and len(client.questions) == 1
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (client.root / "machine.toml").write_text(f'[tinker]\nbase_url = "http://127.0.0.1:{port}"\n')
    plan = await command(client, "machine.train.smoke", {**args, "plan": True})
    assert plan["costs_money"] is False
    with pytest.raises(JsonRpcException, match=f"127.0.0.1:{port}"):  # it ran, and found no server there
        await command(client, "machine.train.smoke", args)
    assert len(client.questions) == 1  # no second question


async def test_scaffolds(vscode):
    client = vscode
    result = await command(client, "machine.train.sft", {"engine": "local", "steps": 6})
    names = sorted(Path(p).name for p in result["written"])
    assert names == ["machine.toml", "train_sft.py"]
    assert "steps = 6" in (client.root / "machine.toml").read_text()
    with pytest.raises(JsonRpcException, match="already exist"):
        await command(client, "machine.train.sft", {})
    result = await command(client, "machine.eval.init", {})
    assert [Path(p).name for p in result["written"]] == ["eval.py"]
    with pytest.raises(JsonRpcException, match="no such file"):
        await command(client, "machine.train.sft", {"data": "missing.jsonl", "force": True})


async def test_shutdown_kills_running_jobs(vscode, big_file):
    client = vscode
    started = await command(client, "machine.validate", {"path": str(big_file), "wait": False})
    await until(lambda: any(e.event == "progress" for e in client.job_events), "first progress event")
    listing = await command(client, "machine.jobs.list")
    (job,) = [j for j in listing["jobs"] if j["job_id"] == started["job_id"]]
    await asyncio.wait_for(client.shutdown_session(), WAIT)
    await until(lambda: pid_gone(job["pid"]), "the child to be killed")
    assert client._server.returncode == 0


async def test_shutdown_cancels_running_jobs_as_the_cancel_command_does(vscode, big_file):
    """SIGTERM first, then wait: the child records its own end, so the manifest says "cancelled", not "lost"."""
    client = vscode
    started = await command(client, "machine.validate", {"path": str(big_file), "wait": False})
    await until(lambda: any(e.event == "progress" for e in client.job_events), "first progress event")
    listing = await command(client, "machine.jobs.list")
    (job,) = [j for j in listing["jobs"] if j["job_id"] == started["job_id"]]
    await asyncio.wait_for(client.shutdown_session(), WAIT)
    await until(lambda: pid_gone(job["pid"]), "the child to exit")
    run_dir = next(e.run_dir for e in client.job_events if e.event == "start" and e.job_id == job["job_id"])
    assert not Path(run_dir).exists()  # nothing can say "running" or "lost": validation keeps no run


def _eval_result(name: str, outputs: list[str]) -> bytes:
    from machine_lsp.core import evals

    rows = [
        evals.RowResult(
            id=f"r{i}",
            prompt=f"q{i}",
            expected="answer: 1",
            output=o,
            correct=o == "answer: 1",
            format_ok=True,
        )
        for i, o in enumerate(outputs)
    ]
    correct = sum(r.correct for r in rows)
    result = evals.EvalResult(
        name=name, model="m", checkpoint=None, engine="local", data_path=None, data_sha256="x", grader="exact",
        format_pattern="answer: .*", n=len(rows), correct=correct, accuracy=correct / len(rows), format_ok=len(rows),
        format_rate=1.0, rows=rows, timings=evals.Timings(),
    )  # fmt: skip
    return evals.encode_result(result)


async def test_eval_compare_in_process(vscode, tmp_path):
    client = vscode
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(_eval_result("baseline", ["answer: 2", "answer: 2", "answer: 1", "answer: 3"]))
    b.write_bytes(_eval_result("step-10", ["answer: 1", "answer: 1", "answer: 1", "answer: 3"]))
    result = await command(client, "machine.eval.compare", {"a": str(a), "b": str(b)})
    assert result["comparison"]["gained"] == 2 and result["comparison"]["lost"] == 0
    assert "25% → 75%" in result["message"]
    with pytest.raises(JsonRpcException, match="cannot compare"):
        await command(client, "machine.eval.compare", {"a": str(a), "b": str(tmp_path / "missing.json")})
