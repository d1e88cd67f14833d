"""The job runner's lifecycle in a real child process: events only on stdout, run dir, cancel, crash, failure.

The verbs here are small test verbs driven by the real runner (the real verbs have their own tests)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = r"""
import sys, time
import msgspec
from machine_lsp.jobs import events as ev
from machine_lsp.jobs.runner import JobError, run

class A(msgspec.Struct, forbid_unknown_fields=True):
    mode: str

def verb(ctx, a):
    if a.mode in ("ok", "input-late", "input-after-step"):
        ctx.run_dir  # what a data snapshot or a trainer does: the run directory is created here
    print("stray print from a library")
    print("a warning on stderr", file=sys.stderr)
    if a.mode == "crash":
        return {"x": 1 / 0}, "unreachable"
    if a.mode == "input-after-step":
        ctx.emit(ev.Step(step=1, total=2, loss=1.0, lr=1e-3, tokens=5, seconds_per_step=0.02))
    if a.mode.startswith("input"):
        raise JobError("data.jsonl:3: row has no assistant message", kind="input")
    if a.mode == "slow":
        for step in range(1, 100000):
            ctx.emit(ev.Step(step=step, total=None, loss=1.0 / step, lr=1e-3, tokens=5, seconds_per_step=0.02))
            if step == 3:
                ctx.add_checkpoint("step-3", f"local://{ctx.run_id}/step-3", 3)
            time.sleep(0.02)
    if a.mode == "stuck":  # a save that never returns: a cancel waits for it, so only a kill ends the job
        ctx.add_checkpoint("step-1", f"local://{ctx.run_id}/step-1", 1)
        with ctx.shielded():
            ctx.log("stuck")
            time.sleep(600)
    if a.mode == "shielded":
        with ctx.shielded():
            ctx.log("saving")
            time.sleep(1.5)
            ctx.add_checkpoint("step-1", f"local://{ctx.run_id}/step-1", 1)
        ctx.log("after the save")
        time.sleep(60)
    return {"answer": 42}, "all good"

