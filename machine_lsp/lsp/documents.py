"""A line-array text document so that an edit to one line of a 100k-row file costs O(edit), not O(file).

pygls's `TextDocument` keeps one string and re-splits it (with `str.splitlines`, which also breaks at U+2028 and
friends) on every change and every `lines` access. This subclass keeps the lines (with their endings, split by the
one rule in `machine_lsp.core.lines`) in a list, splices incremental changes into it, joins the source lazily and
records which lines each change touched (`take_edits`) so that diagnostics re-check only those lines. It overrides
public members only (`apply_change`, `lines`, `source`); the workspace that creates it lives in `compat.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types
from pygls.workspace import TextDocument

from machine_lsp.core.lines import has_line_end, split_lines_keep_ends


@dataclass(frozen=True, slots=True)
class LineEdit:
    """Lines [start, old_end) were replaced by `new_count` lines (0-based). start=-1 means 'everything'."""

    start: int
    old_end: int
    new_count: int


FULL_EDIT = LineEdit(-1, -1, -1)


def _lone_cr(line: str) -> bool:
    return line.endswith("\r")


class LineDocument(TextDocument):
    """TextDocument whose storage is a list of lines; `source` is joined on demand and cached."""

    def __init__(self, uri: str, source: str | None = None, *args, **kwargs) -> None:
        # pygls's own string stays None: every read goes through `lines` / `source` below.
        super().__init__(uri, None, *args, **kwargs)
        text = source or ""
        self._line_list: list[str] = split_lines_keep_ends(text)
        self._joined: str | None = text
        self._chars = len(text)
        self.edits: list[LineEdit] = []

    # -- storage --------------------------------------------------------------------------------------------
    @property
    def lines(self) -> list[str]:  # type: ignore[override]
        return self._line_list

    @property
    def source(self) -> str:  # type: ignore[override]
        if self._joined is None:
            self._joined = "".join(self._line_list)
        return self._joined

    @property
    def chars(self) -> int:
        """Length of the text in code points, kept up to date by every change."""
        return self._chars

    @property
    def byte_estimate(self) -> int:
        """Roughly what the text costs in memory (code points; the joined copy when one is held)."""
        return self._chars * (2 if self._joined is not None else 1)

    def take_edits(self) -> list[LineEdit]:
        edits, self.edits = self.edits, []
        return edits

    # -- changes --------------------------------------------------------------------------------------------
    def apply_change(self, change: types.TextDocumentContentChangeEvent) -> None:
        if isinstance(change, types.TextDocumentContentChangePartial):
            self._apply_range_change(change)
        else:
            self._line_list = split_lines_keep_ends(change.text)
            self._joined = change.text
            self._chars = len(change.text)
            self.edits.append(FULL_EDIT)

    def _apply_range_change(self, change: types.TextDocumentContentChangePartial) -> None:
        lines = self._line_list
        rng = self.position_codec.range_from_client_units(lines, change.range)
        start_line, start_col = rng.start.line, rng.start.character
        end_line, end_col = rng.end.line, rng.end.character
        if start_line >= len(lines):  # an edit at the very end of the file
            start_line = end_line = len(lines)
            start_col = end_col = 0
        end_line = min(end_line, len(lines) - 1) if lines else 0
        if end_line < start_line:
            end_line = start_line
        first = lines[start_line] if start_line < len(lines) else ""
        last = lines[end_line] if end_line < len(lines) else ""
        new_text = first[:start_col] + change.text + last[end_col:]
        old_end = min(end_line + 1, len(lines))
        # A lone "\r" ending the line above and a "\n" starting the new text are one "\r\n" line ending.
        if start_line > 0 and new_text.startswith("\n") and _lone_cr(lines[start_line - 1]):
            start_line -= 1
            new_text = lines[start_line] + new_text
        new_lines = split_lines_keep_ends(new_text)
        # A change that leaves a line without its ending joins it with the next one (e.g. deleting a newline);
        # one that leaves a lone "\r" before a line that is just "\n" makes them one "\r\n" ending.
        while new_lines and old_end < len(lines):
            tail = new_lines[-1]
            if not has_line_end(tail):
                new_lines[-1:] = split_lines_keep_ends(tail + lines[old_end])
            elif _lone_cr(tail) and lines[old_end].startswith("\n"):
                new_lines[-1:] = split_lines_keep_ends(tail + lines[old_end])
            else:
                break
            old_end += 1
        self._chars += sum(map(len, new_lines)) - sum(map(len, lines[start_line:old_end]))
        lines[start_line:old_end] = new_lines
        self._joined = None
        self.edits.append(LineEdit(start_line, old_end, len(new_lines)))
