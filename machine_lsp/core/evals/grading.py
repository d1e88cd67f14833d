"""Graders, format compliance and the bleed pattern: what counts as a right answer, in the trained format."""

from __future__ import annotations

import re
from typing import Literal

Grader = Literal["exact", "contains", "regex"]
GRADERS: tuple[str, ...] = ("exact", "contains", "regex")
DEFAULT_FORMAT_PATTERN = r"^answer: -?\d+$"


class EvalError(ValueError):
    """Bad eval input (unreadable file, malformed row, invalid pattern): the message names file and line."""


# ---------------------------------------------------------------------------------------------------------------
# Graders and format


def compile_pattern(pattern: str, what: str = "pattern") -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise EvalError(f"invalid {what} {pattern!r}: {exc}") from None


def grade(output: str, expected: str, match: Grader = "exact") -> bool:
    """Whether ``output`` is correct for ``expected`` under grader ``match``."""
    if match == "exact":
        return output.strip() == expected.strip()
    if match == "contains":
        return expected.strip() in output
    if match == "regex":
        return compile_pattern(expected, "regex in expected").search(output) is not None
    raise EvalError(f"unknown grader {match!r}: choose one of {', '.join(GRADERS)}")


def format_ok(output: str, pattern: str | re.Pattern[str] = DEFAULT_FORMAT_PATTERN) -> bool:
    """Whether the trimmed output has the trained format."""
    rx = pattern if isinstance(pattern, re.Pattern) else compile_pattern(pattern, "format pattern")
    return rx.search(output.strip()) is not None


_META = set(".^$*+?{}[]\\|()")


def literal_prefix(pattern: str) -> str:
    """The literal text a regex starts with (after ``^``), up to its first metacharacter: ``^answer: -?\\d+$`` ->
    ``answer: -`` is cut back to ``answer: `` because the ``-`` is made optional by ``?``."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and not body[i + 1].isalnum():
            nxt, step = body[i + 1], 2
        elif ch in _META:
            break
        else:
            nxt, step = ch, 1
        # a quantifier after this character makes it optional or repeated: stop before it
        if i + step < len(body) and body[i + step] in "?*{":
            break
        out.append(nxt)
        i += step
    return "".join(out)


def default_bleed_pattern(format_pattern: str = DEFAULT_FORMAT_PATTERN) -> str:
    """The pattern a probe answer "bleeds" on: the format's literal prefix at the start of a line, else the format."""
    prefix = literal_prefix(format_pattern).strip()
    if len(prefix) >= 3:
        return r"^\s*" + re.escape(prefix)
    return format_pattern


def bleeds(output: str, bleed_pattern: str | re.Pattern[str]) -> bool:
    rx = (
        bleed_pattern
        if isinstance(bleed_pattern, re.Pattern)
        else compile_pattern(bleed_pattern, "bleed pattern")
    )
    return rx.search(output.strip()) is not None
