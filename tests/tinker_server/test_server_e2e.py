"""The Tinker engine end to end: `machine tinker serve`, then the usual verbs with `--engine tinker`, through the
real tinker SDK 0.38 and the compatibility layer, against SkyRL tx on the embedded SmolLM2.

One server for the module (started and stopped through the CLI). The first run builds SkyRL tx's venv under the
cache (minutes) and compiles each JAX shape once (1-3 min each on 2 cores; later runs reuse the persistent compile
cache). To keep the shapes few, every batch here has the same size and every row pads to the same length bucket.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from machine_lsp.core import runs
from machine_lsp.tinker_server import process

pytestmark = [pytest.mark.tinker_server, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BATCH = 4
PAIRS = [(3, 4), (12, 30), (7, 8), (21, 5), (9, 9), (40, 2), (6, 7), (15, 15)]
SERVE_TIMEOUT_S = 3600  # a first run installs the venv
JOB_TIMEOUT_S = 1800


def _row(a: int, b: int) -> dict:
    return {
        "messages": [
            {"role": "user", "content": f"What is {a} plus {b}?"},
            {"role": "assistant", "content": f"answer: {a + b}"},
        ]
    }


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MACHINE_TORCH_THREADS": "1", "COLUMNS": "200"}
    env["TINKER_TELEMETRY"] = "0"
    for name in ("MACHINE_HOME", "TINKER_API_KEY", "TINKER_BASE_URL"):
        env.pop(name, None)
    return env


def _cli(cwd: Path, *argv: str, timeout: float = JOB_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (
        f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    return done.stdout


def _manifests(project: Path, job: str) -> list[runs.RunManifest]:
    found = []
    for path in sorted((project / ".machine" / "runs").glob("*")):
        try:
            found.append(runs.read_manifest(path))
        except OSError:  # not a run directory, or one whose manifest is being written
            continue
    return sorted([m for m in found if m.job == job], key=lambda m: m.created_at)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, process.ServerRecord]:
    project = tmp_path_factory.mktemp("tinker-project")
    (project / ".machine").mkdir()
    (project / "train.jsonl").write_text("".join(json.dumps(_row(a, b)) + "\n" for a, b in PAIRS))
    evals = [
        {"messages": [{"role": "user", "content": f"What is {a} plus {b}?"}], "expected": f"answer: {a + b}"}
        for a, b in [(5, 6), (13, 2)]
    ]
    (project / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    (project / "machine.toml").write_text(
        f"[train]\nengine = 'tinker'\ndata = 'train.jsonl'\nbatch_size = {BATCH}\nrank = 8\n"
        "learning_rate = 0.0005\nmax_length = 64\n\n[eval]\ndata = 'eval.jsonl'\nmax_tokens = 8\n"
    )
    started = time.monotonic()
    done = _cli(
        project,
        "tinker",
        "serve",
        "--nice",
        "15",
        "--port",
        str(process.free_port()),
        timeout=SERVE_TIMEOUT_S,
    )
    record = process.read_record(project / ".machine")
    try:
        out = _ok(done)
        assert record is not None and record.ready
        print(f"\n[tinker serve] ready in {time.monotonic() - started:.0f} s: {record.base_url}")
        assert f"TINKER_BASE_URL={record.base_url}" in out
        yield project, record
    finally:
        _cli(project, "tinker", "stop", timeout=120)
        if record is not None:
            with pytest.raises(ProcessLookupError):
                os.killpg(record.pid, 0)


def test_serve_binds_loopback_and_records_the_url(served: tuple[Path, process.ServerRecord]) -> None:
    project, record = served
    assert record.host == "127.0.0.1"
    assert record.base_url.startswith("http://127.0.0.1:")
    from machine_lsp.tinker_server.project import configured_base_url

    assert configured_base_url(project) == record.base_url
    status = _ok(_cli(project, "tinker", "status", "--json", timeout=60))
    payload = json.loads(status)
    assert payload["server"]["pid"] == record.pid and payload["server"]["answering"] is True
    again = _cli(project, "tinker", "serve", timeout=120)
    assert again.returncode == 2 and "already running" in again.stderr


def test_smoke_trains_and_samples_through_the_sdk(served: tuple[Path, process.ServerRecord]) -> None:
    project, record = served
    _ok(_cli(project, "train", "smoke", "--yes"))
    manifest = _manifests(project, "train-smoke")[-1]
    assert manifest.status == "done", manifest.error
    assert manifest.engine == "tinker"
    losses = manifest.result["losses"]
    assert len(losses) == 2 and all(0.0 < x < 20.0 for x in losses)
    assert isinstance(manifest.result["sample"]["output"], str)


def test_run_checkpoints_resumes_and_evaluates(served: tuple[Path, process.ServerRecord]) -> None:
    project, _record = served
    _ok(_cli(project, "train", "run", "--yes", "--steps", "2", "--save-every", "1"))
    first = _manifests(project, "train-run")[-1]
    assert first.status == "done", first.error
    assert [c.step for c in first.checkpoints] == [1, 2]
    assert [c.final for c in first.checkpoints] == [False, True]
    for checkpoint in first.checkpoints:
        assert checkpoint.address.startswith("tinker://") and "/sampler_weights/" in checkpoint.address
        assert checkpoint.state is not None and "/weights/" in checkpoint.state

    _ok(_cli(project, "train", "run", "--yes", "--steps", "3", "--resume", first.id))
    resumed = _manifests(project, "train-run")[-1]
    assert resumed.id != first.id and resumed.status == "done", resumed.error
    assert resumed.resumed_from == first.checkpoints[-1].state
    assert resumed.result["steps_run"] == 1
    assert [c.step for c in resumed.checkpoints] == [3]

    address = resumed.checkpoints[-1].address
    out = _ok(_cli(project, "train", "eval", "checkpoint", address, "--yes"))
    evaluated = _manifests(project, "eval-checkpoint")[-1]
    assert evaluated.status == "done", evaluated.error
    assert evaluated.engine == "tinker"
    assert msgspec.json.encode(evaluated.result)  # a result was recorded
    assert "eval" in out.lower() or address in out


def _trained_checkpoint(project: Path) -> str:
    """The sampler address of this module's newest finished training run (one short run if there is none yet)."""
    done = [m for m in _manifests(project, "train-run") if m.status == "done" and m.checkpoints]
    if not done:
        _ok(_cli(project, "train", "run", "--yes", "--steps", "1"))
        done = [_manifests(project, "train-run")[-1]]
    return done[-1].checkpoints[-1].address


