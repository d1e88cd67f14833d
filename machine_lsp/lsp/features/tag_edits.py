"""`machine.untag {id, note?}` and `machine.retag {id, note?, rewrite?, verdict?}`: edit a tag as `machine untag` /
`machine retag` do (core/tag_edits.py: a record that supersedes the one named; the history is kept)."""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from machine_lsp.core.conflicts import claim_kind
from machine_lsp.core.store import Store, StoreError
from machine_lsp.core.tag_edits import retag, untag
from machine_lsp.core.tagging import TagRefused, TagResult
from machine_lsp.lsp.features import CommandError, CommandMethod, LanguageFeature
from machine_lsp.lsp.replies import TagEditReply
from machine_lsp.lsp.tag_replies import outvoted


class TagEditsFeature(LanguageFeature):
    def commands(self) -> dict[str, CommandMethod]:
        return {"machine.untag": self.untag, "machine.retag": self.retag}

    def _show(self, kind: types.MessageType, message: str) -> None:
        self.server.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def untag(self, args: dict[str, Any]) -> TagEditReply:
        store, record_id = self._store(args), _text(args, "id", required=True)
        result = _edit(lambda: untag(store, record_id, note=_text(args, "note") or ""))
        return self._reply(store, result, f"Untagged record {result.record.supersedes} (the history is kept)")

    def retag(self, args: dict[str, Any]) -> TagEditReply:
        store, record_id = self._store(args), _text(args, "id", required=True)
        verdict = args.get("verdict")
        if verdict is not None and verdict not in ("good", "bad"):
            raise CommandError(message=f"verdict must be 'good' or 'bad', not {verdict!r}")
        note, rewrite = _text(args, "note"), _text(args, "rewrite")
        if args.get("ask") == "rewrite" and not rewrite:  # "Add a rewrite…" from a client that did not ask
            raise CommandError(
                message="this action needs the better answer: pass {'rewrite': '...'} to machine.retag"
            )
        result = _edit(lambda: retag(store, record_id, note=note, rewrite=rewrite, verdict=verdict))
        record = result.record
        return self._reply(store, result, f"Retagged record {record.supersedes} as {claim_kind(record)}")

    def _store(self, args: dict[str, Any]) -> Store:
        return Store.open(self.server.project_start(args.get("uri")))

    def _reply(self, store: Store, result: TagResult, said: str) -> TagEditReply:
        record = result.record
        assert record.supersedes is not None
        message = f"{said} -> record {record.id}"
        kind = types.MessageType.Info
        if result.overrides:
            message += f"; it contradicts record {outvoted(result.overrides)} on the same turn and wins (the last tag trains)"
            kind = types.MessageType.Warning
        self._show(kind, message)
        return TagEditReply(
            id=record.id,
            supersedes=record.supersedes,
            untag=record.untag,
            verdict=record.verdict,
            note=record.note,
            overrides=[r.id for r in result.overrides],
            message=message,
            store=str(store.tagged_path),
        )


def _edit(action: Any) -> TagResult:
    try:
        return action()
    except (TagRefused, StoreError) as exc:
        raise CommandError(message=" ".join(str(exc).split())) from None


def _text(args: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise CommandError(message=f"'{key}' must be a string" + (" (a record id)" if key == "id" else ""))
    return value
