"""Tagging: `machine.tag` (a line, a selection, or `from` a session's turn; `preview: true` stores nothing),
`machine.tagged` (the standing records) and `machine.data` (the store's counts). Quick and pure: in-process, as the
CLI's `machine good|bad|tagged|data`. Which turn a tag names is `lsp/turn_finder.py`; its messages and rows
`lsp/tag_replies.py`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import to_fs_path

from machine_lsp.core import selection
from machine_lsp.lsp.features import CommandError, CommandMethod, LanguageFeature
from machine_lsp.lsp.replies import DataReply, TaggedReply, TagPreview, TagReply
from machine_lsp.lsp.tag_replies import TagRequest, tag_message, tag_preview, tagged_rows
from machine_lsp.lsp.turn_finder import TurnFinder
from machine_lsp.lsp.turns import TurnCache

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase


class TaggingFeature(LanguageFeature):
    def __init__(self, server: ServerBase, turns: TurnCache) -> None:
        super().__init__(server)
        self.finder = TurnFinder(server, turns)

    def commands(self) -> dict[str, CommandMethod]:
        return {"machine.tag": self.tag, "machine.tagged": self.tagged, "machine.data": self.data}

    async def tag(self, args: dict[str, Any]) -> TagReply | TagPreview:
        from machine_lsp.core import tagging
        from machine_lsp.core.store import Store

        request = TagRequest.of(args)
        uri = args.get("uri") or ""
        with _refusals(uri):
            turn, uri = await self.finder.find(args, request.trace)
        with _refusals(uri):
            store = Store.open(self.server.project_start(args.get("uri")))
            if args.get("preview") is True:
                return tag_preview(store, turn, request)
            result = tagging.tag(store, turn, request.verdict, **request.options())  # type: ignore[arg-type]
        where = f"{Path(to_fs_path(uri) or uri).name}:{turn.end_line}"
        message, kind = tag_message(result, store, request.verdict, where)
        self.server.window_show_message(types.ShowMessageParams(type=kind, message=message))
        record = result.record
        return TagReply(
            id=record.id,
            verdict=record.verdict,
            duplicate_of=result.duplicate_of,
            message=message,
            store=str(store.tagged_path),
            overrides=[r.id for r in result.overrides],
        )

    async def tagged(self, args: dict[str, Any]) -> TaggedReply:
        from machine_lsp.core.store import Store

        store = Store.open(self.server.project_start(args.get("uri")))
        from machine_lsp.core.conflicts import standing
        from machine_lsp.core.trained_in import trained_in

        records = standing(store.records())
        rows = tagged_rows(records, args.get("verdict"), trained_in(store.runs_dir, records))
        return TaggedReply(store=str(store.tagged_path), records=rows, warnings=list(store.warnings))

    async def data(self, args: dict[str, Any]) -> DataReply:
        from machine_lsp.core.store import Store

        store = Store.open(self.server.project_start(args.get("uri")))
        return DataReply(store=str(store.tagged_path), counts=store.counts(), warnings=list(store.warnings))


@contextmanager
def _refusals(uri: str) -> Iterator[None]:
    """The core's refusals (no turn there, a tag it will not store, an unreadable store) as user errors."""
    from machine_lsp.core.store import StoreError
    from machine_lsp.core.tagging import TagRefused
    from machine_lsp.core.transcripts import TranscriptError

    try:
        yield
    except (TranscriptError, selection.SelectionError, TagRefused, StoreError) as exc:
        raise CommandError(message=str(exc)) from None
    except (UnicodeError, RecursionError) as exc:
        raise CommandError(message=f"{uri}: cannot read this line ({type(exc).__name__}: {exc})") from None
