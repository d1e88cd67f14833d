"""Turning a transcript turn into a tag record in the store."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec

from machine_lsp import __version__
from machine_lsp.core.conflicts import resolve
from machine_lsp.core.export import chat_order, exchange_copies
from machine_lsp.core.schema import Message, TagRecord, Verdict, encode, text_of
from machine_lsp.core.store import Store
from machine_lsp.core.transcripts.base import Turn


class TagRefused(Exception):
    """The turn cannot be tagged as asked (e.g. good on an aborted reply); str() says why."""


class TagResult(msgspec.Struct):
    record: TagRecord  # the new record, or the existing one when this is a duplicate
    duplicate_of: str | None = None  # id of the record already holding this conversation + verdict
    # Standing records on the same turn that this tag contradicts: they no longer train (the last tag wins).
    overrides: list[TagRecord] = msgspec.field(default_factory=list)
    # Good records holding the same exchange as this one in another copy (session log vs served log), with the
    # record the SFT export trains it from (export.exchange_copies): (the other record, the one that trains).
    copies: list[tuple[TagRecord, TagRecord]] = msgspec.field(default_factory=list)

    @property
    def duplicate(self) -> bool:
        return self.duplicate_of is not None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_record_id() -> str:
    return uuid.uuid4().hex[:16]


def apply_rewrite(messages: list[Message], answer_index: int, rewrite: str) -> tuple[list[Message], str]:
    """The conversation with the answer's text replaced by `rewrite` (its thinking goes too: it reasoned towards
    the old answer), and the original answer text."""
    answer = messages[answer_index]
    rewritten = msgspec.structs.replace(answer, content=rewrite)
    return [*messages[:answer_index], rewritten, *messages[answer_index + 1 :]], text_of(answer)


def build_record(
    turn: Turn,
    verdict: Verdict,
    note: str = "",
    rewrite: str | None = None,
    trace: bool = False,
) -> TagRecord:
    """The record a tag would store (no store involved). Raises TagRefused for tags that make no sense."""
    if verdict not in ("good", "bad"):
        raise TagRefused(f"verdict must be good or bad, not {verdict!r}")
    if rewrite is not None:
        if verdict != "good":
            raise TagRefused("a rewrite (--as) is the answer you want, so it goes with good, not bad")
        if not rewrite.strip():
            raise TagRefused("the rewrite (--as) is empty")
    if verdict == "good" and turn.tags_blocked:
        raise TagRefused(turn.tags_blocked)
    messages = turn.messages[: turn.answer_index + 1]
    answer = messages[-1]
    if rewrite is None and not text_of(answer).strip() and not answer.tool_calls:
        # An empty answer says nothing good or bad, and every export refuses it (KTO: kto-empty-completion).
        raise TagRefused(
            "the reply has no text: nothing to tag (a reply that only called tools: tag it with --trace, "
            "which keeps the calls)"
        )
    original = None
    if rewrite is not None:
        messages, original = apply_rewrite(messages, turn.answer_index, rewrite)
    # A trace row is stored as chat-format consumers take it: a call's results right after it (docs/CAPTURE.md).
    messages = chat_order(messages)
    return TagRecord(
        id=new_record_id(),
        verdict=verdict,
        messages=messages,
        source=turn.source,
        created_at=now_iso(),
        tool_version=__version__,
        note=note,
        original=original,
        trace=trace,
        extra=dict(turn.extra),
    )


def tag(
    store: Store,
    turn: Turn,
    verdict: Verdict,
    note: str = "",
    rewrite: str | None = None,
    trace: bool = False,
) -> TagResult:
    """Tag `turn` good or bad in `store`.

    Refuses good on a blocked turn (stopReason error/aborted, empty reply) with the reason. The same conversation
    with the same verdict is a duplicate (not appended) only while that record stands: once a later tag of the
    turn contradicts it or it was untagged, tagging it again is a new record, the turn's newest word. The same
    tag with a new note appends a record that supersedes the old one, so the note is kept. Decided under the
    append's lock, so concurrent taggers of one turn store it once.
    """
    record = build_record(turn, verdict, note=note, rewrite=rewrite, trace=trace)
    existing: list[TagRecord] = []

    def decide(records: list[TagRecord]) -> TagRecord | None:
        same = duplicate_of(records, record)
        if same is not None:
            existing.append(same)
            return None
        noted = _standing_same(records, record)
        if noted is not None:  # the same tag with a new note: the record with the note replaces it
            record.supersedes = noted.id
        return record

    appended = store.append_decided(decide)
    if appended is None:
        return TagResult(record=existing[0], duplicate_of=existing[0].id)
    records = store.records()
    return TagResult(
        record=appended, overrides=overridden_by(records, appended), copies=copies_of(records, appended)
    )


def copies_of(records: list[TagRecord], record: TagRecord) -> list[tuple[TagRecord, TagRecord]]:
    """The other good records of `record`'s exchange that the export dedupes with it, each with the one it keeps."""
    if record.verdict != "good":
        return []
    good = [kept for kept in resolve(records).kept if kept.verdict == "good"]
    copies = exchange_copies(good)
    keeper = copies.get(record.id, record)
    same = [other for other in good if other.id != record.id and copies.get(other.id, other).id == keeper.id]
    return [(other, keeper) for other in same]


def overridden_by(records: list[TagRecord], record: TagRecord) -> list[TagRecord]:
    """The records `record` (stored last) outvotes: standing claims on its turn that it contradicts."""
    resolution = resolve(records)
    return [
        dropped
        for conflict in resolution.conflicts
        for dropped in conflict.dropped
        if conflict.winners[dropped.id].id == record.id
    ]


def duplicate_of(records: list[TagRecord], record: TagRecord) -> TagRecord | None:
    """The standing record `record` would repeat (same conversation, verdict, and no new note), if any: tagging
    it again adds nothing."""
    same = _standing_same(records, record)
    return same if same is not None and (not record.note or record.note == same.note) else None


def _standing_same(records: list[TagRecord], record: TagRecord) -> TagRecord | None:
    key = encode(record.messages)
    for kept in reversed(resolve(records).kept):
        if kept.verdict == record.verdict and encode(kept.messages) == key:
            return kept
    return None
