"""train-smoke, train-run (checkpoints, cancel, resume) and the eval jobs on the real embedded model.

Marked slow: each job is a real child process that loads SmolLM2-135M (converted once into the user cache and
shared with the engine tests). Sizes are tiny: 6 rows, batches of 2-3, a handful of steps, 3 eval rows.
"""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from machine_lsp.core import runs

pytestmark = pytest.mark.slow

PAIRS = [(3, 4), (12, 30), (7, 8), (21, 5), (9, 9), (40, 2)]
EVAL_PAIRS = [(5, 6), (13, 2), (30, 30)]


@pytest.fixture(scope="module")
def smollm2() -> Path:
    from machine_lsp.engines import smollm2

    return smollm2.ensure_model()


@pytest.fixture(scope="module")
def proj(tmp_path_factory: pytest.TempPathFactory, smollm2: Path) -> Path:
    root = tmp_path_factory.mktemp("proj")
    (root / ".machine").mkdir()
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {a} plus {b}?"},
                {"role": "assistant", "content": f"answer: {a + b}"},
            ]
        }
        for a, b in PAIRS
    ]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [
        {
            "messages": [{"role": "user", "content": f"What is {a} plus {b}?"}],
            "expected": f"answer: {a + b}",
            "id": f"e{i}",
        }
        for i, (a, b) in enumerate(EVAL_PAIRS)
    ]
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    return root


def _env(job_env):  # noqa: ANN001, ANN202
    return job_env(MACHINE_TORCH_THREADS="1")


def _manifest(project: Path, run_id: str) -> dict:
    return json.loads((project / ".machine" / "runs" / run_id / "manifest.json").read_text())


def test_train_smoke_on_the_store_two_real_steps_then_a_sample(proj: Path, run_job, job_env) -> None:
    """No FILE: the store's good rows (rewrites applied) are snapshotted into the run dir with their checksum."""
    from machine_lsp.core.schema import Message, Source, TagRecord
    from machine_lsp.core.store import Store

    store = Store.open(proj)
    for i, (a, b) in enumerate(PAIRS[:3]):
        q = Message(role="user", content=f"What is {a} plus {b}?")
        store.append(
            TagRecord(
                id=f"r{i}",
                verdict="good" if i < 2 else "bad",
                messages=[q, Message(role="assistant", content=f"answer: {a + b}")],
                source=Source(kind="cli", uri="file:///chat.jsonl"),
                created_at="2026-11-30T00:00:00Z",
                tool_version="test",
                original=f"The sum is {a + b}." if i == 0 else None,
            )
        )
    code, events, err = run_job(proj, "train-smoke", {"batch_size": 3}, timeout=300, env=_env(job_env))
    assert code == 0, err[-3000:]
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2] and all(s["total"] == 2 for s in steps)
    assert all(s["loss"] > 0 and s["tokens"] > 0 and s["lr"] == 5e-4 for s in steps)
    done = events[-1]
    assert done["event"] == "done"
    assert done["result"]["losses"] == [s["loss"] for s in steps]
    assert isinstance(done["result"]["sample"]["output"], str) and done["result"]["sample"]["output"]
    run_dir = Path(events[0]["run_dir"])
    manifest = _manifest(proj, events[0]["run_id"])
    assert manifest["status"] == "done" and manifest["checkpoints"] == []
    data = manifest["data"][0]
    assert data["source"] == "store" and data["rows"] == 2  # the bad record is not trained on
    snapshot = Path(data["path"])
    assert snapshot.parent == run_dir / "data"
    assert runs.sha256_file(snapshot) == data["sha256"]
    lines = [json.loads(x) for x in snapshot.read_text().splitlines()]
    assert lines[0]["messages"][-1]["content"] == "answer: 7"  # the rewrite, not the original answer
    assert (run_dir / "loss.png").stat().st_size > 1000
    store.tagged_path.unlink()  # later tests train from train.jsonl