def test_compare_and_the_bleed_probe_of_a_tinker_checkpoint(
    served: tuple[Path, process.ServerRecord],
) -> None:
    """`eval baseline` (the served base model), `eval checkpoint` of a `tinker://` checkpoint, `eval compare` of
    the two result files, and `eval probe` (the style-bleed probe) of the checkpoint, all through the CLI."""
    from machine_lsp.core import evals

    project, _record = served
    address = _trained_checkpoint(project)
    _ok(_cli(project, "train", "eval", "baseline", "--yes"))
    results = project / "eval_results"
    base, ck = str(results / "baseline.json"), str(results / "tinker-ck.json")
    _ok(_cli(project, "train", "eval", "checkpoint", address, "--yes", "--out", ck))
    for job in ("eval-baseline", "eval-checkpoint"):
        manifest = _manifests(project, job)[-1]
        assert manifest.status == "done" and manifest.engine == "tinker", manifest.error
    baseline, trained = evals.load_result(Path(base)), evals.load_result(Path(ck))
    assert baseline.checkpoint is None and trained.checkpoint == address

    payload = json.loads(_ok(_cli(project, "train", "eval", "compare", base, ck, "--json", timeout=120)))
    name = address.rsplit("/", 1)[-1]
    assert (payload["a_name"], payload["b_name"], payload["n"]) == ("baseline", name, 2)
    assert (payload["a_correct"], payload["b_correct"]) == (baseline.correct, trained.correct)
    assert payload["same_data"] is True
    assert payload["gained"] - payload["lost"] == trained.correct - baseline.correct
    assert Path(payload["chart"]).is_file()
    table = _ok(_cli(project, "train", "eval", "compare", base, ck, "--no-chart", timeout=120))
    assert f"baseline → {name}" in table and "accuracy" in table

    out = _ok(_cli(project, "train", "eval", "probe", address, "--yes"))
    probe_run = _manifests(project, "eval-probe")[-1]
    assert probe_run.status == "done" and probe_run.engine == "tinker", probe_run.error
    report = json.loads((results / f"probe-{name}.json").read_text())
    assert report["checkpoint"] == address and report["engine"] == "tinker"
    rows = report["probe"]["rows"]
    assert len(rows) == len(evals.probe_prompts()) and all(isinstance(r["output"], str) for r in rows)
    assert report["probe"]["bled"] == sum(r["bleeds"] for r in rows)
    assert f"{report['probe']['bled']}/{len(rows)}" in out


