"""`machine train validate [FILE] [--eval FILE] [--fix [--no-backup]] [--model M] [--renderer R] [--max-length N]
[--json]`.

Exit codes (the CLI's one rule): 0 clean (warnings allowed), 1 errors in the data, 2 unreadable input or bad usage,
3 the store (no FILE) or the fixed file cannot be read or written.
Without FILE it validates the store's good rows as they would be exported for SFT. `--fix` applies every
mechanical fix the validator offers (core.fixes), atomically, after a backup (`FILE.bak`), then validates again.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from machine_lsp.cli.consoles import console_err, console_out
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_STORE, EXIT_USAGE
from machine_lsp.core.store import StoreError
from machine_lsp.core.terminal_text import for_terminal
from machine_lsp.core.validate import (
    Finding,
    Report,
    UnreadableFile,
    read_input,
    validate_bytes,
    validate_path,
)

MAX_PRINTED_FINDINGS = 200
STORE_LABEL = "<store: good rows as SFT>"


def register(verbs: VerbParsers) -> None:
    parser = verbs.parser(
        "train validate",
        run,
        description="Validate a training file (and its eval file). Without FILE: the store's good rows as SFT.",
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="chat JSONL to validate (default: the store)")
    parser.add_argument(
        "--eval", dest="eval_file", metavar="FILE", help="the held-out eval file (checks leakage)"
    )
    parser.add_argument(
        "--model",
        metavar="M",
        help="also check every row renders with this model's tokenizer (offline; default model: SmolLM2)",
    )
    parser.add_argument(
        "--renderer", metavar="R", help="tinker-cookbook renderer name (default: the model's)"
    )
    parser.add_argument("--max-length", type=int, metavar="N", help="flag rows longer than N tokens")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--fix",
        action="store_true",
        help="apply the mechanical fixes (role case, trailing commas, BOM, blank lines, rows sharing a line...) "
        "in place, keeping a backup FILE.bak, then validate again",
    )
    parser.add_argument("--no-backup", action="store_true", help="with --fix: do not write FILE.bak")


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the options of `machine train validate` (None: nothing)."""
    if args.max_length is not None and args.max_length <= 0:
        return "--max-length must be a positive number of tokens"
    if args.file is None and args.eval_file is not None:
        return "--eval needs a training FILE to compare against"
    if (args.fix or args.no_backup) and args.file is None:
        return "--fix needs a FILE (the store is fixed by tagging again)"
    if args.no_backup and not args.fix:
        return "--no-backup goes with --fix"
    return None


def run(args: argparse.Namespace) -> int:
    err = console_err(highlight=False)
    problem = _usage_error(args)
    if problem is not None:
        err.print(f"machine: {problem}")
        return EXIT_USAGE
    if args.fix:
        code = _fix_file(args.file, backup=not args.no_backup, quiet=args.json)
        if code is not None:
            return code
    tokens_wanted = bool(args.model or args.renderer or args.max_length)
    read = _read_report(args, tokens_wanted, err)
    if isinstance(read, int):
        return read
    report, data, eval_data = read
    if tokens_wanted and data is not None:
        code = _check_tokens(args, report, data, eval_data, err)
        if code is not None:
            return code
    if args.json:
        sys.stdout.write(msgspec.json.encode(_as_json(report)).decode() + "\n")
    else:
        _print_human(report)
    return EXIT_OK if report.all_ok else EXIT_FAILED


def _read_report(
    args: argparse.Namespace, tokens_wanted: bool, err: Console
) -> tuple[Report, bytes | None, bytes | None] | int:
    """The report, and the bytes the token checks render again (an exit code when the input cannot be read)."""
    data: bytes | None = None
    eval_data: bytes | None = None
    try:
        if args.file is None:
            try:
                data = _store_sft_bytes()
            except StoreError as exc:
                err.print(f"machine: store: {escape(str(exc))}")
                return EXIT_STORE
            report = validate_bytes(data, "train", file=STORE_LABEL)
        else:
            report = validate_path(args.file, args.eval_file)
            if tokens_wanted:  # the token checks render the rows again from the bytes
                data = read_input(args.file)
                eval_data = read_input(args.eval_file) if args.eval_file else None
    except UnreadableFile as exc:
        err.print(f"machine: {escape(str(exc))}")
        return EXIT_USAGE
    return report, data, eval_data


