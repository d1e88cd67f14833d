"""A tag record for the store tests (tests/core is on pytest's pythonpath)."""

from __future__ import annotations

from machine_lsp.core.schema import Message, Source, TagRecord


def make_record(
    record_id: str, verdict: str = "good", answer: str = "answer: 56", **extra: object
) -> TagRecord:
    return TagRecord(
        id=record_id,
        verdict=verdict,  # type: ignore[arg-type]
        messages=[Message(role="user", content="What is 7 * 8?"), Message(role="assistant", content=answer)],
        source=Source(kind="chat_jsonl", uri="file:///data/train.jsonl", line=1, end_line=1),
        created_at="2026-11-30T10:00:00.000Z",
        tool_version="0.1.0",
        **extra,  # type: ignore[arg-type]
    )
