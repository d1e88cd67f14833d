"""The one job client (machine_lsp.jobs.client), both faces, against real child processes: the real `validate`
verb, and a small test verb driven by the real runner for cancel, crash and stray output."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from machine_lsp.jobs import events as ev
from machine_lsp.jobs.client import AsyncJobProcess, JobProcess, job_command

SCRIPT = r"""
import sys, time
import msgspec
from machine_lsp.jobs import events as ev
from machine_lsp.jobs.runner import run

class A(msgspec.Struct, forbid_unknown_fields=True):
    mode: str

def verb(ctx, a):
    if a.mode == "slow":
        for step in range(1, 100000):
            ctx.emit(ev.Step(step=step, total=None, loss=1.0 / step, lr=1e-3, tokens=5, seconds_per_step=0.02))
            if step == 3:
                ctx.add_checkpoint("step-3", f"local://{ctx.run_id}/step-3", 3)
            time.sleep(0.02)
    return {"answer": 42}, "all good"

if sys.argv[1] == "die":
    sys.stdout.write("not an event\n")
    sys.stdout.flush()
    print("boom: the child died", file=sys.stderr)
    sys.exit(3)
sys.exit(run("test", verb, A, sys.argv[1]))
"""


def _script(args: dict | str) -> list[str]:
    return [sys.executable, "-c", SCRIPT, args if isinstance(args, str) else json.dumps(args)]


def _rows(path: Path) -> None:
    row = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    path.write_text(json.dumps(row) + "\n{not json\n")


def test_job_command_leaves_out_none_and_passes_cwd(tmp_path: Path) -> None:
    command = job_command("validate", {"path": "a.jsonl", "eval_path": None}, cwd=tmp_path)
    assert command[1:4] == ["-m", "machine_lsp.jobs", "validate"]
    assert json.loads(command[command.index("--args-json") + 1]) == {"path": "a.jsonl"}
    assert command[-2:] == ["--cwd", str(tmp_path)]


def test_sync_client_runs_the_real_validate_verb(project: Path, job_env) -> None:
    _rows(project / "train.jsonl")
    job = JobProcess.start(job_command("validate", {"path": "train.jsonl"}), cwd=project, env=job_env())
    lines = list(job)
    outcome = job.wait()
    kinds = [type(line.event).__name__ for line in lines]
    assert kinds[0] == "Start" and kinds[-1] == "Done" and "Progress" in kinds
    assert outcome.status == "done" and outcome.returncode == 0
    assert isinstance(outcome.final, ev.Done) and outcome.final.result["ok"] is False


def test_sync_client_cancel_ends_cancelled_with_the_last_checkpoint(project: Path, job_env) -> None:
    job = JobProcess.start(_script({"mode": "slow"}), cwd=project, env=job_env())
    for line in job:
        if isinstance(line.event, ev.Checkpoint):
            job.cancel()
    outcome = job.wait(grace_s=30)
    assert outcome.status == "cancelled" and outcome.returncode == 130
    assert isinstance(outcome.final, ev.Error) and outcome.final.kind == "cancelled"
    assert "step-3" in outcome.final.message


def test_sync_client_reports_a_child_that_dies_without_an_outcome(project: Path, job_env) -> None:
    job = JobProcess.start(_script("die"), cwd=project, env=job_env())
    lines = list(job)
    outcome = job.wait()
    assert len(lines) == 1 and lines[0].event is None and lines[0].raw == b"not an event\n"
    assert isinstance(lines[0].error, ev.EventDecodeError)
    assert outcome.status == "failed" and outcome.final is None and outcome.returncode == 3
    assert "boom: the child died" in outcome.stderr_tail


async def test_async_client_runs_and_cancels_from_another_task(project: Path, job_env) -> None:
    _rows(project / "train.jsonl")
    done = await AsyncJobProcess.start(
        job_command("validate", {"path": "train.jsonl"}), cwd=project, env=job_env()
    )
    kinds = [type(line.event).__name__ async for line in done]
    outcome = await asyncio.wait_for(done.wait(), 60)
    assert kinds[0] == "Start" and kinds[-1] == "Done" and outcome.status == "done"

    slow = await AsyncJobProcess.start(_script({"mode": "slow"}), cwd=project, env=job_env())
    cancelling: asyncio.Task[None] | None = None

    async def follow() -> list[ev.Event]:
        nonlocal cancelling
        seen = []
        async for line in slow:
            assert line.event is not None
            seen.append(line.event)
            if isinstance(line.event, ev.Checkpoint) and cancelling is None:
                cancelling = asyncio.ensure_future(slow.cancel(grace_s=30))
        return seen

    seen = await asyncio.wait_for(follow(), 60)
    assert cancelling is not None
    await asyncio.wait_for(cancelling, 60)
    outcome = await asyncio.wait_for(slow.wait(), 60)
    assert outcome.status == "cancelled" and outcome.returncode == 130
    assert isinstance(seen[-1], ev.Error) and seen[-1].kind == "cancelled"


async def test_async_client_kill_stops_a_child_at_once(project: Path, job_env) -> None:
    slow = await AsyncJobProcess.start(_script({"mode": "slow"}), cwd=project, env=job_env())
    async for line in slow:
        if isinstance(line.event, ev.Step):
            slow.kill()
            break
    outcome = await asyncio.wait_for(slow.wait(), 30)
    assert outcome.returncode < 0 and outcome.status == "failed" and outcome.final is None


@pytest.mark.parametrize("face", ["sync", "async"])
def test_both_faces_give_the_same_outcome(project: Path, job_env, face: str) -> None:
    if face == "sync":
        job = JobProcess.start(_script({"mode": "ok"}), cwd=project, env=job_env())
        events = [line.event for line in job]
        outcome = job.wait()
    else:

        async def go():
            job = await AsyncJobProcess.start(_script({"mode": "ok"}), cwd=project, env=job_env())
            return [line.event async for line in job], await job.wait()

        events, outcome = asyncio.run(go())
    assert [type(e).__name__ for e in events] == ["Start", "Done"]
    assert outcome.status == "done" and outcome.final is not None and outcome.final.result == {"answer": 42}