def test_export_of_a_tinker_checkpoint_downloads_through_the_sdk_up_to_what_tx_lacks(
    served: tuple[Path, process.ServerRecord], tmp_path: Path
) -> None:
    """`machine export adapter tinker://…` downloads through SDK 0.38 (engines/tinker/tinker_download.py): the
    state's weights info, a new LoRA client with the state loaded, then `save_weights_external`, which SkyRL tx
    0.3.0 does not serve (no route: HTTP 404), so no `get_external_weights_urls` follows. One line says so and
    nothing is written."""
    project, _record = served
    address = _trained_checkpoint(project)
    state = address.replace("/sampler_weights/", "/weights/")
    out = tmp_path / "export"
    done = _cli(project, "export", "adapter", address, "--format", "peft", "--out", str(out))
    print(f"\n[export {address}]\n{done.stderr}")
    assert done.returncode == 1, done.stderr
    assert f"loading {state} (" in done.stderr and "LoRA rank 8)" in done.stderr  # weights info answered
    assert (
        "exporting it as external weights (save_weights_external)" in done.stderr
    )  # client + load_state did
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("machine export: Tinker save_weights_external failed with HTTP 404"), done.stderr
    assert not out.exists()


def test_the_scaffolded_train_sft_trains_on_the_served_model(
    served: tuple[Path, process.ServerRecord], tmp_path: Path
) -> None:
    """`machine train sft --engine tinker` in a project that `machine tinker serve` configured, then the scaffold's
    own `python train_sft.py` (the cookbook's train.main) for 2 steps: the served model, its renderer, the recorded
    URL and no API key, with the cookbook's checkpoints on the server."""
    from machine_lsp.tinker_server import project as served_project

    project, record = served
    sft = tmp_path / "sft-project"
    (sft / ".machine").mkdir(parents=True)
    (sft / "train.jsonl").write_text((project / "train.jsonl").read_text())
    served_project.set_base_url(sft, record.base_url)  # what `machine tinker serve` writes in a new project
    _ok(
        _cli(
            sft,
            "train",
            "sft",
            "train.jsonl",
            "--engine",
            "tinker",
            "--steps",
            "2",
            "--batch-size",
            str(BATCH),
            "--rank",
            "8",
            "--save-every",
            "0",
            "--force",
            timeout=120,
        )
    )
    assert served_project.configured_base_url(sft) == record.base_url  # --force kept the server's URL

    done = subprocess.run(
        [sys.executable, "train_sft.py"],
        cwd=sft,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )
    out = _ok(done)
    assert f"{record.model} (qwen3_instruct)" in out and "max_steps 2" in out
    logs = sft / "tinker_logs" / "train_sft"
    metrics = [json.loads(line) for line in (logs / "metrics.jsonl").read_text().splitlines()]
    losses = [m["train_mean_nll"] for m in metrics if "train_mean_nll" in m]
    assert len(losses) == 2 and all(0.0 < x < 20.0 for x in losses)
    checkpoints = [json.loads(line) for line in (logs / "checkpoints.jsonl").read_text().splitlines()]
    final = checkpoints[-1]
    assert final["state_path"].startswith("tinker://") and "/weights/" in final["state_path"]
    assert final["sampler_path"].startswith("tinker://")


