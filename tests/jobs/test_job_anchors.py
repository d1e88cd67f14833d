"""Scoped training and `retrain` on the embedded SmolLM2: anchors are added and recorded, the loop ends with its
summary and the gate's verdict. One real run (2 steps) carries the job assertions; the CLI's plan is checked
without training (it stops at the confirmation)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from anchor_project import AGENT_REQUEST, AGENT_SYSTEM, SHELL_TOOL, capture_agent_turn, tag_rows

from machine_lsp.core import runs


def cli_retrain(project: Path, job_env) -> subprocess.CompletedProcess[str]:
    """`machine retrain` with no machine.toml and no terminal: it prints the plan and asks for --yes."""
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", "retrain"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=job_env(COLUMNS="400"),
    )


def test_the_cli_prints_the_plan_with_its_anchors_before_asking(project: Path, job_env) -> None:
    tag_rows(project, 12)
    proc = cli_retrain(project, job_env)
    assert proc.returncode == 2, proc.stderr  # no machine.toml, no terminal: it asks for --yes
    assert "plan: retrain on local: the store's good rows: 18 rows (12 + 6 anchors)" in proc.stdout
    assert "pass --yes" in proc.stderr
    assert not (project / ".machine" / "runs").exists()  # nothing started


def test_the_plan_of_a_big_scoped_run_shows_its_grown_batch(project: Path, job_env) -> None:
    """80 tags + 28 anchors (the pool's size): a scoped run keeps to 6 steps, so the batch grows from 8 to 18; the
    plan and the defaults question both say the batch that will train."""
    tag_rows(project, 80)
    proc = cli_retrain(project, job_env)
    assert proc.returncode == 2, proc.stderr
    assert "108 rows (80 + 28 anchors) x 1 epoch = 6 steps of batch 18 (grown from 8" in proc.stdout
    assert "batch size 18," in proc.stderr


@pytest.mark.slow
def test_retrain_adds_anchors_gates_and_ends_with_the_summary(project: Path, run_job, only_run_dir) -> None:
    tag_rows(project, 12)
    capture_agent_turn(project)
    rc, events, stderr = run_job(project, "retrain", {"steps": 2, "save_every": 0}, timeout=900)
    assert rc == 0, stderr
    manifest = runs.read_manifest(only_run_dir(project))
    # 12 tagged rows: the gate holds 6 out; 6 trained -> ceil(0.5 * 6) = 3 anchors, the agent turn one of them
    anchors = manifest.anchors
    assert anchors is not None and anchors["scope"] == "auto" and anchors["ratio"] == 0.5
    assert anchors["tagged_rows"] == 6 and anchors["added"] == 3
    assert anchors["counts"] == {"pool": 2, "agent_turns": 1} and anchors["with_tools"] == 1
    assert {d.role: d.rows for d in manifest.data} == {"eval": 6, "train": 6, "anchors": 3}
    rows = [json.loads(line) for line in Path(anchors["path"]).read_text().splitlines()]
    (agent,) = [r for r in rows if r.get("tools")]
    assert agent["tools"] == [
        SHELL_TOOL
    ]  # the base model answered the request with the agent's tools declared
    assert [m["role"] for m in agent["messages"]] == ["system", "user", "assistant"]
    assert (
        agent["messages"][0]["content"] == AGENT_SYSTEM and agent["messages"][1]["content"] == AGENT_REQUEST
    )
    answer = agent["messages"][2]
    assert answer.get("tool_calls") or answer["content"].strip()
    assert (
        answer["content"] != "The build log mentions no errors."
    )  # the base model's answer, not the agent's
    for row in rows:
        assert row["messages"][-1]["role"] == "assistant"
    logs = [e["message"] for e in events if e.get("event") == "log"]
    assert any(m.startswith("plan: 9 rows (6 + 3 anchors)") for m in logs), logs
    # anchored: every trained token weighs the same (short tags must not outweigh the anchors), on the record
    assert manifest.objective == {"name": "sft", "loss_weighting": "token"}
    assert "loss: every trained token weighs the same ([train] loss_weighting)" in logs
    assert any(e.get("event") == "progress" and "anchors:" in e.get("message", "") for e in events)
    gate = manifest.gate
    assert gate is not None and gate["metrics"]["eval_rows"] == 6 and "skipped" in gate
    done = events[-1]
    assert done["event"] == "done"
    summary = done["message"]
    assert summary == done["result"]["summary"] and "\n" not in summary
    assert summary.startswith(
        "Retrained on 6 tagged rows plus 3 anchor rows (the base model's own answers: 2 built-in prompts, "
        "1 untagged agent turns): 2 steps"
    )
    assert "On 6 held-out rows" in summary and "exact McNemar p = " in summary and "bleed" in summary
    assert "tool" in summary
    assert ("Promoted" in summary) == gate["promoted"]
    assert (
        runs.latest_checkpoint(project / ".machine" / "runs") == manifest.last_checkpoint
    )  # `latest` names it
