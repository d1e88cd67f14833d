"""core.trained_in: which finished training runs held a tagged row (the tagged-rows view's "trained in" column).

Runs are real run directories (core.runs writes them); their rows are the store's export (core.export)."""

from __future__ import annotations

from pathlib import Path

from machine_lsp.core import runs
from machine_lsp.core.export import export_sft
from machine_lsp.core.schema import Message, Source, TagRecord, encode_training_row
from machine_lsp.core.trained_in import row_key, trained_in


def _record(record_id: str, prompt: str, answer: str, verdict: str = "good") -> TagRecord:
    return TagRecord(
        id=record_id,
        verdict=verdict,  # type: ignore[arg-type]
        messages=[Message(role="user", content=prompt), Message(role="assistant", content=answer)],
        source=Source(kind="chat_jsonl", uri="file:///p/chat.jsonl", line=1),
        created_at="2026-12-01T10:00:00Z",
        tool_version="test",
    )


def _run(
    runs_dir: Path, records: list[TagRecord], *, keys: bool, status: str = "done", job: str = "train-run"
):
    """A training run on `records`' SFT rows, its snapshot copied into the run dir (keys recorded or not)."""
    run_dir, manifest = runs.create_run_dir(runs_dir, job, cwd=runs_dir.parent, args={})
    rows = export_sft(records)
    payload = b"".join(encode_training_row(r) + b"\n" for r in rows)
    (run_dir / "data").mkdir()
    (run_dir / "data" / "train.jsonl").write_bytes(payload)
    snapshot = runs.DataSnapshot(
        role="train",
        source="store",
        path=str(run_dir / "data" / "train.jsonl"),
        sha256=runs.sha256_bytes(payload),
        rows=len(rows),
        row_keys=[row_key(r.messages) for r in rows] if keys else [],
    )
    manifest.data.append(snapshot)
    manifest.status = status  # type: ignore[assignment]
    runs.write_manifest(run_dir, manifest)
    return run_dir, manifest


def test_rows_name_the_finished_runs_that_held_them(tmp_path):
    runs_dir = tmp_path / ".machine" / "runs"
    a, b, bad = (
        _record("a", "31 * 2?", "answer: 62"),
        _record("b", "60 + 2?", "answer: 62"),
        _record("c", "q", "x", "bad"),
    )
    _, first = _run(runs_dir, [a], keys=True)
    _, second = _run(runs_dir, [a, b], keys=True, job="retrain")
    _run(runs_dir, [b], keys=True, status="failed")  # a failed run trained nothing that stayed
    _run(runs_dir, [b], keys=True, job="eval-baseline")  # not a training job
    _run(runs_dir, [b], keys=True, job="train-smoke")  # two steps, no checkpoint kept
    found = trained_in(runs_dir, [a, b, bad])
    assert found.keys() == {"a", "b"}  # a bad row never trains
    assert sorted(found["a"]) == sorted([first.id, second.id]) and found["b"] == [second.id]


def test_a_rewrite_matches_by_what_trained_and_old_runs_by_their_copy(tmp_path):
    runs_dir = tmp_path / ".machine" / "runs"
    old = _record("a", "31 * 2?", "answer: 62")
    _, before_keys = _run(runs_dir, [old], keys=False)  # a run from before row keys: its copy is read back
    assert trained_in(runs_dir, [old]) == {"a": [before_keys.id]}
    rewritten = _record("r", "31 * 2?", "62")  # the same prompt, another answer: another row
    assert trained_in(runs_dir, [rewritten]) == {}


def test_an_edited_copy_is_not_evidence(tmp_path):
    runs_dir = tmp_path / ".machine" / "runs"
    record = _record("a", "31 * 2?", "answer: 62")
    run_dir, _ = _run(runs_dir, [record], keys=False)
    copy = run_dir / "data" / "train.jsonl"
    copy.write_bytes(copy.read_bytes() + copy.read_bytes())  # no longer the file the checksum names
    assert trained_in(runs_dir, [record]) == {}
