"""The eval gate at the end of a real `train-run` on the embedded SmolLM2 (a few steps each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.core import promotions, runs
from machine_lsp.core.schema import Message
from machine_lsp.core.trained_in import row_key


def _messages(row: dict) -> list[Message]:
    return [Message(role=m["role"], content=m["content"]) for m in row["messages"]]


def _chat(user: str, answer: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _manifest(project: Path) -> runs.RunManifest:
    (run_dir,) = [p for p in (project / ".machine" / "runs").iterdir() if p.is_dir()]
    return runs.read_manifest(run_dir)


@pytest.mark.slow
def test_train_run_ends_with_the_gate_and_promotes(project: Path, run_job) -> None:
    _write(
        project / "train.jsonl",
        [_chat(f"What is {a} plus {a + 1}?", f"answer: {2 * a + 1}") for a in range(12)],
    )
    rc, events, stderr = _run_job(run_job, project, {"data": "train.jsonl", "steps": 2, "save_every": 0})
    assert rc == 0, stderr
    logs = [e["message"] for e in events if e.get("event") == "log"]
    assert any("too short to move the model" in m and "the floor is 6" in m for m in logs)  # 2 hand-set steps
    manifest = _manifest(project)
    gate = manifest.gate
    assert gate is not None and gate["promoted"] is True, gate
    metrics = gate["metrics"]
    assert metrics["reference"] == "base" and metrics["eval_rows"] == 6 and metrics["eval_source"]
    assert metrics["tool_probes"] == 10 and metrics["mcnemar_p"] is not None
    # measured: the base SmolLM2 calls no tool on the probes, so retention is recorded as not measurable
    assert metrics["reference_tool_calls"] == 0 and metrics["tool_retention"] is None
    roles = {d.role: d.rows for d in manifest.data}
    assert roles == {"train": 6, "eval": 6}  # the held-out rows were not trained on
    # ...and the run's row keys (the tagged-rows view's "trained in") name only the 6 it trained on
    (train,) = [d for d in manifest.data if d.role == "train"]
    heldout = (
        (project / ".machine" / "runs" / manifest.id / "data" / "heldout.jsonl").read_text().splitlines()
    )
    held_keys = {row_key(_messages(json.loads(line))) for line in heldout}
    assert len(set(train.row_keys)) == 6 and not held_keys & set(train.row_keys)
    assert promotions.read_log(project / ".machine").current() == manifest.last_checkpoint


@pytest.mark.slow
def test_the_gate_refuses_a_checkpoint_that_got_worse(project: Path, run_job) -> None:
    # Held-out questions the base model answers (graded by `contains`); a huge learning rate on nonsense wrecks it.
    facts = [
        ("What is the capital of France?", "Paris"),
        ("What is the capital of Japan?", "Tokyo"),
        ("What is the capital of Italy?", "Rome"),
        ("What is the capital of Germany?", "Berlin"),
        ("What is the capital of Spain?", "Madrid"),
        ("What is the capital of England?", "London"),
        ("What color is the sky on a clear day?", "blue"),
        ("How many days are in a week?", "seven"),
    ]
    eval_rows = [
        {"messages": [{"role": "user", "content": q}], "expected": a, "match": "contains", "id": f"f{i}"}
        for i, (q, a) in enumerate(facts)
    ]
    _write(project / "eval.jsonl", eval_rows)
    _write(project / "train.jsonl", [_chat(f"zq{i} xv", "vk vk vk vk vk vk vk vk") for i in range(8)])
    (project / "machine.toml").write_text(
        "[train]\nlearning_rate = 0.05\nsteps = 4\nsave_every = 0\n[eval]\ndata = 'eval.jsonl'\nmax_tokens = 8\n"
    )
    rc, _events, stderr = _run_job(run_job, project, {"data": "train.jsonl"})
    assert rc == 0, stderr
    gate = _manifest(project).gate
    assert gate is not None and gate["promoted"] is False, gate
    metrics = gate["metrics"]
    assert metrics["reference_correct"] >= 6, metrics  # the base model knows these
    assert "significantly worse" in gate["reason"] and metrics["mcnemar_p"] < 0.05
    assert promotions.read_log(project / ".machine").current() is None  # nothing was promoted


def test_an_eval_set_sharing_a_training_row_is_refused_before_training(project: Path, run_job) -> None:
    rows = [_chat(f"What is {a} plus 1?", f"answer: {a + 1}") for a in range(4)]
    _write(project / "train.jsonl", rows)
    _write(
        project / "eval.jsonl", [{"messages": rows[2]["messages"][:1], "expected": "answer: 3", "id": "e1"}]
    )
    (project / "machine.toml").write_text("[eval]\ndata = 'eval.jsonl'\n")
    rc, events, _ = _run_job(run_job, project, {"data": "train.jsonl"})
    message = events[-1]["message"]
    assert rc == 1 and "\n" not in message
    assert message == (
        "eval.jsonl: eval row 'e1' is also a training row (train.jsonl:3); a held-out set must not share rows "
        "with training"
    )
    assert not any(e.get("event") == "step" for e in events)  # refused before anything trained


def _run_job(run_job, project: Path, args: dict) -> tuple[int, list[dict], str]:
    return run_job(project, "train-run", args, timeout=900)
