"""Shared fixtures for the engine tests: ONE converted SmolLM2 and ONE short training run per session.

The model is converted (once per machine) into the user cache, `$MACHINE_CACHE/models/SmolLM2-135M-Instruct`
(default ~/.cache/machine-lsp); CI should keep that directory between runs. Every fixture here uses the real model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# engine_helpers sits next to this file; make it importable under --import-mode=importlib too.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from engine_helpers import MODEL, TrainedRun, arithmetic_rows  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted HF directory (converting on first use: ~20-70 s)."""
    from machine_lsp.engines import smollm2

    return smollm2.ensure_model()


@pytest.fixture(scope="session")
def local_engine(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from machine_lsp.engines.local.local import LocalEngine

    store = tmp_path_factory.mktemp("store") / ".machine"
    (store / "runs").mkdir(parents=True)
    return LocalEngine(threads=1, store_root=store)


@pytest.fixture(scope="session")
def trained_run(local_engine: Any) -> TrainedRun:
    """8 steps (submit_step) of LoRA SFT on 4 arithmetic rows, then a checkpoint `step-8` and greedy outputs."""
    from machine_lsp.engines import render
    from machine_lsp.engines.base import LoraSettings

    store_root: Path = local_engine.store_root
    run_dir = store_root / "runs" / "test-run"
    trainer = local_engine.create_trainer(MODEL, LoraSettings(), run_dir)
    rows = arithmetic_rows()
    datums = render.to_datums(rows, trainer.renderer)
    losses = []
    for _ in range(8):
        pending = trainer.submit_step(datums, 5e-4)  # the job loop's call: forward_backward + optim_step
        assert pending.done()  # the local engine computes the step when it is submitted
        losses.append(pending.result().loss)
    address = trainer.save("step-8")
    prompts = [row[:1] for row in arithmetic_rows([(3, 4), (12, 30), (40, 2), (9, 9), (100, 23)])]
    outputs = trainer.sampler().sample(prompts, 16)
    return TrainedRun(local_engine, trainer, run_dir, store_root, losses, address, prompts, outputs)
