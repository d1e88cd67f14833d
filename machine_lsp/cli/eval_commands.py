"""`machine train eval init|split|baseline|checkpoint|compare|probe`: held-out evaluation as jobs, the eval set made
from the store, and the comparison."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from machine_lsp.cli.job_render import run_job
from machine_lsp.cli.job_support import (
    add_job_args,
    check_file,
    cli_verb,
    confirm_cost,
    console_out,
    resolved_engine,
)
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.exit_codes import EXIT_OK, UsageError

if TYPE_CHECKING:
    from machine_lsp.core.evals import Comparison


def register(verbs: VerbParsers) -> None:
    init = verbs.parser("train eval init", _eval_init)
    init.add_argument("--force", action="store_true", help="overwrite eval.py")

    _register_split(verbs)

    base = verbs.parser("train eval baseline", _eval_answers)
    base.add_argument("--data", metavar="FILE", help="held-out JSONL (default: [eval] data)")
    base.add_argument("--probe", action="store_true", help="also run the style-bleed probe")
    _eval_common(base)

    ck = verbs.parser("train eval checkpoint", _eval_answers)
    ck.add_argument(
        "path",
        metavar="PATH",
        help="local://RUN/NAME, tinker://RUN/sampler_weights/NAME, a dir, or `latest` (newest training run)",
    )
    ck.add_argument("--data", metavar="FILE", help="held-out JSONL (default: [eval] data)")
    ck.add_argument("--probe", action="store_true", help="also run the style-bleed probe")
    _eval_common(ck)

    cmp_ = verbs.parser("train eval compare", _eval_compare)
    cmp_.add_argument("a", metavar="A.json")
    cmp_.add_argument("b", metavar="B.json")
    cmp_.add_argument("--rows", type=int, default=20, metavar="N", help="changed rows to list (default 20)")
    cmp_.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp_.add_argument("--no-chart", action="store_true", help="do not write the PNG chart")

    _register_pairs(verbs)

    probe = verbs.parser("train eval probe", _eval_answers)
    probe.add_argument(
        "path", nargs="?", metavar="PATH", help="checkpoint address or `latest`; omit for the base model"
    )
    probe.add_argument("--questions", metavar="FILE", help="extra probe questions (one per line, or JSONL)")
    _eval_common(probe)


def _register_split(verbs: VerbParsers) -> None:
    split = verbs.parser("train eval split", _eval_split)
    split.add_argument("--out", metavar="FILE", help="the eval file (default: [eval] data, else eval.jsonl)")
    split.add_argument("--force", action="store_true", help="replace an existing eval file with a new split")


def _register_pairs(verbs: VerbParsers) -> None:
    pairs = verbs.parser("train eval pairs", _eval_pairs)
    pairs.add_argument(
        "path", nargs="?", metavar="PATH", help="checkpoint address or `latest`; omit for the base"
    )
    pairs.add_argument(
        "--data", required=True, metavar="FILE", help="held-out pairs (`machine export pairs` format)"
    )
    pairs.add_argument("--beta", type=float, metavar="X", help="reward scale (default: [train] beta, 0.1)")
    pairs.add_argument("--out", metavar="FILE", help="result file (default: eval_results/pairs-<name>.json)")
    add_job_args(pairs)


def _eval_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-tokens", type=int, metavar="N", help="tokens per answer (default: [eval] max_tokens)"
    )
    p.add_argument("--format-pattern", metavar="RE", help="the trained answer format (regex)")
    p.add_argument("--grader", choices=["exact", "contains", "regex"], help="override each row's match kind")
    p.add_argument("--out", metavar="FILE", help="result file (default: eval_results/<name>.json)")
    add_job_args(p)


@cli_verb
def _eval_init(args: argparse.Namespace) -> int:
    from machine_lsp.scaffold.writer import ScaffoldExists, write_default_config, write_eval_scaffold

    cwd = Path.cwd()
    try:
        written = write_eval_scaffold(cwd, command="machine train eval init", force=args.force)
    except ScaffoldExists as exc:
        raise UsageError(str(exc)) from None
    config = write_default_config(cwd)
    if config is not None:
        written.append(config)
    for path in written:
        console_out().print(f"wrote [bold]{escape(path.name)}[/]")
    console_out().print(
        "next: [bold]machine train eval baseline --data EVAL.jsonl[/] (or python eval.py --data EVAL.jsonl)"
    )
    return EXIT_OK


def _eval_split(args: argparse.Namespace) -> int:
    from machine_lsp.core.store import find_project_root
    from machine_lsp.scaffold.eval_set import EvalSetError, make_eval_set

    try:
        report = make_eval_set(find_project_root(), args.out, force=args.force)
    except EvalSetError as exc:
        raise UsageError(str(exc)) from None
    console_out().print(escape(report.message))
    console_out().print("next: [bold]machine train eval baseline[/]")
    return EXIT_OK


def _eval_payload(args: argparse.Namespace, checkpoint: str | None) -> dict[str, Any]:
    return {
        "config": args.config,
        "engine": args.engine,
        "model": args.model,
        "data": getattr(args, "data", None),
        "checkpoint": checkpoint,
        "probe": getattr(args, "probe", False),
        "probe_questions": getattr(args, "questions", None),
        "max_tokens": args.max_tokens,
        "format_pattern": args.format_pattern,
        "grader": args.grader,
        "out": args.out,
    }


def _eval_job(args: argparse.Namespace, job: str, payload: dict[str, Any], checkpoint: str | None) -> int:
    """Ask about the cost where it has one (hosted Tinker), then run the eval job with its progress."""
    confirm_cost(args, resolved_engine(args, checkpoint), job, payload)
    return run_job(job, payload, raw=args.json)


@cli_verb
def _eval_answers(args: argparse.Namespace) -> int:
    """`train eval baseline|checkpoint|probe`: the base model's answers (no PATH) or a checkpoint's, evaluated."""
    check_file(getattr(args, "data", None), "eval data")
    check_file(getattr(args, "questions", None), "probe questions")
    checkpoint = getattr(args, "path", None)
    return _eval_job(args, args.job_verb, _eval_payload(args, checkpoint), checkpoint)


@cli_verb
def _eval_pairs(args: argparse.Namespace) -> int:
    check_file(args.data, "pairs data")
    payload = {
        "config": args.config,
        "engine": args.engine,
        "model": args.model,
        "data": args.data,
        "checkpoint": args.path,
        "beta": args.beta,
        "out": args.out,
    }
    return _eval_job(args, args.job_verb, payload, args.path)


@cli_verb
def _eval_compare(args: argparse.Namespace) -> int:
    import msgspec

    from machine_lsp.core import evals

    try:
        a = evals.load_result(Path(args.a))
        b = evals.load_result(Path(args.b))
        c = evals.compare(a, b)
    except evals.EvalError as exc:
        raise UsageError(str(exc)) from None
    chart: Path | None = None
    if not args.no_chart:
        from machine_lsp.jobs.charts import compare_chart

        chart = Path(args.b).parent / f"compare-{Path(args.a).stem}-vs-{Path(args.b).stem}.png"
        compare_chart(c, chart)
    if args.json:
        payload = msgspec.to_builtins(c)
        payload["chart"] = str(chart) if chart else None
        print(json.dumps(payload, indent=2))
        return EXIT_OK
    out = console_out()
    if not c.same_data:
        out.print("[yellow]warning: the two results were not run on the same data file (checksums differ)[/]")
    out.print(_summary_table(c))
    out.print(
        f"gained {c.gained} (wrong → right), lost {c.lost} (right → wrong), both right {c.both_correct}, "
        f"both wrong {c.both_wrong}; exact McNemar p = {c.mcnemar_p:.4g}"
    )
    if c.only_in_a or c.only_in_b:
        out.print(f"[yellow]unpaired rows: {len(c.only_in_a)} only in A, {len(c.only_in_b)} only in B[/]")
    if c.changed:
        out.print(_changed_rows_table(c, args.rows))
    if chart:
        out.print(f"chart: {escape(str(chart))}")
    return EXIT_OK


def _summary_table(c: Comparison) -> Table:
    table = Table(title=f"{escape(c.a_name)} → {escape(c.b_name)}  ({c.n} paired rows)")
    table.add_column("")
    table.add_column(escape(c.a_name), justify="right")
    table.add_column(escape(c.b_name), justify="right")
    table.add_column("Δ", justify="right")
    table.add_row(
        "accuracy",
        f"{c.a_accuracy:.1%} ({c.a_correct})",
        f"{c.b_accuracy:.1%} ({c.b_correct})",
        f"{c.delta:+.1%}",
    )
    table.add_row(
        "format rate",
        f"{c.a_format_rate:.1%}",
        f"{c.b_format_rate:.1%}",
        f"{c.b_format_rate - c.a_format_rate:+.1%}",
    )
    if c.a_bleed_rate is not None or c.b_bleed_rate is not None:
        fa = f"{c.a_bleed_rate:.1%}" if c.a_bleed_rate is not None else "–"
        fb = f"{c.b_bleed_rate:.1%}" if c.b_bleed_rate is not None else "–"
        table.add_row("bleed rate", fa, fb, "")
    return table


def _changed_rows_table(c: Comparison, limit: int) -> Table:
    rows = Table(title=f"changed rows ({len(c.changed)})")
    for col in ("id", "prompt", "expected", escape(c.a_name), escape(c.b_name)):
        rows.add_column(col, overflow="fold")
    for r in c.changed[:limit]:
        mark_a = "✓" if r.a_correct else "✗"
        mark_b = "✓" if r.b_correct else "✗"
        rows.add_row(
            escape(r.id),
            escape(r.prompt[:60]),
            escape(r.expected),
            f"{mark_a} {escape(r.a_output[:40])}",
            f"{mark_b} {escape(r.b_output[:40])}",
        )
    return rows
