"""The ``validate`` job: the core validator over a file, with progress events (exercises the job runner)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from machine_lsp.jobs.runner import JobContext, JobError

if TYPE_CHECKING:
    from machine_lsp.core.validate import Report


class ValidateArgs(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    eval_path: str | None = None
    kind: Literal["train", "eval", "auto"] = "auto"
    label: str | None = (
        None  # the name to report (an editor buffer's, when `path` is the server's copy of it)
    )


def _count_lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            n += block.count(b"\n")
    return n


def validate(ctx: JobContext, args: ValidateArgs) -> tuple[dict[str, Any], str]:
    from machine_lsp.core import validate as core_validate

    path = (ctx.cwd / args.path) if not Path(args.path).is_absolute() else Path(args.path)
    eval_path = None
    if args.eval_path:
        eval_path = Path(args.eval_path) if Path(args.eval_path).is_absolute() else ctx.cwd / args.eval_path
    if not path.is_file():
        raise JobError(f"{args.path}: no such file" if not path.exists() else f"{args.path}: not a file")
    total = _count_lines(path)
    ctx.progress(0, total, f"validating {args.label or path.name}", force=True)

    def on_progress(done: int, total_rows: int) -> None:
        ctx.progress(done, total_rows, f"validated {done}/{total_rows} lines")

    try:
        report = core_validate.validate_path(path, eval_path, args.kind, progress=on_progress)
    except core_validate.UnreadableFile as exc:
        raise JobError(str(exc)) from None
    ctx.progress(total, total, f"validated {report.rows} rows", force=True)
    result = _result(report, args.label or str(path))
    errors = result["errors"] + (result["eval"]["errors"] if result["eval"] else 0)
    warnings = result["warnings"] + (result["eval"]["warnings"] if result["eval"] else 0)
    verdict = "ok" if report.all_ok else f"{errors} errors, {warnings} warnings"
    return result, f"{args.label or path.name}: {report.rows} rows, {verdict}"


def _result(report: Report, file: str) -> dict[str, Any]:
    """The job's result: the report's findings (the first 1000) and counts, and the eval file's under "eval"."""
    findings = [msgspec.to_builtins(f) for f in report.findings]
    errors = sum(1 for f in report.findings if f.severity == "error")
    result: dict[str, Any] = {
        "file": file,
        "rows": report.rows,
        "ok": report.all_ok,
        "errors": errors,
        "warnings": len(report.findings) - errors,
        "findings": findings[:1000],
        "findings_truncated": len(findings) > 1000,
        "stats": msgspec.to_builtins(report.stats),
        "eval": None,
    }
    if report.eval_report is not None:
        er = report.eval_report
        e_errors = sum(1 for f in er.findings if f.severity == "error")
        result["eval"] = {
            "file": er.file,
            "rows": er.rows,
            "ok": er.ok,
            "errors": e_errors,
            "warnings": len(er.findings) - e_errors,
            "findings": [msgspec.to_builtins(f) for f in er.findings[:1000]],
        }
    return result