def _check_tokens(
    args: argparse.Namespace, report: Report, data: bytes, eval_data: bytes | None, err: Console
) -> int | None:
    """Add the tokenizer's findings to the reports (an exit code when the tokens cannot be checked)."""
    from machine_lsp.engines.readiness import ReadinessError, check_readiness
    from machine_lsp.scaffold.config import ConfigError, load_project_config

    try:
        # Rows are rendered as they would train: with the project's configured `train_on`.
        train_on = load_project_config(Path.cwd())[0].train.train_on
        _add_readiness(
            report,
            check_readiness(data, report, args.model, args.renderer, args.max_length, train_on=train_on),
        )
        if eval_data is not None and report.eval_report is not None:
            readiness = check_readiness(
                eval_data, report.eval_report, args.model, args.renderer, args.max_length, "eval"
            )
            _add_readiness(report.eval_report, readiness)
    except (ReadinessError, ConfigError) as exc:
        err.print(f"machine: cannot check tokens: {escape(str(exc))}")
        return EXIT_USAGE
    return None


def _store_sft_bytes() -> bytes:
    from machine_lsp.core.export import export_sft
    from machine_lsp.core.schema import encode_training_row
    from machine_lsp.core.store import Store

    records = Store.open().records()  # a StoreError is exit 3, as for every verb that reads the store
    return b"".join(encode_training_row(row) + b"\n" for row in export_sft(records))


def _fix_file(path: str, *, backup: bool, quiet: bool) -> int | None:
    """Apply the fixes in place (backup first, atomic replace keeping the mode); an exit code when it cannot."""
    from machine_lsp.core.fixes import fix_all
    from machine_lsp.core.safe_files import write_output

    out = console_out(highlight=False, stderr=quiet)  # with --json, stdout carries only the report
    err = console_err(highlight=False)
    try:
        original = read_input(path)
    except UnreadableFile as exc:
        err.print(f"machine: {escape(str(exc))}")
        return EXIT_USAGE
    data, outcome = fix_all(original, "auto", file=path)
    applied, skipped = outcome.applied, outcome.skipped  # skipped: what the last round still left over
    if not applied:
        out.print(f"{escape(path)}: nothing to fix")
        return None
    backup_path = f"{path}.bak"
    try:
        if backup:
            write_output(backup_path, original)
            os.chmod(backup_path, stat.S_IMODE(os.stat(path).st_mode))  # as private as the original
        write_output(path, data)
    except OSError as exc:
        err.print(f"machine: cannot write {escape(exc.filename or path)}: {escape(exc.strerror or str(exc))}")
        return EXIT_STORE
    kept = f" (the original is in {escape(backup_path)})" if backup else ""
    out.print(f"[green]fixed {len(applied)} finding{'s' * (len(applied) != 1)}[/] in {escape(path)}{kept}:")
    for f in applied:
        out.print(f"  [bold]{f.code}[/bold] line {f.line}: {escape(f.fix.title if f.fix else '')}")
    for f in skipped:
        out.print(
            f"  [yellow]not fixed[/] [bold]{f.code}[/bold] line {f.line}: {escape(f.fix.title if f.fix else '')}"
            " overlaps another fix; run --fix again"
        )
    return None


def _add_readiness(report: Report, readiness: Any) -> None:
    report.findings = sorted(report.findings + readiness.findings, key=lambda f: (f.line, f.column, f.code))
    errors = sum(1 for f in readiness.findings if f.severity == "error")
    report.stats["errors"] += errors
    report.stats["warnings"] += len(readiness.findings) - errors
    report.stats["tokens"] = readiness.stats
    report.ok = report.ok and errors == 0


