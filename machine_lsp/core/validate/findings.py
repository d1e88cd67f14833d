"""What the validator reports: findings with positions and fixes, per-line results, file reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

Kind = Literal["train", "eval", "auto", "pairs", "kto"]  # pairs, kto: validate/preference.py


Severity = Literal["error", "warning"]


class TextEdit(msgspec.Struct):
    line: int
    column: int
    end_line: int
    end_column: int
    new_text: str


class Fix(msgspec.Struct):
    title: str
    edits: list[TextEdit]


class Finding(msgspec.Struct, omit_defaults=True):
    line: int
    column: int
    end_line: int
    end_column: int
    severity: Severity
    code: str
    message: str
    fix: Fix | None = None


class LineResult(msgspec.Struct, gc=False):
    """What one line contributes: its findings plus what the dataset-level checks need.

    `findings` is a list, or the shared empty tuple for clean lines (no allocation on the hot path). The struct
    never forms reference cycles, hence gc=False: 100k results otherwise trigger costly collections.
    """

    findings: Sequence[Finding]
    fingerprint: int | None = None  # hash of the line text for exact-duplicate detection (same process only)
    prompt_key: str | None = None  # text of the last user message, for train/eval leakage
    width: int = 0  # code points in the line, for whole-line ranges
    row_kind: Literal["train", "eval"] | None = None  # None: blank or not a JSON object
    messages: int = 0

    def at_line(self, line_no: int) -> LineResult:
        """The same result moved to another line (for callers that cache results by line text)."""
        if not self.findings or self.findings[0].line == line_no:
            return self
        return msgspec.structs.replace(self, findings=[_move(f, line_no) for f in self.findings])


class Report(msgspec.Struct):
    file: str
    rows: int
    ok: bool
    findings: list[Finding]
    stats: dict[str, Any]
    eval_report: Report | None = None  # the --eval file's report, when one was given

    @property
    def all_ok(self) -> bool:
        return self.ok and (self.eval_report is None or self.eval_report.ok)


class UnreadableFile(Exception):
    """The input cannot be validated at all (missing, a directory, binary); callers exit 2."""


_CLEAN: tuple[Finding, ...] = ()


def _blank(text: str, line_no: int) -> LineResult:
    fix = Fix("Remove the blank line", [TextEdit(line_no, 1, line_no + 1, 1, "")])
    finding = Finding(line_no, 1, line_no, len(text) + 1, "warning", "blank-line", "blank line", fix)
    return LineResult([finding], None, None, len(text))


_BOM_FINDING = Finding(
    1,
    1,
    1,
    2,
    "error",
    "bom",
    "file starts with a byte-order mark (BOM); JSON loaders reject it",
    Fix("Remove the byte-order mark", [TextEdit(1, 1, 1, 2, "")]),
)


def _shift_bom(finding: Finding) -> Finding:
    """Line 1 was checked without its BOM; in the file the BOM is code point 1, so shift line-1 columns by one."""
    if finding.line != 1:
        return finding
    fix = finding.fix
    if fix is not None:
        edits = [
            msgspec.structs.replace(
                e,
                column=e.column + (e.line == 1),
                end_column=e.end_column + (e.end_line == 1),
            )
            for e in fix.edits
        ]
        fix = Fix(fix.title, edits)
    end_shift = 1 if finding.end_line == 1 else 0
    return msgspec.structs.replace(
        finding, column=finding.column + 1, end_column=finding.end_column + end_shift, fix=fix
    )


def _move(finding: Finding, line_no: int) -> Finding:
    delta = line_no - finding.line
    fix = finding.fix
    if fix is not None:
        fix = Fix(
            fix.title,
            [msgspec.structs.replace(e, line=e.line + delta, end_line=e.end_line + delta) for e in fix.edits],
        )
    return msgspec.structs.replace(
        finding, line=finding.line + delta, end_line=finding.end_line + delta, fix=fix
    )
