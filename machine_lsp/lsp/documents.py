"""A line-array text document so that an edit to one line of a 100k-row file costs O(edit), not O(file).

pygls's `TextDocument` keeps one string and re-splits it on every change and every `lines` access. This subclass
keeps the lines (with their endings) in a list, splices incremental changes into it, joins the source lazily and
records which lines each change touched (`take_edits`) so that diagnostics re-check only those lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types
from pygls.workspace import TextDocument, Workspace


@dataclass(frozen=True, slots=True)
class LineEdit:
    """Lines [start, old_end) were replaced by `new_count` lines (0-based). start=-1 means 'everything'."""

    start: int
    old_end: int
    new_count: int


FULL_EDIT = LineEdit(-1, -1, -1)


def split_lines(text: str) -> list[str]:
    return text.splitlines(True)


class LineDocument(TextDocument):
    """TextDocument whose storage is a list of lines; `source` is joined on demand and cached."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._line_list: list[str] | None = split_lines(self._source) if self._source is not None else None
        self._joined: str | None = self._source
        self.edits: list[LineEdit] = []
        self._chars: int | None = len(self._source) if self._source is not None else None

    # -- storage --------------------------------------------------------------------------------------------
    @property
    def lines(self) -> list[str]:  # type: ignore[override]
        if self._line_list is None:
            self._line_list = split_lines(super().source)
        return self._line_list

    @property
    def source(self) -> str:  # type: ignore[override]
        if self._joined is None:
            if self._line_list is None:
                return super().source
            self._joined = "".join(self._line_list)
        return self._joined

    @property
    def chars(self) -> int:
        """Length of the text in code points, kept up to date by every change."""
        if self._chars is None:
            self._chars = sum(map(len, self.lines))
        return self._chars

    def take_edits(self) -> list[LineEdit]:
        edits, self.edits = self.edits, []
        return edits

    # -- changes --------------------------------------------------------------------------------------------
    def _apply_full_change(self, change: types.TextDocumentContentChangeEvent) -> None:
        self._line_list = split_lines(change.text)
        self._joined = change.text
        self._chars = len(change.text)
        self._source = None
        self.edits.append(FULL_EDIT)

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        lines = self.lines
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
        new_lines = split_lines(new_text)
        old_end = min(end_line + 1, len(lines))
        # A change that leaves a line without its ending joins it with the next one (e.g. deleting a newline).
        if new_lines and not new_lines[-1].endswith(("\n", "\r")) and old_end < len(lines):
            new_lines[-1] += lines[old_end]
            old_end += 1
        if self._chars is not None:
            self._chars += sum(map(len, new_lines)) - sum(map(len, lines[start_line:old_end]))
        lines[start_line:old_end] = new_lines
        self._joined = None
        self._source = None
        self.edits.append(LineEdit(start_line, old_end, len(new_lines)))


def install_line_documents(workspace: Workspace) -> None:
    """Make `workspace` create LineDocuments (pygls has no public hook for the document class)."""

    def create(doc_uri: str, source=None, version=None, language_id=None) -> TextDocument:
        return LineDocument(
            doc_uri,
            source=source,
            version=version,
            language_id=language_id,
            sync_kind=workspace._sync_kind,
            position_codec=workspace.position_codec,
        )

    workspace._create_text_document = create  # type: ignore[method-assign]
