"""The one line-splitting rule of machine-lsp: a line ends at "\\n", "\\r\\n" or a lone "\\r", nowhere else.

This is how the LSP specification, editors and the CLI's validator (`machine train validate`) count lines.
`str.splitlines` must never be used on user text: it also breaks at U+2028, U+2029, U+0085, \\x0b, \\x0c and
\\x1c-\\x1e, which are legal inside JSON strings, so one row would become two and every later line number would
be wrong (a tag would store the wrong conversation). Pure functions, no imports beyond the standard library.
"""

from __future__ import annotations

import re

#: What ends a line, and nothing else.
LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_WITH_END = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def split_lines_keep_ends(text: str) -> list[str]:
    """The lines of `text`, each with its ending; no empty last item ("a\\n" -> ["a\\n"], "" -> [])."""
    if "\r" not in text:
        # The common case, from C: split at "\n" only and put the endings back.
        parts = text.split("\n")
        last = parts.pop()
        out = [part + "\n" for part in parts]
        if last:
            out.append(last)
        return out
    return _LINE_WITH_END.findall(text)


def split_lines(text: str) -> list[str]:
    """The lines of `text` without their endings; a final line ending adds no empty line (as the validator)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def strip_line_end(line: str) -> str:
    """A line without its ending ("\\n", "\\r\\n" or "\\r")."""
    if line.endswith("\n"):
        line = line[:-1]
    if line.endswith("\r"):
        line = line[:-1]
    return line


def has_line_end(line: str) -> bool:
    return line.endswith(("\n", "\r"))


def normalize_line_ends(text: str) -> str:
    """`text` with every "\\r\\n" and lone "\\r" made "\\n": same lines, same line numbers, "\\n"-only."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def line_at(text: str, line_no: int) -> str | None:
    """Line `line_no` (1-based) of `text` without its ending, or None past the end."""
    lines = split_lines(text)
    return lines[line_no - 1] if 1 <= line_no <= len(lines) else None
