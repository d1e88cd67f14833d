"""`machine sessions [--harness H] [--json]`: this project's agent sessions, newest first (core/sessions.py)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

import msgspec
from rich import box
from rich.markup import escape
from rich.table import Table

from machine_lsp.cli.consoles import console_err, console_out
from machine_lsp.core.agent_names import harness_name
from machine_lsp.core.sessions import HARNESSES, Homes, find_sessions, project_root


def register(sub: argparse._SubParsersAction, train_sub: argparse._SubParsersAction) -> None:
    sessions = sub.add_parser(
        "sessions", help="list this project's agent sessions (Pi, Claude Code, Codex, OpenCode, Letta Code)"
    )
    sessions.add_argument(
        "--harness",
        type=harness_name,
        choices=HARNESSES,
        help="only this agent's sessions (claude = claude-code)",
    )
    sessions.add_argument("--limit", type=int, default=20, metavar="N", help="show the N newest (default 20)")
    sessions.add_argument("--json", action="store_true", help="print the sessions as a JSON array")
    sessions.set_defaults(func=_sessions_command)


def _sessions_command(args: argparse.Namespace) -> int:
    project = project_root(Path.cwd())
    limit = max(args.limit, 0)
    homes = Homes()
    sessions = find_sessions(project, harness=args.harness, homes=homes, count_turns=limit)[:limit]
    for note in homes.notes:  # a source that could not be read: the others are still listed
        console_err(soft_wrap=True).print(f"[yellow]note:[/] {escape(note)}")
    if args.json:
        payload = [
            {
                "harness": s.harness,
                "id": s.id,
                "path": str(s.path),
                "cwd": s.cwd,
                "updated": datetime.fromtimestamp(s.updated).astimezone().isoformat(timespec="seconds"),
                "turns": s.turns,
                "first_prompt": s.first_prompt,
                **({"problem": s.problem} if s.problem else {}),
            }
            for s in sessions
        ]
        sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")
        return 0
    if not sessions:
        where = f"{args.harness} sessions" if args.harness else "agent sessions"
        console_err(soft_wrap=False).print(f"No {where} found for {escape(str(project))}.")
        return 0
    # Fits 80 columns: fixed narrow columns, no vertical rules; the prompt takes what is left, cut with "…".
    table = Table(
        title=f"Agent sessions in {escape(_short_path(project))}, newest first",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("harness", no_wrap=True, min_width=11)
    table.add_column("updated", no_wrap=True, min_width=11)
    table.add_column("turns", justify="right", no_wrap=True, min_width=5)
    table.add_column("id", no_wrap=True, overflow="ellipsis", min_width=10, max_width=10)
    table.add_column("first prompt", no_wrap=True, overflow="ellipsis", ratio=1)
    for s in sessions:
        turns = "?" if s.turns is None else str(s.turns)
        prompt = escape(s.first_prompt) if s.first_prompt else f"[dim]{escape(s.problem or '')}[/dim]"
        table.add_row(s.harness, _when(s.updated), turns, escape(s.id), prompt)
    console_out(soft_wrap=False).print(table)
    console_err(soft_wrap=False).print(
        "[dim]tag a session's last turn: machine good --from last | --from SESSION-ID[:TURN][/dim]"
    )
    return 0


def _when(timestamp: float) -> str:
    moment = datetime.fromtimestamp(timestamp)
    now = datetime.now()
    return moment.strftime("%H:%M") if moment.date() == now.date() else moment.strftime("%m-%d %H:%M")


def _short_path(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 44 else "…" + text[-43:]
