"""The training loop on the Tinker engine, against the real SkyRL tx server through the real tinker SDK 0.38:

* `machine train run --engine tinker` keeps the next step in flight (the cookbook's pipelined loop): the server
  receives step n+1's requests before it hands back step n's first result; a checkpoint's two saves are submitted
  together, after step n and before step n+1; intermediate checkpoints carry a TTL, the final one is kept;
* the Adam settings of machine.toml are what the SDK sends;
* the manifest names the model the server trained (its own), not the hosted default;
* a loopback server costs nothing: no `--yes` needed.
* DPO, a client-side custom loss, trains there as on the local engine (the compat layer's backward rewrite).

One server for the module (its own, started through `machine_lsp.tinker_server.process`); see test_server_e2e.py
for the costs (venv on first use, one JAX compile per shape, a persistent compile cache).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from machine_lsp.core import runs
from machine_lsp.tinker_server import process

pytestmark = [pytest.mark.tinker_server, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BATCH = 4
PAIRS = [(3, 4), (12, 30), (7, 8), (21, 5), (9, 9), (40, 2), (6, 7), (15, 15)]
JOB_TIMEOUT_S = 1800
ACCESS = re.compile(r'uvicorn\.access: \S+ - "(?:POST|GET) /api/v1/([a-z_]+)')
TRAINING_REQUESTS = {"forward_backward", "optim_step", "save_weights", "save_weights_for_sampler"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, process.ServerRecord]]:
    project = tmp_path_factory.mktemp("tinker-loop")
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {a} plus {b}?"},
                {"role": "assistant", "content": f"answer: {a + b}"},
            ]
        }
        for a, b in PAIRS
    ]
    (project / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    machine_dir = project / ".machine"
    machine_dir.mkdir()
    record = process.start(machine_dir, port=process.free_port(), nice=15, progress=lambda m: print(m))
    try:
        (project / "machine.toml").write_text(
            f"[train]\nengine = 'tinker'\ndata = 'train.jsonl'\nbatch_size = {BATCH}\nrank = 8\n"
            "learning_rate = 0.0005\nmax_length = 64\nadam_beta2 = 0.99\nadam_eps = 1e-06\n\n"
            f"[tinker]\nbase_url = '{record.base_url}'\n"
        )
        yield project, record
    finally:
        process.stop(machine_dir)


def _cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TINKER_TELEMETRY": "0", "COLUMNS": "200"}
    for name in ("MACHINE_HOME", "TINKER_API_KEY", "TINKER_BASE_URL"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def _requests(log: Path, offset: int) -> list[str]:
    """The API routes the server answered, in the order it answered them (its uvicorn access log; Rich wraps
    long lines, so the text is re-joined first). A long-polled `retrieve_future` is logged when its result is in."""
    text = " ".join(log.read_bytes()[offset:].decode(errors="replace").split())
    return ACCESS.findall(text)


def test_the_run_keeps_the_next_step_in_flight(server: tuple[Path, process.ServerRecord]) -> None:
    project, record = server
    log = Path(record.log)
    offset = log.stat().st_size
    done = _cli(
        project, "train", "run", "--steps", "3", "--save-every", "2"
    )  # no --yes: a local server is free
    assert done.returncode == 0, f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert "costs money" not in done.stderr

    routes = [r for r in _requests(log, offset) if r in TRAINING_REQUESTS or r == "retrieve_future"]
    routes = routes[routes.index("forward_backward") :]  # the training client's creation was awaited before
    first_result = routes.index("retrieve_future")
    # Step 2 was submitted before step 1's first result came back: two steps, four requests, in flight.
    assert routes[:first_result] == ["forward_backward", "optim_step"] * 2, routes
    submitted = [r for r in routes if r != "retrieve_future"]
    assert submitted == ["forward_backward", "optim_step"] * 2 + [
        "save_weights",
        "save_weights_for_sampler",
        "forward_backward",
        "optim_step",
        "save_weights",
        "save_weights_for_sampler",
    ], routes
    # Each checkpoint's state and sampler weights were submitted together, neither waiting for the other.
    for i, route in enumerate(routes):
        if route == "save_weights":
            assert routes[i + 1] == "save_weights_for_sampler", routes

    runs_dir = project / ".machine" / "runs"
    manifest = max(
        (runs.read_manifest(p) for p in runs_dir.iterdir() if p.is_dir()), key=lambda m: m.created_at
    )
    assert manifest.status == "done" and manifest.job == "train-run", manifest.error
    assert (
        manifest.model == manifest.result["model"] == record.model
    )  # the served model, not the hosted default
    assert [c.step for c in manifest.checkpoints] == [2, 3]
    intermediate, final = manifest.checkpoints
    assert intermediate.ttl_seconds == 604800 and intermediate.expires_at and not intermediate.final
    assert final.final and final.ttl_seconds is None and final.expires_at is None
    metrics = [json.loads(x) for x in (runs_dir / manifest.id / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3] and all(m["loss"] > 0 for m in metrics)


class _Recorder:
    """Delegates to the real SDK TrainingClient, noting each call (and each wait on a returned future) in order."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[str] = []
        self.adam: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if name not in {"forward_backward", "optim_step", "save_state", "save_weights_for_sampler"}:
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name == "optim_step":
                self.adam.append(args[0])
            return _Waited(target(*args, **kwargs), name, self.calls)

        return call


