"""Applying the validator's mechanical fixes to a file's text (pure; `machine train validate --fix` writes it).

A finding's `Fix` is a list of `TextEdit`s with 1-based lines and columns counted in code points of the line, lines
ending at "\\n", "\\r\\n" or a lone "\\r" (the validator's conventions, core.validate). Bytes that are not UTF-8 are
carried through unchanged (surrogateescape). Fixes are taken in file order; one whose edits overlap an edit already
taken is skipped and reported (its finding stays, and a later `--fix` run may settle it). The taken edits are
applied from the end of the text backwards, so no edit moves another. `fix_all` is every fix of a file, round after
round: `machine train validate --fix` and the editor's fix-all (`source.fixAll.machine`) both call it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from machine_lsp.core.validate import Finding, Fix, TextEdit, validate_bytes

FIX_ROUNDS = 5  # a fix can reveal another (a row split off its neighbour's line is checked only then)
_LINE_END = re.compile(r"\r\n|\r|\n")


class FixOutcome(msgspec.Struct):
    applied: list[Finding]
    skipped: list[Finding]  # overlapping an applied fix: left for another run


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts.extend(m.end() for m in _LINE_END.finditer(text))
    return starts


def _offset(starts: list[int], text: str, line: int, column: int) -> int:
    if line - 1 >= len(starts):  # the position just after the last line (an edit that removes a last line)
        return len(text)
    return min(starts[line - 1] + column - 1, len(text))


def _span(starts: list[int], text: str, edit: TextEdit) -> tuple[int, int]:
    return _offset(starts, text, edit.line, edit.column), _offset(
        starts, text, edit.end_line, edit.end_column
    )


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    if a[0] == a[1] == b[0] == b[1]:
        return True  # two insertions at one place: their order would be a guess
    return (
        a[0] < b[1]
        and b[0] < a[1]
        or (a[0] == a[1] and b[0] < a[0] < b[1])
        or (b[0] == b[1] and a[0] < b[0] < a[1])
    )


def apply_fixes(data: bytes, findings: Iterable[Finding]) -> tuple[bytes, FixOutcome]:
    """The bytes with every non-conflicting fix applied, and which findings were fixed or skipped."""
    text = data.decode("utf-8", "surrogateescape")
    starts = _line_starts(text)
    taken: list[tuple[int, int, str]] = []
    outcome = FixOutcome(applied=[], skipped=[])
    fixable = sorted((f for f in findings if f.fix is not None), key=lambda f: (f.line, f.column))
    for finding in fixable:
        fix: Fix = finding.fix  # type: ignore[assignment]
        spans = [(*_span(starts, text, e), e.new_text) for e in fix.edits]
        if any(_overlaps((s, e), (ts, te)) for s, e, _ in spans for ts, te, _ in taken) or any(
            _overlaps(spans[i][:2], spans[j][:2]) for i in range(len(spans)) for j in range(i)
        ):
            outcome.skipped.append(finding)
            continue
        taken.extend(spans)
        outcome.applied.append(finding)
    for start, end, new_text in sorted(taken, key=lambda t: (t[0], t[1]), reverse=True):
        text = text[:start] + new_text + text[end:]
    return text.encode("utf-8", "surrogateescape"), outcome


def fix_all(data: bytes, kind: str = "auto", *, file: str = "<bytes>") -> tuple[bytes, FixOutcome]:
    """The bytes with every mechanical fix applied, validating again after each round (at most FIX_ROUNDS);
    `skipped` is what the last round still left (overlapping fixes). Raises ValueError on binary data."""
    applied: list[Finding] = []
    skipped: list[Finding] = []
    for _ in range(FIX_ROUNDS):
        data, outcome = apply_fixes(data, validate_bytes(data, kind, file=file).findings)  # type: ignore[arg-type]
        applied.extend(outcome.applied)
        skipped = outcome.skipped
        if not outcome.applied:
            break
    return data, FixOutcome(applied=applied, skipped=skipped)