@pytest.fixture(scope="module")
def cancelled_then_resumed(proj: Path, job_env) -> dict:  # noqa: ANN001
    """A train-run cancelled after its first checkpoint, then resumed to the end."""
    args = {"data": "train.jsonl", "batch_size": 2, "steps": 40, "save_every": 2}
    proc = subprocess.Popen(
        [sys.executable, "-m", "machine_lsp.jobs", "train-run", "--args-json", json.dumps(args)],
        cwd=proj,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(job_env),
    )
    assert proc.stdout is not None
    events: list[dict] = []
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"train-run ended early: {events[-3:]}"
            events.append(json.loads(line))
            if events[-1]["event"] == "checkpoint":
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events += [json.loads(line) for line in rest.splitlines() if line.strip()]
    run_id = events[0]["run_id"]
    cancelled = _manifest(proj, run_id)

    resume_code, resumed_events, err = _run(
        proj, "train-run", {**args, "steps": 6, "resume": run_id}, job_env
    )
    assert resume_code == 0, err[-3000:]
    return {
        "code": proc.returncode,
        "events": events,
        "run_id": run_id,
        "manifest": cancelled,
        "resumed": resumed_events,
        "resumed_manifest": _manifest(proj, resumed_events[0]["run_id"]),
    }


def _run(project: Path, verb: str, args: dict, job_env) -> tuple[int, list[dict], str]:  # noqa: ANN001
    proc = subprocess.run(
        [sys.executable, "-m", "machine_lsp.jobs", verb, "--args-json", json.dumps(args)],
        cwd=project,
        capture_output=True,
        timeout=300,
        env=_env(job_env),
    )
    return (
        proc.returncode,
        [json.loads(x) for x in proc.stdout.splitlines() if x.strip()],
        proc.stderr.decode(),
    )


