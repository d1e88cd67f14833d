"""train-run with objective sft+dpo on the store (a real SmolLM2 child job, 2 steps per stage): SFT on the good rows
(rewrites applied), then DPO on the pairs from the SFT stage's adapter, measured against the SFT stage's policy."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_job_preference import _store

from machine_lsp.core import runs

pytestmark = pytest.mark.slow


def test_sft_then_dpo_continues_the_adapter_against_the_sft_policy(
    tmp_path: Path, run_job, job_env, only_run_dir
) -> None:
    (tmp_path / ".machine").mkdir()
    _store(tmp_path)
    args = {"objective": "sft+dpo", "batch_size": 2, "steps": 2, "save_every": 0, "learning_rate": 1e-3}
    code, events, err = run_job(
        tmp_path, "train-run", args, timeout=400, env=job_env(MACHINE_TORCH_THREADS="1")
    )
    assert code == 0, err[-3000:]
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3, 4]
    losses = [e["loss"] for e in steps]
    assert all(math.isfinite(x) for x in losses)
    assert losses[0] > 1.0  # SFT's cross-entropy on answers the base does not give
    # The DPO stage's first policy is its reference: delta 0. Against the base (which the SFT stage moved away
    # from) the loss would not be log 2.
    assert losses[2] == pytest.approx(math.log(2), abs=1e-4) and losses[3] != losses[2]
    # the DPO stage at its own rate: unset dpo_learning_rate is a tenth of the SFT stage's
    assert [e["lr"] for e in steps] == pytest.approx([1e-3, 1e-3, 1e-4, 1e-4])
    manifest = runs.read_manifest(only_run_dir(tmp_path))
    assert manifest.status == "done" and manifest.config["objective"] == "sft+dpo"
    assert [(c.name, c.final) for c in manifest.checkpoints] == [("step-2", False), ("step-4", True)]
    assert [d.source for d in manifest.data] == ["store", "store"]
    objective = manifest.objective
    assert objective is not None and objective["name"] == "sft+dpo"
    sft, dpo = objective["stages"]
    assert sft["objective"] == "sft" and sft["steps"] == [1, 2] and sft["rows"] == 4
    assert dpo["objective"] == "dpo" and dpo["steps"] == [3, 4] and dpo["beta"] == 0.1
    assert (
        sft["learning_rate"] == 1e-3 and dpo["learning_rate"] == pytest.approx(1e-4) and dpo["rpo_alpha"] == 0
    )
    assert dpo["reference"] == sft["checkpoint"] == manifest.checkpoints[0].address
    assert dpo["counts"]["pairs"] == 4 and dpo["counts"]["from_rewrites"] == 3
    assert manifest.gate is not None and manifest.gate.get("skipped")


def test_sft_then_dpo_refuses_resume_and_a_missing_pairs_file(tmp_path: Path, run_job, job_env) -> None:
    (tmp_path / ".machine").mkdir()
    _store(tmp_path)
    code, events, _ = run_job(
        tmp_path, "train-run", {"objective": "sft+dpo", "pairs": "nope.jsonl"}, timeout=120
    )
    assert code != 0 and events[-1]["event"] == "error"
    assert "nope.jsonl: no such file" in events[-1]["message"]
    code, events, _ = run_job(tmp_path, "train-run", {"objective": "sft+dpo", "resume": "x"}, timeout=120)
    assert code != 0 and "cannot be resumed yet" in events[-1]["message"]
