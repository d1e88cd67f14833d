"""The editor's confirmation states the run the job will train: the same sizing rule and text as the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from machine_lsp.lsp.plan import describe, plan_job
from machine_lsp.scaffold.estimate import estimate_job


def _rows(path: Path, n: int) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "answer: 4"},
        ]
    }
    path.write_text((json.dumps(row) + "\n") * n)


def test_the_plan_is_sized_by_the_rule_and_warns_under_the_floor(tmp_path: Path) -> None:
    (tmp_path / ".machine").mkdir()
    _rows(tmp_path / "train.jsonl", 10)
    plan = plan_job("train-run", tmp_path, {"data": "train.jsonl"})
    estimate = estimate_job("train-run", tmp_path, {"data": "train.jsonl"})
    assert estimate is not None and estimate.size is not None
    assert (
        plan.steps == estimate.steps >= 6 and describe(plan) == f"{estimate.describe()}; model {plan.model}"
    )
    assert "10 rows x" in describe(plan) and "warning" not in describe(plan)
    short = plan_job("train-run", tmp_path, {"data": "train.jsonl", "epochs": 1})
    assert short.steps == 2 and "too short to move the model: 2 optimizer steps (the floor is 6)" in describe(
        short
    )
    smoke = plan_job("train-smoke", tmp_path, {"data": "train.jsonl"})
    assert smoke.steps == 2 and "warning" not in describe(smoke)  # a smoke run is a plumbing check
