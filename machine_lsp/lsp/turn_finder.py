"""The turn a `machine.tag` names: a line of a file (open or on disk), a selection, or `from` ("last",
"SESSION-ID[:TURN]" as `machine good --from` reads it, or FILE[:LINE] through core's `split_file_line`)."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from pygls.uris import to_fs_path

from machine_lsp.core import selection
from machine_lsp.core.lines import split_lines_keep_ends
from machine_lsp.lsp.arguments import line_number, optional_str, require_str
from machine_lsp.lsp.features import CommandError
from machine_lsp.lsp.positions import to_codepoint_index
from machine_lsp.lsp.turns import TurnCache

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase


class _Position(msgspec.Struct):
    line: int
    character: int


class _Range(msgspec.Struct):
    start: _Position
    end: _Position


class TurnFinder:
    def __init__(self, server: ServerBase, turns: TurnCache) -> None:
        self.server = server
        self.turns = turns

    async def find(self, args: dict[str, Any], trace: bool) -> tuple[Any, str]:
        """The turn `args` name and the URI it is read from."""
        source = optional_str(args, "from")
        if source is not None:  # a session's turn (or FILE[:LINE]); the store is still the project's
            return await self._turn_from(source, args.get("uri"), trace)
        uri = require_str(args, "uri")
        if "range" in args:
            return self._selection_turn(uri, self._lines(uri), args), uri
        return await self._line_turn(uri, line_number(args), trace), uri

    async def _turn_from(self, source: str, uri: str | None, trace: bool) -> tuple[Any, str]:
        from machine_lsp.core.sessions import resolve_from, split_file_line

        start = self.server.project_start(uri)
        turn = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(resolve_from, source, start, trace=trace)
        )
        if turn is not None:
            return turn, turn.source.uri
        path, line = split_file_line(source, start)  # relative: to the project, as the CLI's cwd
        file_uri = (start / path.expanduser()).absolute().as_uri()
        return await self._line_turn(file_uri, line_number({"line": line}), trace), file_uri

    def _lines(self, uri: str) -> list[str]:
        """The document's lines: the editor's buffer when open, else the file on disk (split the same way)."""
        doc = self.server.open_document(uri)
        if doc is not None:
            return doc.lines
        path = to_fs_path(uri)
        if not path or not os.path.isfile(path):
            raise CommandError(message=f"{uri}: no such file")
        try:
            return split_lines_keep_ends(Path(path).read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(message=f"{uri}: cannot read as UTF-8 text ({exc})") from None

    async def _line_turn(self, uri: str, line: int | None, trace: bool) -> Any:
        lines = self._lines(uri)
        if line is not None and not selection.is_session_log(lines):
            return selection.turn_at_line(lines, uri, line, trace=trace)  # a chat row: one line, parsed here
        # A whole file: in the turns worker process (cached per version for an open document).
        doc = self.server.open_document(uri)
        if doc is not None:
            return await self.turns.turn(doc, line, trace)
        return await self.turns.turn_of_lines(list(lines), uri, line, trace)

    def _selection_turn(self, uri: str, lines: list[str], args: dict[str, Any]) -> Any:
        try:
            rng = msgspec.convert(args["range"], _Range)
        except msgspec.ValidationError as exc:
            raise CommandError(message=f"range: {exc}") from None
        codec = self.server.workspace.position_codec

        def index(line0: int, character: int) -> int:
            return to_codepoint_index(codec, lines[line0], character) if 0 <= line0 < len(lines) else 0

        start = (rng.start.line, index(rng.start.line, rng.start.character))
        end = (rng.end.line, index(rng.end.line, rng.end.character))
        path = to_fs_path(uri) or uri
        return selection.selection_turn(lines, uri, path, start, end, optional_str(args, "prompt"))
