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
from rich.text import Text

from machine_lsp.cli.consoles import console_err, console_out
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.agent_names import harness_name
from machine_lsp.core.sessions import HARNESSES, Homes, Session, find_sessions, project_root, unique_prefixes
from machine_lsp.core.terminal_text import for_terminal


def register(verbs: VerbParsers) -> None:
    sessions = verbs.parser("sessions", _sessions_command)
    sessions.add_argument(
        "--harness",
        type=harness_name,
        choices=HARNESSES,
        help="only this agent's sessions (claude = claude-code)",
    )
    sessions.add_argument("--limit", type=int, default=20, metavar="N", help="show the N newest (default 20)")
    sessions.add_argument("--json", action="store_true", help="print the sessions as a JSON array")


def _sessions_command(args: argparse.Namespace) -> int:
    project = project_root(Path.cwd())
    limit = max(args.limit, 0)
    homes = Homes()
    found = find_sessions(project, harness=args.harness, homes=homes, count_turns=limit)
    sessions = found[:limit]
    for note in homes.notes:  # a source that could not be read: the others are still listed
        console_err(soft_wrap=True).print(f"[yellow]note:[/] {escape(for_terminal(note))}")
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
    # Prefixes unique among every session of the project, as `--from` resolves them (not only the listed ones).
    everyone = found if args.harness is None else find_sessions(project, count_turns=0)
    out = console_out(soft_wrap=False)
    title = f"Agent sessions in {_short_path(project)}"
    out.print(_sessions_table(sessions, find_all=[s.id for s in everyone], title=title, width=out.width))
    console_err(soft_wrap=False).print(
        "[dim]tag a session's last turn: machine good --from last | --from SESSION-ID[:TURN][/dim]"
    )
    return 0


PROMPT_MIN = 12  # the first prompt's column is never narrower


def _sessions_table(sessions: list[Session], find_all: list[str], title: str, width: int) -> Table:
    """One line per session that fits the terminal: every column but the prompt as wide as its content (never
    cut, never dropped), the prompt takes what is left and is cut with "…". Ids are the shortest prefix that
    names one session among all of this project's (what `--from` takes)."""
    prefixes = unique_prefixes(find_all)
    rows = []
    for s in sessions:
        turns = "?" if s.turns is None else str(s.turns)
        prompt = escape(for_terminal(s.first_prompt)) if s.first_prompt else ""
        if not prompt:
            prompt = f"[dim]{escape(for_terminal(s.problem or ''))}[/dim]"
        rows.append((s.harness, _when(s.updated), turns, escape(for_terminal(prefixes[s.id])), prompt))
    table = Table(
        title=escape(for_terminal(title)) + ", newest first",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
    )
    names = ("harness", "updated", "turns", "id")
    widths = [
        max(len(name), *(Text.from_markup(row[i]).cell_len for row in rows)) for i, name in enumerate(names)
    ]
    # Rich shrinks every column when the natural widths overflow (the turns column went first): give the prompt
    # exactly what is left (no outer edge; between two columns a padding space, the rule's space, a padding space).
    # When that is under PROMPT_MIN (ids that must be long to tell sessions apart), the id column gives the rest
    # and is cut with "…"; the harness, updated and turns columns keep their width.
    left = width - sum(widths) - 3 * len(names)
    widths[names.index("id")] -= max(PROMPT_MIN - left, 0)
    for name, column_width in zip(names, widths, strict=True):
        table.add_column(
            name,
            no_wrap=True,
            width=max(column_width, 2),
            overflow="ellipsis",
            justify="right" if name == "turns" else "left",
        )
    table.add_column("first prompt", no_wrap=True, overflow="ellipsis", width=max(left, PROMPT_MIN))
    for row in rows:
        table.add_row(*row)
    return table


def _when(timestamp: float) -> str:
    moment = datetime.fromtimestamp(timestamp)
    now = datetime.now()
    return moment.strftime("%H:%M") if moment.date() == now.date() else moment.strftime("%m-%d %H:%M")


def _short_path(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 44 else "…" + text[-43:]
