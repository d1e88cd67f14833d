"""`machine tagged --conflicts` and the export's note on what it left out (rules: core/conflicts.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from machine_lsp.cli.consoles import console_out
from machine_lsp.core.conflicts import describe_drop, resolve
from machine_lsp.core.schema import TagRecord, text_of
from machine_lsp.core.store import Store
from machine_lsp.core.terminal_text import for_terminal


def print_conflicts(store: Store, as_json: bool) -> int:
    """List the turns the store contradicts itself on; exit 0 (a contradiction is data to review, not an error)."""
    resolution = resolve(store.records())
    if as_json:
        payload = [
            {
                "kinds": conflict.kinds,
                "kept": [record.id for record in conflict.kept],
                "dropped": [record.id for record in conflict.dropped],
                "records": msgspec.to_builtins(conflict.records),
            }
            for conflict in resolution.conflicts
        ]
        sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")
        return 0
    out = console_out()
    if not resolution.conflicts:
        out.print("No contradictions: no turn is tagged two ways.")
        return 0
    table = Table(title=f"Contradicting tags ({len(resolution.conflicts)} turns; the last tag wins)")
    table.add_column("turn", no_wrap=True, overflow="ellipsis", max_width=28)
    table.add_column("record", style="dim", no_wrap=True)
    table.add_column("tag", no_wrap=True)
    table.add_column("at", no_wrap=True)
    table.add_column("export", no_wrap=True)
    for conflict in resolution.conflicts:
        prompt = _prompt(conflict.records[0])
        for index, record in enumerate(conflict.records):
            label = escape(prompt) if index == 0 else ""
            if index == 0 and conflict.kinds:
                label += f"\n[dim]{escape(', '.join(conflict.kinds))}[/dim]"
            used = "[green]used[/green]" if record in conflict.kept else "[yellow]left out[/yellow]"
            table.add_row(label, record.id, _claim(record), escape(record.created_at), used)
    out.print(table)
    return 0


def records_for_export(records: Sequence[TagRecord], err: Console) -> list[TagRecord]:
    """The records an export uses (the last tag of a turn wins); says on stderr which it left out."""
    resolution = resolve(records)
    for conflict in resolution.conflicts:
        for record in conflict.dropped:
            err.print(f"[yellow]note:[/yellow] {escape(describe_drop(conflict, record))}")
    if resolution.conflicts:
        err.print("[dim]see them all: machine tagged --conflicts (the store keeps every tag)[/dim]")
    return resolution.kept


def _claim(record: TagRecord) -> str:
    if record.verdict == "bad":
        return "[red]bad[/red]"
    return "[green]good[/green] (rewrite)" if record.original is not None else "[green]good[/green]"


def _prompt(record: TagRecord) -> str:
    text = next((text_of(m) for m in reversed(record.messages[:-1]) if m.role == "user"), "")
    flat = for_terminal(" ".join(text.split()))
    return flat if len(flat) <= 28 else flat[:27] + "…"