def test_first_step_loss_matches_the_local_engine(
    served: tuple[Path, process.ServerRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same base weights, same rendering, same Datums: SkyRL tx's loss equals torch's within 1%."""
    from machine_lsp.core.schema import Message
    from machine_lsp.engines import render
    from machine_lsp.engines.base import LoraSettings
    from machine_lsp.engines.local.local import LocalEngine
    from machine_lsp.engines.tinker.tinker_engine import TinkerEngine

    _project, record = served
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    rows = [
        [
            Message(role="user", content=f"What is {a} plus {b}?"),
            Message(role="assistant", content=f"answer: {a + b}"),
        ]
        for a, b in PAIRS[:BATCH]
    ]
    remote = TinkerEngine(base_url=record.base_url)
    remote.preflight()
    model = remote.resolve_model(remote.default_model)
    assert model == record.model  # the served model, not the hosted default
    datums = [render.to_datum(r, remote.renderer(model), max_length=64) for r in rows]
    tinker_loss = remote.create_trainer(model, LoraSettings(rank=8), tmp_path).forward_backward(datums).loss

    store = tmp_path / ".machine"
    (store / "runs").mkdir(parents=True)
    local = LocalEngine(threads=1, store_root=store)
    local_loss = local.create_trainer(
        local.default_model, LoraSettings(rank=8), tmp_path / "local"
    ).forward_backward(datums)
    print(f"\n[first-step loss] SkyRL tx {tinker_loss:.6f}, local torch {local_loss.loss:.6f}")
    assert tinker_loss == pytest.approx(local_loss.loss, rel=0.01)


def test_a_server_that_dies_while_starting_is_reported(tmp_path: Path) -> None:
    """A model dir SkyRL tx cannot load: its engine exits, the API follows, `serve` says so and leaves no record."""
    project = tmp_path / "broken"
    (project / ".machine").mkdir(parents=True)
    model = tmp_path / "not-a-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    done = _cli(
        project,
        "tinker",
        "serve",
        "--nice",
        "15",
        "--model",
        str(model),
        "--port",
        str(process.free_port()),
        timeout=900,
    )
    assert done.returncode == 1, done.stderr
    assert "exited with code" in done.stderr and "last log lines" in done.stderr
    assert process.read_record(project / ".machine") is None
    assert not (project / "machine.toml").exists()


def _kill_the_server_after_the_first_checkpoint(
    project: Path, record: process.ServerRecord, steps: int
) -> tuple[runs.RunManifest, subprocess.CompletedProcess[str], float]:
    """Start `train run` (a checkpoint every step), SIGKILL the server's process group (the API server and its
    engine at once, as a crash would) once the run records its first checkpoint; (the run as it was then, the
    finished CLI, seconds from the kill to the job's end)."""
    before = {m.id for m in _manifests(project, "train-run")}
    argv = ["train", "run", "--yes", "--steps", str(steps), "--save-every", "1"]
    job = subprocess.Popen(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        run = None
        while run is None and time.monotonic() < deadline and job.poll() is None:
            fresh = [m for m in _manifests(project, "train-run") if m.id not in before]
            run = fresh[-1] if fresh and fresh[-1].checkpoints else None
            time.sleep(0.5)
        assert run is not None, f"no checkpoint recorded (exit {job.poll()})"
        os.killpg(record.pid, signal.SIGKILL)
        killed = time.monotonic()
        stdout, stderr = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    done = subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr)
    return run, done, time.monotonic() - killed


def test_a_server_that_dies_mid_run_fails_the_job_and_the_run_resumes_after_a_restart(
    served: tuple[Path, process.ServerRecord],
) -> None:
    """Kept last: it kills this module's server while a run is between checkpoints, restarts it with
    `machine tinker serve` over the stale record, and resumes the run. SkyRL tx's database and checkpoints live
    under .machine/tinker-server/, so the state survives the restart."""
    project, record = served
    steps = 4
    run, done, seconds = _kill_the_server_after_the_first_checkpoint(project, record, steps)
    print(f"\n[server death] the job ended {seconds:.1f} s after the kill")
    assert done.returncode == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert f"lost the Tinker server at {record.base_url}" in done.stderr, done.stderr
    failed = runs.read_manifest(project / ".machine" / "runs" / run.id)
    assert failed.status == "failed" and failed.error_kind == "engine", failed.error
    assert "\n" not in (failed.error or "") and record.base_url in (failed.error or "")
    assert failed.checkpoints and failed.last_checkpoint == failed.checkpoints[-1].address
    last = failed.checkpoints[-1]
    assert last.step < steps and last.state and "/weights/" in last.state

    # The record names a dead process: `serve` removes it and starts again, on the same port.
    started = time.monotonic()
    port = str(record.port)
    again = _cli(project, "tinker", "serve", "--nice", "15", "--port", port, timeout=SERVE_TIMEOUT_S)
    _ok(again)
    print(f"[server death] restarted in {time.monotonic() - started:.0f} s")
    assert "removed a stale server record" in again.stderr
    restarted = process.read_record(project / ".machine")
    assert restarted is not None and restarted.pid != record.pid and restarted.base_url == record.base_url

    _ok(
        _cli(project, "train", "run", "--yes", "--steps", str(steps), "--save-every", "0", "--resume", run.id)
    )
    resumed = _manifests(project, "train-run")[-1]
    assert resumed.status == "done", resumed.error
    assert resumed.resumed_from == last.state
    assert resumed.result["steps_run"] == steps - last.step
    assert [c.step for c in resumed.checkpoints] == [steps] and resumed.checkpoints[-1].final

    # A checkpoint saved before the crash can still be evaluated on the restarted server.
    out = str(project / "eval_results" / "pre-crash.json")
    _ok(_cli(project, "train", "eval", "checkpoint", last.address, "--yes", "--out", out))
    evaluated = _manifests(project, "eval-checkpoint")[-1]
    assert evaluated.status == "done" and evaluated.result["checkpoint"] == last.address, evaluated.error
