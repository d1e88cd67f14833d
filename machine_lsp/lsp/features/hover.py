"""Hover on an assistant entry of a session log: what the tagged row would contain."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from lsprotocol import types

from machine_lsp.core.selection import row_info
from machine_lsp.lsp.features import LanguageFeature
from machine_lsp.lsp.turn_worker import MAX_CHARS, MAX_MESSAGES, render_turn
from machine_lsp.lsp.turns import TurnCache

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase

__all__ = ["MAX_CHARS", "MAX_MESSAGES", "HoverFeature", "render_turn"]


def _tag_hint(uri: str, line: int) -> types.Hover:
    """For clients that do not prompt (no "with note…" action): the command that tags this row with a note."""
    args = json.dumps({"uri": uri, "line": line, "verdict": "good", "note": "…"}, ensure_ascii=False)
    value = (
        'machine: to tag this row with a note (or a rewrite: `"rewrite"`), run `machine.tag` with\n\n'
        f"```json\n{args}\n```"
    )
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value))


class HoverFeature(LanguageFeature):
    def __init__(self, server: ServerBase, turns: TurnCache) -> None:
        super().__init__(server)
        self.turns = turns

    def register(self) -> None:
        @self.server.feature(types.TEXT_DOCUMENT_HOVER)
        async def hover(params: types.HoverParams) -> types.Hover | None:
            return await self.hover(params.text_document.uri, params.position.line)

    async def hover(self, uri: str, line0: int) -> types.Hover | None:
        opened = self.server.open_line(uri, line0)
        info = row_info(opened[1]) if opened is not None else None
        if opened is None or info is None:
            return None
        doc = opened[0]
        if info["kind"] != "session_log":
            return None if self.server.settings.client_prompts else _tag_hint(uri, line0 + 1)
        # Built once per document version, in the turns worker process: the event loop keeps answering meanwhile.
        value = await self.turns.hover(doc, line0 + 1)
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value))
