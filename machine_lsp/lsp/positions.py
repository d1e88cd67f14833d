"""Code-point columns (the core's unit) <-> the client's position encoding (utf-16, utf-8 or utf-32)."""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from machine_lsp.core.lines import strip_line_end

strip_eol = strip_line_end


def to_client_character(codec: PositionCodec, line: str, codepoint_index: int) -> int:
    """0-based code-point index into `line` -> 0-based character in the client's encoding (clamped)."""
    text = strip_eol(line)
    index = max(0, min(codepoint_index, len(text)))
    if text.isascii() or codec.encoding == types.PositionEncodingKind.Utf32:
        return index
    return codec.client_num_units(text[:index])


def to_codepoint_index(codec: PositionCodec, line: str, character: int) -> int:
    """0-based client character -> 0-based code-point index into `line` (clamped)."""
    text = strip_eol(line)
    if text.isascii() or codec.encoding == types.PositionEncodingKind.Utf32:
        return max(0, min(character, len(text)))
    units = 0
    for index, char in enumerate(text):
        if units >= character:
            return index
        units += codec.impl.code_units_for_char(char)
    return len(text)


def core_range(
    codec: PositionCodec,
    lines: list[str],
    line: int,
    column: int,
    end_line: int,
    end_column: int,
) -> types.Range:
    """A range from the core's 1-based (line, code-point column) pairs; the end column is exclusive."""

    def pos(line1: int, column1: int) -> types.Position:
        line0 = max(0, line1 - 1)
        if line0 >= len(lines):
            return (
                types.Position(line=len(lines), character=0) if lines else types.Position(line=0, character=0)
            )
        return types.Position(line=line0, character=to_client_character(codec, lines[line0], column1 - 1))

    return types.Range(start=pos(line, column), end=pos(end_line, end_column))