def _finding_json(finding: Finding) -> dict[str, Any]:
    return {
        "line": finding.line,
        "column": finding.column,
        "end_line": finding.end_line,
        "end_column": finding.end_column,
        "severity": finding.severity,
        "code": finding.code,
        "message": finding.message,
        "fix": msgspec.to_builtins(
            finding.fix
        ),  # null, or {"title", "edits": [{line, column, ..., new_text}]}
    }


def _as_json(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {
        "file": report.file,
        "rows": report.rows,
        "ok": report.all_ok,
        "findings": [_finding_json(f) for f in report.findings],
        "stats": report.stats,
    }
    if report.eval_report is not None:
        out["eval"] = _as_json(report.eval_report)
    return out


def _print_human(report: Report) -> None:
    console = console_out(highlight=False)
    reports = [report] + ([report.eval_report] if report.eval_report is not None else [])
    for one in reports:
        _print_findings(console, one)
    _print_table(console, reports)
    for one in reports:
        _print_tokens(console, one)
    fixable = sum(1 for one in reports for f in one.findings if f.fix)
    if fixable and report.file != STORE_LABEL:
        console.print(f"{fixable} finding{'s' * (fixable != 1)} can be fixed with [bold]--fix[/bold]")
    if report.file == STORE_LABEL and report.rows == 0:
        console.print("the store has no good rows yet: tag some with `machine good --from FILE`")


def _print_findings(console: Console, one: Report) -> None:
    shown = one.findings[:MAX_PRINTED_FINDINGS]
    for f in shown:
        colour = "red" if f.severity == "error" else "yellow"
        console.print(
            f"{escape(one.file)}:{f.line}:{f.column}: [{colour}]{f.severity}[/{colour}] "
            f"[bold]{f.code}[/bold] {escape(for_terminal(f.message))}"  # messages quote the data
            + (f" [dim](fix: {escape(for_terminal(f.fix.title))})[/dim]" if f.fix else "")
        )
    if len(one.findings) > len(shown):
        console.print(
            f"… and {len(one.findings) - len(shown)} more findings in {escape(one.file)} (see --json)"
        )


def _print_table(console: Console, reports: list[Report]) -> None:
    table = Table(title="validation", title_justify="left", show_edge=False)
    for column in ("file", "rows", "errors", "warnings", "MB/s", "result"):
        table.add_column(column, justify="left" if column in ("file", "result") else "right")
    for one in reports:
        stats = one.stats
        result = "[green]ok[/green]" if one.ok else "[red]errors[/red]"
        table.add_row(
            escape(one.file),
            str(one.rows),
            str(stats["errors"]),
            str(stats["warnings"]),
            f"{stats['mb_per_s']:.0f}" if stats.get("mb_per_s") else "-",
            result,
        )
    console.print(table)


def _print_tokens(console: Console, one: Report) -> None:
    tokens = one.stats.get("tokens")
    if not tokens:
        return
    parts = []
    if tokens["rendered_train_rows"]:
        parts.append(
            f"{tokens['tokens']} tokens in {tokens['rendered_train_rows']} rows, {tokens['trained_tokens']} trained"
        )
    if tokens["rendered_eval_rows"]:
        parts.append(
            f"{tokens['eval_prompt_tokens']} prompt tokens in {tokens['rendered_eval_rows']} eval rows"
        )
    if tokens["max_tokens_line"]:
        parts.append(f"longest {tokens['max_tokens']} tokens (line {tokens['max_tokens_line']})")
    console.print(
        f"{escape(one.file)}: {escape(tokens['model'])} via renderer {escape(tokens['renderer'])}: "
        + ("; ".join(parts) or "no rows rendered")
    )
