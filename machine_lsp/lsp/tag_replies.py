"""What `machine.tag`, `machine.tagged` and `machine.data` take and answer, apart from the server: the tag request
read from the argument object, the line the editor shows after a tag, the preview, the standing records' rows."""

from __future__ import annotations

from typing import Any

import msgspec
from lsprotocol import types

from machine_lsp.core.conflicts import claim_kind
from machine_lsp.lsp.arguments import optional_str
from machine_lsp.lsp.features import CommandError
from machine_lsp.lsp.replies import TaggedRecord, TagPreview

SHORT_CHARS = 200  # a tagged row's prompt and answer, as the editor's table shows them


class TagRequest(msgspec.Struct):
    verdict: str
    note: str
    rewrite: str | None
    trace: bool

    @classmethod
    def of(cls, args: dict[str, Any]) -> TagRequest:
        """The tag `args` ask for; `ask` (a code action that needs the user's note or rewrite) makes it required."""
        verdict = args.get("verdict", "good")
        if verdict not in ("good", "bad"):
            raise CommandError(message=f"verdict must be 'good' or 'bad', not {verdict!r}")
        request = cls(
            verdict=verdict,
            note=optional_str(args, "note") or "",
            rewrite=optional_str(args, "rewrite"),
            trace=bool(args.get("trace", False)),
        )
        ask = args.get("ask")
        if ask == "note" and not request.note:
            raise CommandError(message="this action needs a note: pass {'note': '...'} to machine.tag")
        if ask == "rewrite" and not request.rewrite:
            raise CommandError(
                message="this action needs the rewritten answer: pass {'rewrite': '...'} to machine.tag"
            )
        return request

    def options(self) -> dict[str, Any]:
        return {"note": self.note, "rewrite": self.rewrite, "trace": self.trace}


def tag_message(result: Any, store: Any, verdict: str, where: str) -> tuple[str, types.MessageType]:
    """The line the editor shows for a tag's `result` (core tagging.TagResult), and how loud."""
    if result.duplicate_of:
        message = f"Already tagged {verdict} ({where}, record {result.duplicate_of}); not added again"
        return message, types.MessageType.Warning
    counts = store.counts()
    message = f"Tagged {verdict}: {where} · store {counts.good} good / {counts.bad} bad"
    kind = types.MessageType.Info
    if result.overrides:
        message += f"; contradicts record {outvoted(result.overrides)} on the same turn: this tag wins (the last tag trains)"
        kind = types.MessageType.Warning
    for other, keeper in result.copies:
        message += (
            f"; record {other.id} tags the same exchange from another copy: the export trains it once, "
        )
        message += f"from record {keeper.id} (with the system prompt)"
    return message, kind


def outvoted(overrides: list[Any]) -> str:
    """The standing records a new tag contradicts (and wins over), as the editor's message names them."""
    return ", ".join(f"{r.id} ({claim_kind(r)})" for r in overrides)


def tag_preview(store: Any, turn: Any, request: TagRequest) -> TagPreview:
    """What `machine.tag` would store for `turn` (nothing is written): the record, and the duplicate it would be."""
    from machine_lsp.core import tagging
    from machine_lsp.core.schema import text_of
    from machine_lsp.core.transcripts.base import display_path
    from machine_lsp.core.turn_marks import last_prompt

    record = tagging.build_record(turn, request.verdict, **request.options())  # type: ignore[arg-type]
    duplicate = tagging.duplicate_of(store.records(), record)
    return TagPreview(
        preview=True,
        verdict=record.verdict,
        harness=turn.source.harness,
        session_id=turn.source.session_id,
        where=f"{display_path(turn.source.uri)}:{turn.end_line}",
        prompt=last_prompt(turn),
        answer=text_of(record.messages[-1]),
        duplicate_of=duplicate.id if duplicate is not None else None,
        record=record,
    )


def tagged_rows(records: list[Any], verdict: str | None, trained: dict[str, list[str]]) -> list[TaggedRecord]:
    """The standing records (what the store says now: edited-away records are history), as the editor lists them;
    `trained`: the runs that trained on each record (core.trained_in)."""
    from machine_lsp.core.schema import text_of

    rows = []
    for record in records:
        if verdict and record.verdict != verdict:
            continue
        answer = next((text_of(m) for m in reversed(record.messages) if m.role == "assistant"), "")
        prompt = next((text_of(m) for m in reversed(record.messages) if m.role == "user"), "")
        rows.append(
            TaggedRecord(
                id=record.id,
                verdict=record.verdict,
                note=record.note,
                source=record.source,
                answer=answer[:SHORT_CHARS],
                rewritten=record.original is not None,
                trace=record.trace,
                created_at=record.created_at,
                prompt=prompt[:SHORT_CHARS],
                trained_in=trained.get(record.id, []),
            )
        )
    return rows
