"""`machine jobs [list|cancel ID]`: the runs in .machine/runs with their status, and cancelling a running one."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import time
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from machine_lsp.cli.job_support import (
    CANCEL_GRACE_S,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    console_err,
    console_out,
)
from machine_lsp.core import runs


def register(sub: argparse._SubParsersAction, train_sub: argparse._SubParsersAction) -> None:
    jobs = sub.add_parser("jobs", help="list runs in .machine/runs, or cancel one")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", metavar="VERB")
    jobs.add_argument("--json", action="store_true", help="print the manifests as JSON")
    jobs.set_defaults(func=_jobs_list)
    jl = jobs_sub.add_parser("list", help="list runs with their status")
    jl.add_argument("--json", action="store_true", help="print the manifests as JSON")
    jl.set_defaults(func=_jobs_list)
    jc = jobs_sub.add_parser("cancel", help="stop a running job (SIGTERM; it records its last checkpoint)")
    jc.add_argument("run", metavar="ID", help="run id (or a unique prefix/suffix)")
    jc.set_defaults(func=_jobs_cancel)


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
        import msgspec

        data = []
        for run_dir, manifest in items:
            entry = (
                msgspec.to_builtins(manifest) if manifest else {"id": run_dir.name, "status": "unreadable"}
            )
            if manifest:
                entry["effective_status"] = runs.effective_status(manifest)
            data.append(entry)
        print(json.dumps(data, indent=2))
        return EXIT_OK
    out = console_out()
    if not items:
        out.print(f"no runs yet in {escape(str(_runs_dir()))}")
        return EXIT_OK
    table = Table(title=f"runs in {escape(str(_runs_dir()))}")
    for col in ("id", "job", "status", "engine", "steps", "last checkpoint / result"):
        table.add_column(col, overflow="fold")
    colors = {"done": "green", "running": "blue", "failed": "red", "cancelled": "yellow", "lost": "red"}
    for run_dir, m in items:
        if m is None:
            table.add_row(escape(run_dir.name), "?", "[red]unreadable[/]", "", "", "")
            continue
        status = runs.effective_status(m)
        detail = m.last_checkpoint or ""
        if m.error:
            detail = m.error
        elif m.result and "result_path" in m.result:
            detail = str(m.result["result_path"])
        table.add_row(
            escape(m.id),
            escape(m.job),
            f"[{colors.get(status, 'white')}]{status}[/]",
            m.engine or "",
            str(m.steps_done) if m.steps_done else "",
            escape(detail[:80]),
        )
    out.print(table)
    return EXIT_OK


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
    os.kill(manifest.pid, signal.SIGTERM)
    deadline = time.monotonic() + CANCEL_GRACE_S
    while time.monotonic() < deadline:
        time.sleep(0.2)
        with contextlib.suppress(Exception):
            manifest = runs.read_manifest(run_dir)
        if manifest.status != "running":
            break
    if manifest.status == "running":
        console_err().print(
            f"[yellow]{manifest.id} did not stop within {CANCEL_GRACE_S:.0f} s (pid {manifest.pid})[/]"
        )
        return EXIT_FAILED
    last = f"; last checkpoint {manifest.last_checkpoint}" if manifest.last_checkpoint else ""
    console_out().print(f"{manifest.id}: {manifest.status}{last}")
    return EXIT_OK
