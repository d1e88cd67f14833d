"""`machine jobs [list|cancel ID|prune]`: the runs in .machine/runs with their status, cancelling a running one,
and removing failed or old runs (core.prune says which may go and which checkpoints must stay)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from machine_lsp.cli.consoles import fit_columns
from machine_lsp.cli.job_support import (
    CANCEL_GRACE_S,
    console_err,
    console_out,
)
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core import runs
from machine_lsp.core.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE

# (name, least width, most width) of `machine jobs`'s table (see consoles.fit_columns).
JOBS_COLUMNS = (
    ("id", 14, 48),
    ("job", 5, 16),
    ("status", 6, 9),
    ("engine", 5, 6),
    ("steps", 5, 7),
    ("last checkpoint / result", 12, 90),
)


def register(verbs: VerbParsers) -> None:
    # `machine jobs` is `machine jobs list`
    for lister in (verbs.parser("jobs", _jobs_list), verbs.parser("jobs list", _jobs_list)):
        lister.add_argument("--json", action="store_true", help="print the manifests as JSON")
    jc = verbs.parser("jobs cancel", _jobs_cancel)
    jc.add_argument("run", metavar="ID", help="run id (or a unique prefix/suffix)")
    jp = verbs.parser("jobs prune", _jobs_prune)
    jp.add_argument("--failed", action="store_true", help="remove failed and lost runs")
    jp.add_argument(
        "--older-than",
        type=float,
        metavar="DAYS",
        help="remove finished runs created more than DAYS days ago",
    )
    jp.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    jp.add_argument("--json", action="store_true", help="print the decisions as JSON")


def _runs_dir() -> Path:
    from machine_lsp.core.store import Store

    return Store.open(Path.cwd()).runs_dir


def _jobs_list(args: argparse.Namespace) -> int:
    try:
        items = runs.list_runs(_runs_dir())
    except OSError as exc:  # the runs dir is a symlink or not a directory: never followed
        console_err().print(
            f"[red]machine:[/] store: {escape(str(_runs_dir()))} {escape(exc.strerror or str(exc))}"
        )
        return 3
    if getattr(args, "json", False):
        _print_jobs_json(items)
        return EXIT_OK
    out = console_out()
    if not items:
        out.print(f"no runs yet in {escape(str(_runs_dir()))}")
        return EXIT_OK
    rows = [_job_row(run_dir, m) for run_dir, m in items]
    # Fits the terminal: one line per run, long ids and details cut with an ellipsis (`--json` has them whole).
    table = Table(title=f"runs in {escape(str(_runs_dir()))}")
    widths = fit_columns(out.width, rows, JOBS_COLUMNS, ("engine", "steps"))
    for (name, _, _), width in zip(JOBS_COLUMNS, widths, strict=True):
        if width:
            justify = "right" if name == "steps" else "left"
            table.add_column(name, no_wrap=True, overflow="ellipsis", width=width, justify=justify)
    for cells in rows:
        table.add_row(*(cell for cell, width in zip(cells, widths, strict=True) if width))
    out.print(table)
    return EXIT_OK


def _print_jobs_json(items: list[tuple[Path, runs.RunManifest | None]]) -> None:
    import msgspec

    data = []
    for run_dir, manifest in items:
        entry = msgspec.to_builtins(manifest) if manifest else {"id": run_dir.name, "status": "unreadable"}
        if manifest:
            entry["effective_status"] = runs.effective_status(manifest)
        data.append(entry)
    print(json.dumps(data, indent=2))


_STATUS_COLOURS = {"done": "green", "running": "blue", "failed": "red", "cancelled": "yellow", "lost": "red"}


def _job_row(run_dir: Path, m: runs.RunManifest | None) -> list[str]:
    """One run's cells, in JOBS_COLUMNS order."""
    if m is None:
        return [escape(run_dir.name), "?", "[red]unreadable[/]", "", "", ""]
    status = runs.effective_status(m)
    detail = m.last_checkpoint or ""
    if m.error:
        detail = m.error
    elif m.result and "result_path" in m.result:
        detail = str(m.result["result_path"])
    return [
        escape(m.id),
        escape(m.job),
        f"[{_STATUS_COLOURS.get(status, 'white')}]{status}[/]",
        m.engine or "",
        str(m.steps_done) if m.steps_done else "",
        escape(" ".join(detail.split())),
    ]


