"""Editing a tag: `untag` and `retag` append a record that supersedes the one named (the store stays
append-only, so the turn's whole history is kept and `machine tagged --history` shows it).

A record is named by its id or a unique prefix of it. Only a standing record can be edited: one a later edit
replaced is history (edit its replacement), an untag record is no tag.
"""

from __future__ import annotations

import msgspec

from machine_lsp import __version__
from machine_lsp.core.conflicts import edits
from machine_lsp.core.schema import TagRecord, Verdict, encode
from machine_lsp.core.store import Store
from machine_lsp.core.tagging import (
    TagRefused,
    TagResult,
    apply_rewrite,
    new_record_id,
    now_iso,
    overridden_by,
)

MIN_ID_PREFIX = 4


def find_record(records: list[TagRecord], spec: str) -> TagRecord:
    """The standing record `spec` names (its id or a unique prefix). Raises TagRefused saying why not."""
    if len(spec) < MIN_ID_PREFIX:
        raise TagRefused(f"record {spec!r}: give at least {MIN_ID_PREFIX} characters of its id")
    matches = [record for record in records if record.id == spec] or [
        record for record in records if record.id.startswith(spec)
    ]
    if not matches:
        raise TagRefused(f"no record {spec} in the store (`machine tagged` lists them)")
    if len(matches) > 1:
        listed = ", ".join(record.id for record in matches)
        raise TagRefused(f"record {spec}: the prefix matches {len(matches)} records: {listed}; type more")
    record = matches[0]
    if record.untag:
        raise TagRefused(f"record {record.id} is an untag (of record {record.supersedes}), not a tag")
    later = edits(records).get(record.id)
    if later is not None:
        how = "untagged" if later.untag else "replaced"
        hint = "" if later.untag else f"; edit record {later.id}"
        raise TagRefused(
            f"record {record.id} was already {how} by record {later.id} ({later.created_at}){hint}"
        )
    return record


def untag(store: Store, spec: str, note: str = "") -> TagResult:
    """Withdraw the record `spec` names: an untag record that supersedes it (the turn then trains on whatever
    else stands for it, or not at all)."""

    def decide(records: list[TagRecord]) -> TagRecord:
        target = find_record(records, spec)
        return msgspec.structs.replace(
            target,
            id=new_record_id(),
            created_at=now_iso(),
            tool_version=__version__,
            note=note,
            supersedes=target.id,
            untag=True,
        )

    record = store.append_decided(decide)
    assert record is not None
    return TagResult(record=record)


def retag(
    store: Store,
    spec: str,
    *,
    note: str | None = None,
    rewrite: str | None = None,
    verdict: Verdict | None = None,
) -> TagResult:
    """Replace the record `spec` names with one that says what is given (the rest as it was): a new note, a new
    rewrite (`--as`, the model's original answer kept), or the other verdict (bad drops a rewrite: bad is said
    of the model's own answer)."""
    if note is None and rewrite is None and verdict is None:
        raise TagRefused("retag needs --note, --as or --verdict")

    def decide(records: list[TagRecord]) -> TagRecord:
        target = find_record(records, spec)
        record = edited(target, note=note, rewrite=rewrite, verdict=verdict)
        if encode([record.verdict, record.messages, record.note]) == encode(
            [target.verdict, target.messages, target.note]
        ):
            raise TagRefused(f"record {target.id} already says that; nothing added")
        return record

    record = store.append_decided(decide)
    assert record is not None
    return TagResult(record=record, overrides=overridden_by(store.records(), record))


def edited(target: TagRecord, *, note: str | None, rewrite: str | None, verdict: Verdict | None) -> TagRecord:
    """The record replacing `target` (not stored)."""
    verdict = verdict or target.verdict
    if verdict not in ("good", "bad"):
        raise TagRefused(f"verdict must be good or bad, not {verdict!r}")
    if rewrite is not None and verdict != "good":
        raise TagRefused("a rewrite (--as) is the answer you want, so it goes with good, not bad")
    if rewrite is not None and not rewrite.strip():
        raise TagRefused("the rewrite (--as) is empty")
    messages, original = list(target.messages), target.original
    if original is not None and (rewrite is not None or verdict == "bad"):
        # Back to the model's own answer first: a new rewrite replaces it again, bad is said of it.
        messages[-1] = msgspec.structs.replace(messages[-1], content=original)
        original = None
    if rewrite is not None:
        messages, original = apply_rewrite(messages, len(messages) - 1, rewrite)
    return msgspec.structs.replace(
        target,
        id=new_record_id(),
        verdict=verdict,
        messages=messages,
        original=original,
        note=target.note if note is None else note,
        created_at=now_iso(),
        tool_version=__version__,
        supersedes=target.id,
    )
