"""The token estimate shown before paid or long runs, against hand-computed values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.core.run_plan import MIN_STEPS, MIN_TRAINED_TOKENS
from machine_lsp.scaffold.estimate import estimate_job


def _row(user: str, assistant: str | None = None, **extra: object) -> str:
    messages = [{"role": "user", "content": user}]
    if assistant is not None:
        messages.append({"role": "assistant", "content": assistant})
    return json.dumps({"messages": messages, **extra})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    # 40 characters -> 10 tokens + 4 for the template; 8 characters -> 2 + 4: 20 tokens a training row.
    rows = [_row("abcd" * 10, "xy" * 4) for _ in range(3)]
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n\n{broken\n")
    evals = [_row("abcd" * 10, expected="answer: 1") for _ in range(2)]
    (tmp_path / "eval.jsonl").write_text("\n".join(evals) + "\n")
    (tmp_path / ".machine").mkdir()
    return tmp_path


def test_training_estimate_counts_rows_steps_and_tokens(project: Path) -> None:
    run = estimate_job("train-run", project, {"data": "train.jsonl", "engine": "tinker", "epochs": 1})
    assert run is not None
    # batch 8, 1 epoch: one step over 3 rows (the broken line is the job's to report), under the floor
    assert (run.rows, run.steps, run.tokens, run.engine) == (3, 1, 60, "tinker")
    assert run.describe().startswith(
        "train-run on tinker: train.jsonl: 3 rows x 1 epoch = 1 step of batch 3 (as configured), ~18 trained of ~60 tokens"
    )
    assert run.warning and "too short to move the model" in run.warning and run.warning in run.describe()
    auto = estimate_job("train-run", project, {"data": "train.jsonl"})
    # epochs unset: the rows size the run (core.run_plan): 18 trained tokens an epoch -> the token floor rules
    assert auto is not None and auto.size is not None and auto.size.auto
    assert (
        auto.steps == auto.size.epochs
        and auto.size.trained_tokens >= MIN_TRAINED_TOKENS
        and auto.warning is None
    )
    run = estimate_job("train-run", project, {"data": "train.jsonl", "epochs": 3})
    assert run is not None and (run.steps, run.tokens) == (3, 180)
    smoke = estimate_job("train-smoke", project, {"data": "train.jsonl", "batch_size": 2})
    # 2 batches of the 3 rows, 2 smoke steps: a whole pass
    assert smoke is not None and (smoke.steps, smoke.tokens) == (2, 60)


def test_eval_estimate_adds_generated_tokens_and_the_probe(project: Path) -> None:
    run = estimate_job("eval-baseline", project, {"data": "eval.jsonl"})
    # 2 prompts of 14 tokens, plus 32 new tokens each (the default max_tokens)
    assert run is not None and (run.rows, run.tokens) == (2, 28 + 64)
    run = estimate_job("eval-checkpoint", project, {"data": "eval.jsonl", "probe": True, "max_tokens": 8})
    assert run is not None and run.tokens == 28 + 16 + 12 * 9


def test_store_rows_are_the_default_training_data(project: Path) -> None:
    run = estimate_job("train-run", project, {})
    assert run is not None and run.source == "the store's good rows" and run.rows == 0


def test_unreadable_data_or_config_gives_no_estimate(project: Path) -> None:
    assert estimate_job("train-run", project, {"data": "missing.jsonl"}) is None
    (project / "machine.toml").write_text("not toml [")
    assert estimate_job("train-run", project, {"data": "train.jsonl"}) is None


def test_a_dpo_estimate_counts_pairs_not_chat_rows(project: Path) -> None:
    """A preference run is sized by its pairs (two sequences each), read from the pairs file or the store."""
    pair = {
        "comparison": {
            "prompt_conversation": [{"role": "user", "content": "2+2?"}],
            "completion_A": [{"role": "assistant", "content": "answer: 4"}],
            "completion_B": [{"role": "assistant", "content": "four"}],
        },
        "label": "A",
    }
    line = json.dumps(pair)
    (project / "pairs.jsonl").write_text((line + "\n") * 3)
    run = estimate_job("train-run", project, {"data": "pairs.jsonl", "objective": "dpo", "batch_size": 2})
    assert run is not None
    assert (run.rows, run.source) == (3, "pairs.jsonl")
    assert (
        run.size is not None and run.size.auto and run.steps == run.size.steps >= MIN_STEPS
    )  # sized by pairs
    # a pass trains two sequences a pair: the prompt twice, both completions, and only the completions train
    compact = {k: json.dumps(v, separators=(",", ":")) for k, v in pair["comparison"].items()}
    per_pass = 3 * (
        2 * len(compact["prompt_conversation"]) + len(compact["completion_A"]) + len(compact["completion_B"])
    )
    trained = 3 * (len(compact["completion_A"]) + len(compact["completion_B"]))
    assert run.tokens == run.size.epochs * (per_pass // 4)
    assert run.size.trained_tokens == run.size.epochs * (trained // 4)
    store = estimate_job("train-run", project, {"objective": "kto"})  # an empty store: no examples yet
    assert store is not None and store.rows == 0 and store.source == "the store's KTO examples"