class _Waited:
    def __init__(self, future: Any, name: str, calls: list[str]) -> None:
        self._future, self._name, self._calls = future, name, calls
        self._waited = False

    def future(self) -> Any:
        return self._future.future()

    def result(self, timeout: float | None = None) -> Any:
        # Noted once per future: the engine waits in slices (checking the server between them).
        if not self._waited:
            self._calls.append(f"wait {self._name}")
            self._waited = True
        return self._future.result(timeout=timeout)


def test_machine_toml_adam_settings_are_what_the_sdk_sends(
    server: tuple[Path, process.ServerRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from machine_lsp.core.schema import Message
    from machine_lsp.engines import render
    from machine_lsp.engines.tinker.tinker_engine import TinkerEngine
    from machine_lsp.scaffold.config import load_config
    from machine_lsp.scaffold.support import lora_settings

    project, record = server
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    cfg = load_config(project / "machine.toml").train
    engine = TinkerEngine(base_url=record.base_url)
    engine.preflight()
    model = engine.resolve_model(cfg.resolved_model())
    trainer = engine.create_trainer(model, lora_settings(cfg), tmp_path)
    trainer.client = recorder = _Recorder(trainer.client)
    rows = [
        [
            Message(role="user", content=f"What is {a} plus {b}?"),
            Message(role="assistant", content=f"answer: {a + b}"),
        ]
        for a, b in PAIRS[:BATCH]
    ]
    datums = [render.to_datum(r, trainer.renderer, max_length=64) for r in rows]
    first = trainer.submit_step(datums, 5e-4)
    second = trainer.submit_step(datums, 4e-4)
    assert recorder.calls == ["forward_backward", "optim_step"] * 2  # nothing awaited yet
    losses = [first.result().loss, second.result().loss]
    assert all(0.0 < x < 20.0 for x in losses)
    assert [(a.learning_rate, a.beta1, a.beta2, a.eps) for a in recorder.adam] == [
        (5e-4, 0.9, 0.99, 1e-6),
        (4e-4, 0.9, 0.99, 1e-6),
    ]
    trainer.save("ckpt", ttl_seconds=7200)
    assert recorder.calls[-4:] == [
        "save_state",
        "save_weights_for_sampler",
        "wait save_state",
        "wait save_weights_for_sampler",
    ]


def test_dpo_trains_on_tx_as_on_the_local_engine(server: tuple[Path, process.ServerRecord]) -> None:
    """DPO on Tinker is the cookbook's path: the reference's compute_logprobs, then forward_backward_custom (a
    forward, our loss on the client, a backward carrying its gradient). tx serves all three through the compat layer
    (the backward rewritten so tx sums it as Tinker does): the step-1 loss equals the local engine's on the same
    batch, and one step lowers it as there. Before the rewrite tx's step 2 stayed at 4.503 where local reached
    3.068, and the chosen answers' NLL rose. In this module, not test_server_e2e.py: tx's engine grows with each
    new shape, and DPO's (sampled prompt log-probs, longer pairs) on top of that module's ran it out of the
    machine's 24 GB (OOM-killed at 21 GB in the next test)."""
    project, _record = server
    pairs = [
        {
            "comparison": {
                "prompt_conversation": [{"role": "user", "content": f"What is {a} plus {b}?"}],
                "completion_A": [{"role": "assistant", "content": f"answer: {a + b}"}],
                "completion_B": [
                    {"role": "assistant", "content": f"Sure! {a} plus {b} is {a + b}. Anything else?"}
                ],
            },
            "label": "A",
        }
        for a, b in PAIRS[:BATCH]
    ]
    (project / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    argv = ["train", "run", "--data", "pairs.jsonl", "--objective", "dpo", "--rpo-alpha", "1", "--steps", "2"]
    argv += ["--epochs", "100", "--save-every", "0", "--yes"]
    losses = {}
    runs_dir = project / ".machine" / "runs"
    for engine in ("tinker", "local"):
        done = _cli(project, *argv, "--engine", engine)
        assert done.returncode == 0, f"{engine}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        run = max(
            (runs.read_manifest(p) for p in runs_dir.iterdir() if p.is_dir()), key=lambda m: m.created_at
        )
        assert run.status == "done" and run.result["engine"] == engine, run.error
        assert run.objective is not None and run.objective["name"] == "dpo", run.objective
        losses[engine] = run.result["losses"]
    print(f"\n[dpo losses] SkyRL tx {losses['tinker']}, local torch {losses['local']}")
    assert losses["tinker"][0] == pytest.approx(losses["local"][0], rel=1e-3)
    # the LoRA's random init differs between tx and torch, so step 2 is close, not equal
    assert losses["tinker"][1] < losses["tinker"][0] - 0.5 * (losses["local"][0] - losses["local"][1])
