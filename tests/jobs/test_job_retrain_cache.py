"""Two `retrain` runs on the embedded SmolLM2 (2 steps each): the second asks no unchanged model a prompt it has
answered before (the greedy-answer cache, jobs/greedy_cache.py), and the gate's bleed probe is also asked inside
the tagged rows' system prompt (the rows here were tagged in an agent's context), with both rates on record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.core import runs
from machine_lsp.core.schema import Message, Source, TagRecord
from machine_lsp.core.store import Store

SYSTEM = "You are Calc, a coding agent in a terminal. Be brief."


def _tag_in_context(project: Path, n: int) -> None:
    store = Store.open(project)
    for a in range(n):
        messages = [
            Message(role="system", content=SYSTEM),
            Message(role="user", content=f"What is {a + 10} plus {a + 3}?"),
            Message(role="assistant", content=f"answer: {2 * a + 13}"),
        ]
        source = Source(
            kind="session_log",
            uri=f"file:///logs/s{a % 4}.jsonl",
            line=a + 1,
            end_line=a + 1,
            session_id=f"s{a % 4}",
        )
        store.append(
            TagRecord(
                id=f"r{a}",
                verdict="good",
                messages=messages,
                source=source,
                created_at="2026-12-03T10:00:00.000Z",
                tool_version="0.1.0",
            )
        )


def _newest(project: Path) -> runs.RunManifest:
    manifest = runs.list_runs(project / ".machine" / "runs")[0][1]  # newest first
    assert manifest is not None and manifest.result is not None
    return manifest


@pytest.mark.slow
def test_a_second_retrain_reuses_answers_and_the_bleed_probe_asks_in_the_tagged_context(
    project: Path, run_job
) -> None:
    _tag_in_context(project, 12)
    rc, _events, stderr = run_job(project, "retrain", {"steps": 2, "save_every": 0}, timeout=1200)
    assert rc == 0, stderr
    first = _newest(project)
    result = first.result
    assert result is not None
    assert result["greedy_cache"]["hits"] == 0 and result["greedy_cache"]["sampled"] > 0  # a fresh project
    assert list((project / ".machine" / "cache" / "greedy").glob("*.json"))
    phases = result["timings"]
    assert {"model load", "anchors (base model answers)", "gate: bleed probe, candidate"} <= set(phases)
    metrics = first.gate["metrics"] if first.gate else {}
    assert metrics["contexts"] == 1 and metrics["context_probes"] == 12, metrics
    assert (
        metrics["reference_context_bleed_rate"] is not None
        and metrics["candidate_context_bleed_rate"] is not None
    )
    anchors = [json.loads(line) for line in Path(first.anchors["path"]).read_text().splitlines()]  # type: ignore[index]
    in_context = [row for row in anchors if row["messages"][0]["role"] == "system"]
    assert first.anchors["pool_in_context"] == len(in_context) >= 1  # type: ignore[index]
    assert all(row["messages"][0]["content"] == SYSTEM for row in in_context)

    rc, _events, stderr = run_job(project, "retrain", {"steps": 2, "save_every": 0}, timeout=1200)
    assert rc == 0, stderr
    second = _newest(project)
    assert second.id != first.id and second.result is not None and second.gate is not None
    assert second.result["greedy_cache"]["hits"] > 0
    assert second.anchors["sha256"] == first.anchors["sha256"]  # type: ignore[index]  # the same base answers
    again = second.gate["metrics"]
    # The reference of run 2 is run 1's checkpoint when the gate promoted it (its probe answers were given as
    # run 1's candidate), else the base (as in run 1): either way the same answers, so the same rates.
    side = "candidate" if first.gate["promoted"] else "reference"  # type: ignore[index]
    assert again["reference"] == (first.last_checkpoint if first.gate["promoted"] else "base")  # type: ignore[index]
    for rate in ("bleed_rate", "context_bleed_rate"):
        assert again[f"reference_{rate}"] == metrics[f"{side}_{rate}"], (rate, again, metrics)