def _jobs_cancel(args: argparse.Namespace) -> int:
    runs_dir = _runs_dir()
    try:
        run_dir = runs.find_run(runs_dir, args.run)
        manifest = runs.read_manifest(run_dir)
    except (LookupError, OSError, ValueError) as exc:
        console_err().print(f"[red]machine:[/] {escape(str(exc))}")
        return EXIT_USAGE
    if manifest.status != "running":
        console_out().print(f"{manifest.id} is not running (status {manifest.status})")
        return EXIT_OK
    if not runs.job_alive(manifest):  # the same liveness rule as `jobs list` (core.runs.effective_status)
        console_out().print(
            f"{manifest.id}: its process {manifest.pid} is gone (status {runs.effective_status(manifest)})"
        )
        return EXIT_FAILED
    stopped = runs.stop_job(run_dir, manifest, grace_s=CANCEL_GRACE_S)
    manifest = stopped.manifest
    if manifest.status == "running":
        console_err().print(
            f"[yellow]{manifest.id} is still running (pid {manifest.pid}): it could not be stopped[/]"
        )
        return EXIT_FAILED
    if stopped.killed:
        console_err().print(
            f"[yellow]{manifest.id} did not stop within {CANCEL_GRACE_S:.0f} s of SIGTERM: killed, "
            "and recorded as cancelled[/]"
        )
    last = f"; last checkpoint {manifest.last_checkpoint}" if manifest.last_checkpoint else ""
    console_out().print(f"{manifest.id}: {manifest.status}{escape(last)}")
    return EXIT_OK


def _jobs_prune(args: argparse.Namespace) -> int:
    from machine_lsp.core import prune

    if not args.failed and args.older_than is None:
        console_err().print("[red]machine:[/] jobs prune needs --failed and/or --older-than DAYS")
        return EXIT_USAGE
    if args.older_than is not None and args.older_than < 0:
        console_err().print("[red]machine:[/] --older-than takes a number of days (0 or more)")
        return EXIT_USAGE
    runs_dir = _runs_dir()
    try:
        decisions = prune.plan_prune(
            runs_dir, failed=args.failed, older_than_days=args.older_than, project_dirs=[Path.cwd()]
        )
        removed = [] if args.dry_run else prune.remove_runs(runs_dir, decisions)
    except OSError as exc:
        console_err().print(
            f"[red]machine:[/] store: {escape(str(runs_dir))}: {escape(exc.strerror or str(exc))}"
        )
        return 3
    if args.json:
        import msgspec

        data = {"dry_run": args.dry_run, "decisions": msgspec.to_builtins(decisions)}
        data["removed"] = [d.run_id for d in removed]
        print(json.dumps(data, indent=2))
        return EXIT_OK
    out = console_out()
    if not decisions:
        out.print("nothing to prune")
        return EXIT_OK
    table = Table(title="would remove" if args.dry_run else "prune", show_edge=False)
    table.add_column("id", no_wrap=True, overflow="ellipsis", min_width=12)
    table.add_column("status", no_wrap=True)
    table.add_column("action", no_wrap=True)
    table.add_column("why", overflow="fold", min_width=16)
    removed_ids = {d.run_id for d in removed}
    for d in decisions:
        if d.action == "keep":
            action = "[green]kept[/]"
        elif args.dry_run:
            action = "[yellow]would remove[/]"
        else:
            action = "[red]removed[/]" if d.run_id in removed_ids else "[green]kept[/]"
        table.add_row(escape(d.run_id), d.status, action, escape(d.reason))
    out.print(table)
    return EXIT_OK
