"""The `validate` verb end to end in a real child process (python -m machine_lsp.jobs)."""

from __future__ import annotations

import json
from pathlib import Path

from machine_lsp.core.validate import validate_path


def _row(q: str, a: str) -> str:
    return json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})


def test_validate_job_streams_progress_then_done(project: Path, run_job, only_run_dir) -> None:
    data = project / "train.jsonl"
    rows = [_row(f"What is {i} + 1?", f"answer: {i + 1}") for i in range(50)]
    rows.insert(10, "{not json")
    data.write_text("\n".join(rows) + "\n")
    code, events, err = run_job(project, "validate", {"path": "train.jsonl"})
    assert code == 0, err
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and "progress" in kinds
    progress = [e for e in events if e["event"] == "progress"]
    assert progress[-1]["done"] == progress[-1]["total"] == 51
    result = events[-1]["result"]
    direct = validate_path(data)  # the job reports exactly what the core validator finds
    assert result["rows"] == direct.rows and result["ok"] is False
    assert result["errors"] == sum(f.severity == "error" for f in direct.findings) >= 1
    assert len(result["findings"]) == len(direct.findings)
    bad = [f for f in result["findings"] if f["severity"] == "error"]
    assert bad[0]["line"] == 11 and bad[0]["code"] == "json-invalid"
    assert events[-1]["result"]["rows"] == direct.rows
    assert not (project / ".machine" / "runs").exists()  # validation is not a run: no run directory


def test_validate_job_missing_file_is_a_precise_failure(project: Path, run_job, only_run_dir) -> None:
    code, events, _ = run_job(project, "validate", {"path": "nope.jsonl"})
    assert code == 1
    assert events[-1] == {"event": "error", "message": "nope.jsonl: no such file", "kind": "input"}
    assert not (project / ".machine" / "runs").exists()


def test_unknown_verb_and_bad_args(project: Path, run_job) -> None:
    code, events, _ = run_job(project, "frobnicate", {})
    assert code == 2 and events[0]["kind"] == "usage" and "frobnicate" in events[0]["message"]
    code, events, _ = run_job(project, "validate", {"pathz": "x"})
    assert code == 2 and events[0]["kind"] == "usage" and "path" in events[0]["message"]


def test_validate_job_with_eval_file_reports_leakage(project: Path, run_job) -> None:
    (project / "train.jsonl").write_text(_row("What is 1 + 1?", "answer: 2") + "\n")
    evals = {"messages": [{"role": "user", "content": "What is 1 + 1?"}], "expected": "answer: 2"}
    (project / "eval.jsonl").write_text(json.dumps(evals) + "\n")
    code, events, err = run_job(project, "validate", {"path": "train.jsonl", "eval_path": "eval.jsonl"})
    assert code == 0, err
    result = events[-1]["result"]
    assert result["eval"]["rows"] == 1
    codes = {f["code"] for f in result["findings"]} | {f["code"] for f in result["eval"]["findings"]}
    assert "train-eval-leak" in codes and result["ok"] is False
