"""Checks across rows: exact duplicate rows and user prompts leaking between the train and eval files."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from machine_lsp.core.validate.findings import Finding, Fix, LineResult, TextEdit


def dataset_findings(
    lines: Sequence[LineResult | None],
    other_prompts: set[str] | None = None,
    *,
    other_name: str = "the other file",
) -> list[Finding]:
    """Findings across rows: exact duplicate rows and user prompts also present in the other (train/eval) file.

    `lines[i]` is the result for line i + 1, or None for a line not checked yet.
    """
    first_of: dict[int, int] = {}
    duplicates: list[tuple[int, int]] = []
    leaks: list[int] = []
    for index, result in enumerate(lines):
        if result is None or result.fingerprint is None:
            continue
        first = first_of.setdefault(result.fingerprint, index)
        if first != index:
            duplicates.append((index, first))
        if other_prompts and result.prompt_key and result.prompt_key in other_prompts:
            leaks.append(index)

    def width_of(index: int) -> int:
        result = lines[index]
        return result.width if result is not None else 0

    findings = _dataset_findings_of(duplicates, leaks, width_of, other_name)
    findings.sort(key=lambda f: (f.line, f.code))
    return findings


def _dataset_findings_of(
    duplicates: Sequence[tuple[int, int]],
    leaks: Sequence[int],
    width_of: Callable[[int], int],
    other_name: str,
) -> list[Finding]:
    """Findings for (0-based) duplicate lines with their first occurrence, and leaking lines; whole-line ranges."""
    findings: list[Finding] = []
    for index, first in duplicates:
        line_no = index + 1
        width = width_of(index)
        # Remove "\n<row>" from the end of the previous line: valid whether or not a newline follows.
        edit = TextEdit(line_no - 1, width_of(index - 1) + 1, line_no, width + 1, "")
        findings.append(
            Finding(
                line_no,
                1,
                line_no,
                width + 1,
                "warning",
                "duplicate-row",
                f"exact duplicate of line {first + 1}",
                Fix("Remove the duplicate row", [edit]),
            )
        )
    for index in leaks:
        findings.append(
            Finding(
                index + 1,
                1,
                index + 1,
                width_of(index) + 1,
                "error",
                "train-eval-leak",
                f"the same user prompt is in {other_name}: evaluation would measure memorisation",
            )
        )
    return findings
