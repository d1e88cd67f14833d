"""A whole input into one Report: a text (an editor's buffer), a file's bytes or a path, with the paired train/eval
file's prompts for leakage and, for a file in another format, its diagnosis. The line passes are `passes.py`'s."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from machine_lsp.core.lines import split_lines
from machine_lsp.core.validate.findings import (
    Kind,
    Report,
)
from machine_lsp.core.validate.formats import diagnose_lines
from machine_lsp.core.validate.inputs import check_binary, read_input
from machine_lsp.core.validate.passes import _content_pass, _finish, _Pass
from machine_lsp.core.validate.preference import (
    PREFERENCE_KINDS,
    refine_kind,
    refine_kind_of_bytes,
)


def prompt_keys(text: str, kind: Kind = "auto") -> set[str]:
    """User prompts of every row of a file, for leakage checks against it."""
    return _content_pass(text, kind, "<text>").prompt_keys()


def _paired_prompts(other: str | None, other_prompts: set[str] | None, kind: Kind) -> set[str] | None:
    """The paired train/eval file's user prompts, for leakage: given, derived from its text, or None."""
    if other is not None and other_prompts is None:
        return prompt_keys(other, "train" if kind == "eval" else "auto")
    return other_prompts


def validate_text(
    text: str,
    kind: Kind = "auto",
    other: str | None = None,
    *,
    file: str = "<text>",
    other_prompts: set[str] | None = None,
    other_name: str = "the other file",
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Validate a whole JSONL text. `other` (or `other_prompts`) is the paired train/eval file, for leakage."""
    kind = refine_kind(kind, split_lines(text[:4096]))  # type: ignore[assignment]
    other_format = kind not in PREFERENCE_KINDS and _may_be_other_format(text)
    diagnosed = _diagnosed(split_lines(text) if other_format else [], file, len(text))
    if diagnosed is not None:
        return diagnosed
    other_prompts = _paired_prompts(other, other_prompts, kind)
    run = _content_pass(text, kind, file, progress, want_prompts=other_prompts is not None)
    return _finish(run, other_prompts, other_name)


def _may_be_other_format(data: str | bytes) -> bool:
    """Cheap pre-sniff for diagnose_lines: the first line opens an array or names another format's keys."""
    head = data[:4096]
    if type(head) is bytes:
        head = head.decode("utf-8", "replace")
    head = head.lstrip("\ufeff \t\r\n")
    return head.startswith("[") or "conversations" in head or '"prompt"' in head


def _diagnosed(lines: Sequence[str], file: str, byte_count: int) -> Report | None:
    """A Report of one file-level finding when the file is in another chat format (see formats.py)."""
    finding = diagnose_lines(lines) if lines else None
    if finding is None:
        return None
    report = _finish(_Pass(file, byte_count, lines, False), None, "")
    report.findings = [finding]
    report.ok = False
    report.stats["errors"], report.stats["warnings"] = 1, 0
    return report


def validate_bytes(
    data: bytes,
    kind: Kind = "auto",
    other: str | None = None,
    *,
    file: str = "<bytes>",
    other_prompts: set[str] | None = None,
    other_name: str = "the other file",
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Validate raw file bytes: BOM, invalid UTF-8 (each a finding, nothing dropped), CRLF; binary data raises."""
    kind = refine_kind_of_bytes(kind, data)  # type: ignore[assignment]
    diagnosed = _diagnosed_bytes(data, file, kind)
    if diagnosed is not None:
        return diagnosed
    other_prompts = _paired_prompts(other, other_prompts, kind)
    run = _content_pass(data, kind, file, progress, want_prompts=other_prompts is not None)
    return _finish(run, other_prompts, other_name)


def _diagnosed_bytes(data: bytes, file: str, kind: Kind = "auto") -> Report | None:
    if kind in PREFERENCE_KINDS or not _may_be_other_format(data):
        return None
    check_binary(data, file)
    return _diagnosed(split_lines(data.decode("utf-8", "replace")), file, len(data))


def validate_path(
    path: str | Path,
    eval_path: str | Path | None = None,
    kind: Kind = "auto",
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Validate a file, and its eval file (checked as kind "eval") with train/eval leakage flagged in both."""
    data = read_input(path)
    eval_data = read_input(eval_path) if eval_path is not None else None
    kind = refine_kind_of_bytes(kind, data)  # type: ignore[assignment]
    diagnosed = _diagnosed_bytes(data, str(path), kind)
    if diagnosed is not None:
        if eval_data is not None:
            diagnosed.eval_report = validate_bytes(eval_data, "eval", file=str(eval_path))
        return diagnosed
    run = _content_pass(data, kind, str(path), progress, want_prompts=eval_data is not None)
    if eval_data is None:
        return _finish(run, None, "")
    eval_run = _content_pass(eval_data, "eval", str(eval_path))
    report = _finish(run, eval_run.prompt_keys(), str(eval_path))
    report.eval_report = _finish(eval_run, run.prompt_keys(), str(path))
    return report