def test_sigterm_mid_run_leaves_a_consistent_cancelled_run(proj: Path, cancelled_then_resumed: dict) -> None:
    r = cancelled_then_resumed
    assert r["code"] == 130
    assert r["events"][-1]["event"] == "error" and r["events"][-1]["kind"] == "cancelled"
    m = r["manifest"]
    assert m["status"] == "cancelled" and m["finished_at"]
    assert m["checkpoints"], "the first checkpoint was recorded"
    last = m["checkpoints"][-1]
    assert m["last_checkpoint"] == last["address"] == f"local://{r['run_id']}/{last['name']}"
    ckpt_dir = proj / ".machine" / "runs" / r["run_id"] / "checkpoints" / last["name"]
    assert (ckpt_dir / "manifest.json").is_file()
    assert m["steps_done"] >= last["step"]
    metrics = (proj / ".machine" / "runs" / r["run_id"] / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == len([e for e in r["events"] if e["event"] == "step"])


def test_resume_continues_after_the_last_checkpoint(cancelled_then_resumed: dict) -> None:
    r = cancelled_then_resumed
    last_step = r["manifest"]["checkpoints"][-1]["step"]
    steps = [e["step"] for e in r["resumed"] if e["event"] == "step"]
    assert steps == list(range(last_step + 1, 7))
    m = r["resumed_manifest"]
    assert m["status"] == "done" and m["resumed_from"] == r["manifest"]["last_checkpoint"]
    assert m["checkpoints"][-1]["final"] and m["checkpoints"][-1]["name"] == "step-6"
    assert m["last_checkpoint"].endswith("/step-6")
    # 6 rows cannot be split into held-out and training rows: the gate says so and promotes nothing
    gate = m["gate"]
    assert gate["skipped"] and not gate["promoted"] and gate["metrics"] is None
    assert gate["reason"].startswith(
        "gate skipped: 6 rows are too few for a held-out split (the gate needs 12"
    )


def test_eval_jobs_baseline_checkpoint_probe(proj: Path, cancelled_then_resumed: dict, job_env) -> None:  # noqa: ANN001
    checkpoint = cancelled_then_resumed["resumed_manifest"]["last_checkpoint"]
    code, base_events, err = _run(proj, "eval-baseline", {"data": "eval.jsonl", "max_tokens": 12}, job_env)
    assert code == 0, err[-2000:]
    code, ck_events, err = _run(
        proj,
        "eval-checkpoint",
        {"data": "eval.jsonl", "checkpoint": checkpoint, "probe": True, "max_tokens": 12},
        job_env,
    )
    assert code == 0, err[-2000:]
    base = json.loads((proj / "eval_results" / "baseline.json").read_text())
    ck = json.loads((proj / "eval_results" / "step-6.json").read_text())
    for result, events in ((base, base_events), (ck, ck_events)):
        ev = next(e for e in events if e["event"] == "eval")
        assert (ev["n"], ev["correct"]) == (result["n"], result["correct"]) and result["n"] == len(EVAL_PAIRS)
        assert result["correct"] == sum(r["correct"] for r in result["rows"])
        assert all(r["correct"] == (r["output"].strip() == r["expected"]) for r in result["rows"])
        assert result["data_sha256"] == base["data_sha256"] and result["engine"] == "local"
    assert base["checkpoint"] is None and ck["checkpoint"] == checkpoint
    assert ck["probe"]["n"] >= 10 and len(ck["probe"]["rows"]) == ck["probe"]["n"]
    assert ck["probe"]["bled"] == sum(r["bleeds"] for r in ck["probe"]["rows"])

    # `latest` names the newest training run's last checkpoint: the resumed run's final one.
    code, probe_events, err = _run(proj, "eval-probe", {"checkpoint": "latest", "max_tokens": 12}, job_env)
    assert code == 0, err[-2000:]
    probe = json.loads((proj / "eval_results" / "probe-step-6.json").read_text())
    assert probe["kind"] == "probe" and probe["probe"]["n"] == ck["probe"]["n"]
    assert probe["checkpoint"] == checkpoint
    # greedy decoding of the same checkpoint: the standalone probe reproduces the checkpoint eval's probe
    assert [r["output"] for r in probe["probe"]["rows"]] == [r["output"] for r in ck["probe"]["rows"]]


def test_eval_job_errors_are_precise(proj: Path, run_job, job_env) -> None:  # noqa: ANN001
    code, events, _ = run_job(
        proj,
        "eval-checkpoint",
        {"data": "eval.jsonl", "checkpoint": "local://nope/step-1"},
        env=_env(job_env),
    )
    assert code == 1 and events[-1]["kind"] == "engine" and "no run 'nope'" in events[-1]["message"]
    code, events, _ = run_job(proj, "eval-baseline", {"data": "missing.jsonl"}, env=_env(job_env))
    assert code == 1 and events[-1]["message"].endswith("missing.jsonl: no such file")
    code, events, _ = run_job(proj, "eval-baseline", {}, env=_env(job_env))
    assert code == 1 and "no eval data" in events[-1]["message"]
    code, events, _ = run_job(proj, "train-run", {"data": "eval.jsonl"}, env=_env(job_env))
    assert code == 1 and "error(s) in the data" in events[-1]["message"]
    code, events, _ = run_job(proj, "train-run", {"batch_size": 0, "data": "train.jsonl"}, env=_env(job_env))
    assert code == 1 and "batch_size must be >= 1" in events[-1]["message"]
    code, events, _ = run_job(proj, "train-run", {}, env=_env(job_env))
    assert code == 1 and "has no good rows yet" in events[-1]["message"]


def test_latest_without_a_training_run_is_a_clear_error(project: Path, run_job) -> None:  # noqa: ANN001
    code, events, _ = run_job(project, "eval-checkpoint", {"data": "eval.jsonl", "checkpoint": "latest"})
    assert code == 1 and events[-1]["event"] == "error" and events[-1]["kind"] == "input"
    assert "no training run with a checkpoint" in events[-1]["message"]


def test_machine_toml_adam_settings_reach_the_torch_optimizer(proj: Path, job_env) -> None:  # noqa: ANN001
    """adam_* in machine.toml are the local AdamW's betas/eps (seen in the checkpoint's optimizer state), and a
    resumed run takes its own config's, not the ones saved with the optimizer state. (Last in the module: its runs
    become the project's latest.)"""
    import torch

    base = "[train]\ndata = 'train.jsonl'\nbatch_size = 3\n"
    (proj / "adam-a.toml").write_text(base + "adam_beta2 = 0.99\nadam_eps = 1e-06\n")
    (proj / "adam-b.toml").write_text(base + "adam_eps = 1e-07\n")

    def groups(run_id: str, name: str) -> list[dict]:
        path = proj / ".machine" / "runs" / run_id / "checkpoints" / name / "optimizer.pt"
        return torch.load(path, weights_only=True)["param_groups"]

    code, events, err = _run(proj, "train-run", {"config": "adam-a.toml", "steps": 1}, job_env)
    assert code == 0, err[-3000:]
    first = events[0]["run_id"]
    assert all(g["eps"] == 1e-6 and tuple(g["betas"]) == (0.9, 0.99) for g in groups(first, "step-1"))
    assert _manifest(proj, first)["config"]["adam_eps"] == 1e-6

    code, events, err = _run(
        proj, "train-run", {"config": "adam-b.toml", "steps": 2, "resume": first}, job_env
    )
    assert code == 0, err[-3000:]
    resumed = events[0]["run_id"]
    assert all(g["eps"] == 1e-7 and tuple(g["betas"]) == (0.9, 0.95) for g in groups(resumed, "step-2"))


# The runs directory on a real 4 MiB tmpfs, mounted in a private mount namespace (unshare), so nothing outside the
# test sees it; the run record is copied out before the namespace, and the tmpfs with it, goes away.
SMALL_DISK_RUN = (
    'mount -t tmpfs -o size=4m,mode=700 tmpfs "$1/.machine/runs" || exit 99; cd "$1"; '
    '"$2" -m machine_lsp.jobs train-run --args-json "$3" >"$4/events.jsonl"; rc=$?; '
    'cp -r "$1/.machine/runs/." "$4/runs/"; exit $rc'
)


def test_a_full_disk_refuses_the_checkpoint_in_one_line_and_keeps_the_run_record(
    tmp_path: Path, proj: Path, job_env
) -> None:  # noqa: ANN001
    """The step-2 checkpoint (~56 MiB) does not fit on a 4 MiB disk. Before, the save crashed mid-write (torch's
    `[enforce fail at inline_container.cc:672] . unexpected pos`, or safetensors' I/O error); now the job refuses
    before the first byte, says how much it needs and has, and its run record stays whole."""
    project, out = tmp_path / "proj", tmp_path / "out"
    (project / ".machine" / "runs").mkdir(parents=True)
    (project / "train.jsonl").write_bytes((proj / "train.jsonl").read_bytes())
    (out / "runs").mkdir(parents=True)
    args = json.dumps({"data": "train.jsonl", "batch_size": 2, "steps": 2, "save_every": 2})
    namespace = ["unshare", "--mount", "--map-root-user", "sh", "-c", SMALL_DISK_RUN, "sh"]
    proc = subprocess.run(
        [*namespace, project, sys.executable, args, out], capture_output=True, timeout=300, env=_env(job_env)
    )
    assert proc.returncode == 1, proc.stderr.decode()[-3000:]
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    error = events[-1]
    assert error["event"] == "error" and error["kind"] == "engine", error
    message = error["message"]
    head = "saving checkpoint step-2: no room on the disk for checkpoint local://"
    assert message.startswith(head), message
    assert "\n" not in message and "free; free some space" in message and "--resume" in message
    need, free = (float(x) for x in re.findall(r"([\d.]+) MiB", message))
    # a step checkpoint is ~56 MiB (the adapter and Adam's two moments), against the 4 MiB the disk has
    assert 55 < need < 65 and free <= 4.0, message
    [run_dir] = (out / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"] == message
    assert manifest["steps_done"] == 2 and manifest["checkpoints"] == []
    assert not (run_dir / "checkpoints").exists(), "nothing half-written is left behind"
    assert "Traceback" not in proc.stderr.decode()


def _file_size_limit() -> None:
    """In the job's process: files stop at 4 MiB (ulimit -f), and a write past it fails with EFBIG rather than
    SIGXFSZ killing the process."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, 4 << 20))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_a_write_refused_for_room_after_the_check_is_one_line_too(
    tmp_path: Path, proj: Path, job_env
) -> None:  # noqa: ANN001
    """The disk has room, so the check before the save passes, but a 4 MiB file-size limit refuses the ~19 MiB
    adapter mid-write (EFBIG, as a disk another process filled meanwhile refuses with ENOSPC). The half-written
    checkpoint is removed and the failure judged again: one line, the run record whole."""
    project = tmp_path / "proj"
    (project / ".machine").mkdir(parents=True)
    (project / "train.jsonl").write_bytes((proj / "train.jsonl").read_bytes())
    args = json.dumps({"data": "train.jsonl", "batch_size": 2, "steps": 2, "save_every": 2})
    proc = subprocess.run(
        [sys.executable, "-m", "machine_lsp.jobs", "train-run", "--args-json", args],
        cwd=project,
        capture_output=True,
        timeout=300,
        env=_env(job_env),
        preexec_fn=_file_size_limit,
    )
    assert proc.returncode == 1, proc.stderr.decode()[-3000:]
    error = json.loads(proc.stdout.splitlines()[-1])
    assert error["event"] == "error" and error["kind"] == "engine", error
    message = error["message"]
    assert message.startswith("saving checkpoint step-2: no room for checkpoint local://"), message
    assert "the write was refused (File too large) with " in message and "ulimit -f" in message, message
    assert "\n" not in message
    [run_dir] = (project / ".machine" / "runs").iterdir()
    assert message.endswith(f"--resume {run_dir.name}"), message
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"] == message and manifest["checkpoints"] == []
    left = (
        [p.name for p in (run_dir / "checkpoints").rglob("*")] if (run_dir / "checkpoints").exists() else []
    )
    assert left == [], f"the half-written checkpoint stays: {left}"
    assert "Traceback" not in proc.stderr.decode()
