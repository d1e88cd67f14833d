"""Hover on an assistant entry of a session log: what the tagged row would contain."""

from __future__ import annotations

from lsprotocol import types

from machine_lsp.core.schema import Message, text_of
from machine_lsp.core.selection import row_info
from machine_lsp.core.transcripts import TranscriptError, turn_at
from machine_lsp.lsp.features import LanguageFeature

MAX_CHARS = 600


def render_turn(turn) -> str:
    out = [f"**machine: tagging this {'entry' if turn.source.kind == 'session_log' else 'row'} stores**", ""]
    for message in turn.messages:
        out.append(f"- **{message.role}**: {_preview(message)}")
    if turn.tags_blocked:
        out += ["", f"⚠ cannot be tagged good: {turn.tags_blocked}"]
    for warning in getattr(turn, "warnings", []) or []:
        out.append(f"⚠ {warning}")
    src = turn.source
    meta = [
        f"{k}: {v}"
        for k, v in (("model", src.model), ("provider", src.provider), ("entry", src.entry_id))
        if v
    ]
    if meta:
        out += ["", " · ".join(meta)]
    return "\n".join(out)


def _preview(message: Message) -> str:
    text = text_of(message)
    if message.tool_calls:
        calls = ", ".join(f"`{c.function.name}`" for c in message.tool_calls)
        text = (text + " " if text else "") + f"[tool calls: {calls}]"
    text = " ".join(text.split())
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "…"


class HoverFeature(LanguageFeature):
    def register(self) -> None:
        @self.server.feature(types.TEXT_DOCUMENT_HOVER)
        async def hover(params: types.HoverParams) -> types.Hover | None:
            return await self.hover(params.text_document.uri, params.position.line)

    async def hover(self, uri: str, line0: int) -> types.Hover | None:
        doc = self.server.open_document(uri)
        if doc is None:
            return None
        lines = doc.lines
        if not 0 <= line0 < len(lines):
            return None
        info = row_info(lines[line0])
        if info is None or info["kind"] != "session_log":
            return None
        try:
            # Built once per document version, in a worker thread: the event loop keeps answering meanwhile.
            turn = turn_at(await self.server.turns.get(doc), line0 + 1)
        except TranscriptError as exc:
            value = f"machine: cannot tag this entry: {exc.message}"
        except (UnicodeError, RecursionError) as exc:
            value = f"machine: cannot tag this entry: {type(exc).__name__}: {exc}"
        else:
            value = render_turn(turn)
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value))