sys.exit(run("test", verb, A, sys.argv[1]))
"""


def _start(project: Path, args: dict, job_env) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, json.dumps(args)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=job_env(),
    )


def _finish(proc: subprocess.Popen[bytes], timeout: float = 60) -> tuple[int, list[dict], str]:
    out, err = proc.communicate(timeout=timeout)
    events = [json.loads(line) for line in out.splitlines() if line.strip()]  # every stdout line is JSON
    return proc.returncode, events, err.decode()


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def test_done_lifecycle_and_clean_stdout(project: Path, job_env, only_run_dir) -> None:
    code, events, err = _finish(_start(project, {"mode": "ok"}, job_env))
    assert code == 0, err
    assert [e["event"] for e in events] == ["start", "done"]
    assert events[-1]["result"] == {"answer": 42}
    run_dir = only_run_dir(project)
    assert events[0]["run_id"] == run_dir.name and events[0]["run_dir"] == str(run_dir)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "done" and manifest["result"] == {"answer": 42}
    assert manifest["job"] == "test" and manifest["args"] == {"mode": "ok"}
    # events.jsonl mirrors stdout; stray prints and stderr are in stderr.log (and still on stderr)
    logged = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert logged == events
    log = (run_dir / "stderr.log").read_text()
    assert "stray print from a library" in log and "a warning on stderr" in log
    assert "stray print from a library" in err


def test_sigterm_cancels_and_records_last_checkpoint(project: Path, job_env, only_run_dir) -> None:
    proc = _start(project, {"mode": "slow"}, job_env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    seen_checkpoint = False
    while time.monotonic() < deadline and not seen_checkpoint:
        line = proc.stdout.readline()
        assert line, "job ended early"
        seen_checkpoint = json.loads(line)["event"] == "checkpoint"
    assert seen_checkpoint
    proc.send_signal(signal.SIGTERM)
    code, events, _ = _finish(proc)
    assert code == 130
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "cancelled"
    run_dir = only_run_dir(project)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "cancelled"
    assert manifest["last_checkpoint"] == f"local://{run_dir.name}/step-3"
    assert manifest["checkpoints"][0]["step"] == 3
    assert "step-3" in events[-1]["message"]
    assert manifest["finished_at"]


def test_crash_marks_failed_with_error_and_traceback(project: Path, job_env, only_run_dir) -> None:
    code, events, _ = _finish(_start(project, {"mode": "crash"}, job_env))
    assert code == 1
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "crash"
    assert "ZeroDivisionError" in events[-1]["message"]
    run_dir = only_run_dir(project)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "failed" and manifest["error"].startswith("ZeroDivisionError")
    assert "Traceback" in (run_dir / "stderr.log").read_text()


def test_expected_failure_has_message_without_traceback(project: Path, job_env, only_run_dir) -> None:
    code, events, err = _finish(_start(project, {"mode": "input"}, job_env))
    assert code == 1
    assert events[-1] == {
        "event": "error",
        "message": "data.jsonl:3: row has no assistant message",
        "kind": "input",
    }
    assert "Traceback" not in err
    # refused before any work (no step, checkpoint or result): a pre-flight, not a run, so no run directory
    assert not (project / ".machine" / "runs").exists()


def test_refused_after_the_run_dir_was_made_leaves_no_run(project: Path, job_env) -> None:
    code, events, _ = _finish(_start(project, {"mode": "input-late"}, job_env))
    assert code == 1 and events[-1]["kind"] == "input"
    assert list((project / ".machine" / "runs").iterdir()) == []


def test_a_failure_after_work_started_keeps_its_run(project: Path, job_env, only_run_dir) -> None:
    code, events, _ = _finish(_start(project, {"mode": "input-after-step"}, job_env))
    assert code == 1 and events[-1]["kind"] == "input"
    run_dir = only_run_dir(project)
    assert _manifest(run_dir)["status"] == "failed"
    assert "Traceback" not in (run_dir / "stderr.log").read_text()
    logged = [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert logged == ["start", "step", "error"]  # the events from before the directory existed are kept


def test_a_finished_job_is_on_record_even_if_it_saved_nothing(project: Path, job_env, only_run_dir) -> None:
    """A job that ends done is a run (an eval writes its result outside the run dir); only the validate job and
    refused pre-flights leave no run directory."""
    code, events, _ = _finish(_start(project, {"mode": "quiet"}, job_env))
    assert code == 0 and events[-1]["event"] == "done"
    assert _manifest(only_run_dir(project))["status"] == "done"


def test_bad_args_is_a_usage_error_without_run_dir(project: Path, job_env, only_run_dir) -> None:
    code, events, _ = _finish(_start(project, {"mode": "ok", "surprise": 1}, job_env))
    assert code == 2
    assert len(events) == 1 and events[0]["event"] == "error" and events[0]["kind"] == "usage"
    assert "surprise" in events[0]["message"]
    assert not (project / ".machine" / "runs").exists()


def test_cancel_during_a_shielded_save_waits_for_the_checkpoint(project: Path, job_env, only_run_dir) -> None:
    proc = _start(project, {"mode": "shielded"}, job_env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, "job ended early"
        if json.loads(line).get("message") == "saving":
            break
    proc.send_signal(signal.SIGTERM)
    code, events, _ = _finish(proc)
    assert code == 130
    assert [e["event"] for e in events] == ["checkpoint", "error"]  # the save finished, nothing ran after it
    manifest = _manifest(only_run_dir(project))
    assert manifest["status"] == "cancelled" and manifest["last_checkpoint"].endswith("/step-1")


def test_a_job_that_does_not_stop_on_sigterm_is_killed_and_recorded_cancelled(project: Path, job_env) -> None:
    """`machine jobs cancel`'s rule (core.runs.stop_job): SIGTERM, a grace period, then SIGKILL and a record of it,
    so a cancel ends however long the step in progress takes (a loaded machine; a save that hangs)."""
    from machine_lsp.core import runs

    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, json.dumps({"mode": "stuck"})],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=job_env(),
        start_new_session=True,  # as the CLI and the language server start jobs
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if json.loads(line).get("message") == "stuck":
                break
        run_dir = next((project / ".machine" / "runs").iterdir())
        stopped = runs.stop_job(run_dir, runs.read_manifest(run_dir), grace_s=2)
        assert stopped.killed
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    manifest = runs.read_manifest(run_dir)
    assert manifest.status == "cancelled" and manifest.error_kind == "cancelled"
    assert "did not stop within 2 s of SIGTERM" in (manifest.error or "")
    assert manifest.last_checkpoint == f"local://{run_dir.name}/step-1" and manifest.finished_at
    assert runs.effective_status(manifest) == "cancelled"
