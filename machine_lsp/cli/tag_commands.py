"""`machine good|bad|tagged|data|export`: tag assistant turns into the Machine store, review and export them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from machine_lsp.cli import export_adapter_command
from machine_lsp.cli.conflicts_command import print_conflicts, records_for_export
from machine_lsp.cli.consoles import console_err, console_out, fit_columns
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.conflicts import claim_kind, standing
from machine_lsp.core.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_STORE, EXIT_USAGE
from machine_lsp.core.export import describe_copy, exchange_copies, export_kto, export_pairs, export_sft
from machine_lsp.core.safe_files import write_output
from machine_lsp.core.schema import TagRecord, encode, text_of
from machine_lsp.core.sessions import resolve_from, split_file_line
from machine_lsp.core.store import Store, StoreError, describe_os_error
from machine_lsp.core.tagging import TagRefused, tag
from machine_lsp.core.terminal_text import for_terminal
from machine_lsp.core.transcripts import TranscriptError, load_turns, turn_at
from machine_lsp.core.transcripts.base import display_path

# The CLI's exit-code rule (machine_lsp.cli.main): 0 ok, 1 findings/refused, 2 usage or unreadable input,
# 3 the store (or an output file) cannot be read or written.


class OutputError(Exception):
    """`--out` cannot be written: bad usage (a directory, a missing folder; exit 2) or an I/O failure (disk full,
    permission denied, a device that refuses the data; exit 3)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _out() -> Console:
    return console_out()


def _err() -> Console:
    return console_err()


def register(verbs: VerbParsers) -> None:
    good = verbs.parser("good", lambda args: _tag_command(args, "good"))
    good.add_argument("note", nargs="?", default="", metavar="NOTE", help="why it is good (optional)")
    good.add_argument(
        "--as", dest="rewrite", metavar="TEXT", help="store TEXT as the answer; keep the original"
    )
    _add_turn_arguments(good)

    bad = verbs.parser("bad", lambda args: _tag_command(args, "bad"))
    bad.add_argument("note", nargs="?", default="", metavar="NOTE", help="what is wrong with it (optional)")
    _add_turn_arguments(bad)

    tagged = verbs.parser("tagged", _tagged_command)
    tagged.add_argument("--verdict", choices=["good", "bad"], help="only this verdict")
    tagged.add_argument("--json", action="store_true", help="print the records as a JSON array")
    tagged.add_argument("--conflicts", action="store_true", help="only turns tagged two contradicting ways")
    tagged.add_argument(
        "--history",
        action="store_true",
        help="every record, the untagged and replaced ones too (store order)",
    )

    data = verbs.parser("data", _data_command)
    data.add_argument("--json", action="store_true", help="print path and counts as JSON")

    export = verbs.parser("export", _export_command)
    export.add_argument(
        "format",
        choices=["sft", "pairs", "kto", "adapter"],
        help="sft: good rows as chat JSONL; pairs: DPO comparisons (rewrites, good/bad on a prompt); "
        "kto: every good and bad tag, unpaired; adapter: a checkpoint for other runtimes",
    )
    export.add_argument(
        "--out", type=Path, metavar="FILE|DIR", help="write here instead of stdout (adapter: DIR)"
    )
    export_adapter_command.add_arguments(export)


def _add_turn_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="FILE[:LINE]|last|SESSION[:TURN]",
        help="chat JSONL or agent session log (LINE picks the turn, default the last), `last` (the newest agent "
        "session's last turn) or a session id from `machine sessions` (TURN counts from 1)",
    )
    parser.add_argument("--trace", action="store_true", help="keep the turn's tool calls and results")
    parser.add_argument("--thinking", action="store_true", help="keep the model's thinking (session logs)")


def guard(func: Callable[[], int]) -> int:
    """Run a command body, turning the errors people cause into one clear line and an exit code."""
    try:
        return func()
    except TranscriptError as exc:
        _err().print(f"[red]machine:[/red] {escape(for_terminal(str(exc)))}")
        return EXIT_USAGE
    except StoreError as exc:
        _err().print(f"[red]machine:[/red] store: {escape(str(exc))}")
        return EXIT_STORE
    except OutputError as exc:
        _err().print(f"[red]machine:[/red] {escape(for_terminal(str(exc)))}")
        return exc.code
    except TagRefused as exc:
        _err().print(f"[red]machine:[/red] {escape(for_terminal(str(exc)))}")
        return EXIT_FAILED


def _print_store_warnings(store: Store) -> None:
    for warning in store.warnings:
        _err().print(f"[yellow]warning:[/yellow] {escape(for_terminal(warning))}")


def _tag_command(args: argparse.Namespace, verdict: str) -> int:
    def body() -> int:
        turn = resolve_from(args.source, Path.cwd(), trace=args.trace, thinking=args.thinking)
        if turn is None:  # not `last` nor a session id: a file
            path, line = split_file_line(args.source, Path.cwd())
            turn = turn_at(load_turns(path, trace=args.trace, thinking=args.thinking), line)
        store = Store.open()
        try:
            result = tag(
                store, turn, verdict, note=args.note, rewrite=getattr(args, "rewrite", None), trace=args.trace
            )
        except TagRefused as exc:
            raise TagRefused(f"{display_path(turn.source.uri)}:{turn.end_line}: {exc}") from None
        _print_store_warnings(store)
        err = _err()
        for warning in turn.warnings:
            err.print(f"[yellow]warning:[/yellow] {escape(for_terminal(warning))}")
        where = for_terminal(f"{display_path(turn.source.uri)}:{turn.end_line}")
        record = result.record
        out = _out()
        if result.duplicate:
            out.print(
                f"Already tagged {verdict}: {escape(where)} is record {record.id} "
                f"(tagged {escape(record.created_at)}); nothing added (a new note: machine retag {record.id} "
                "--note …)."
            )
            return EXIT_OK
        colour = "green" if verdict == "good" else "red"
        extras = []
        if record.original is not None:
            extras.append("rewritten")
        if record.trace:
            extras.append("with tool trace")
        suffix = f" ({', '.join(extras)})" if extras else ""
        replaces = (
            f" (replaces record {record.supersedes}, the same tag without this note)"
            if record.supersedes
            else ""
        )
        out.print(
            f"[{colour}]Tagged {verdict}[/{colour}]{escape(suffix)}: {escape(where)} -> record {record.id} "
            f"in {escape(str(store.tagged_path))}{replaces}"
        )
        warn_overrides(result.overrides, record, err)
        note_copies(result.copies, record, err)
        return EXIT_OK

    return guard(body)


def warn_overrides(overrides: list[TagRecord], record: TagRecord, err: Console) -> None:
    """Say that `record` contradicts earlier tags of its turn, and which one trains."""
    for earlier in overrides:
        err.print(
            f"[yellow]warning:[/yellow] this contradicts record {earlier.id} ({claim_kind(earlier)}, "
            f"{escape(earlier.created_at)}) on the same turn; record {record.id} ({claim_kind(record)}) wins "
            f"(the last tag of a turn trains; `machine untag {record.id}` takes it back)"
        )


def note_copies(copies: list[tuple[TagRecord, TagRecord]], record: TagRecord, err: Console) -> None:
    """Say that `record`'s exchange is tagged in another copy too, and which record trains it."""
    for other, keeper in copies:
        dropped = record if keeper.id != record.id else other
        err.print(
            f"[yellow]note:[/yellow] record {other.id} tags the same exchange from another copy "
            f"({escape(for_terminal(other.source.harness or other.source.uri))}); the export trains it once, "
            f"from record {keeper.id} (it holds the system prompt the model saw), not record {dropped.id}"
        )


def _short(text: str, width: int = 80) -> str:
    """One line of log-derived text for a table cell: whitespace flattened, control characters escaped."""
    flat = for_terminal(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _tagged_command(args: argparse.Namespace) -> int:
    def body() -> int:
        store = Store.open()
        if args.conflicts:
            return print_conflicts(store, args.json)
        stored = store.records()
        shown = stored if args.history else standing(stored)
        records = [r for r in shown if args.verdict is None or r.verdict == args.verdict]
        _print_store_warnings(store)
        if args.json:
            sys.stdout.write(encode(records).decode() + "\n")
            return EXIT_OK
        if not records:
            _err().print(f"No tagged turns yet in {escape(str(store.tagged_path))}.")
            return EXIT_OK
        out = _out()
        rows = [_row_cells(record) for record in records]
        table = Table(title=f"Tagged turns ({len(records)})")
        # One line per turn, cut with an ellipsis to fit the terminal; `--json` has the texts whole.
        widths = fit_columns(out.width, rows, TAGGED_COLUMNS, DROP_FIRST)
        for (name, _, _), width in zip(TAGGED_COLUMNS, widths, strict=True):
            if width:
                style = "dim" if name == "id" else None
                table.add_column(name, no_wrap=True, overflow="ellipsis", width=width, style=style)
        for cells in rows:
            table.add_row(*(cell for cell, width in zip(cells, widths, strict=True) if width))
        _out().print(table)
        return EXIT_OK

    return guard(body)


# (name, least width, most width): the flexible texts share what the fixed ones leave, never below their least.
TAGGED_COLUMNS = (
    ("id", 16, 16),
    ("verdict", 4, 22),
    ("prompt", 8, 40),
    ("answer", 12, 80),
    ("note", 8, 30),
    ("source", 10, 28),
)
# On a terminal too narrow for every column at its least width, these go first (then `--json` has them).
DROP_FIRST = ("note", "source", "prompt")


def _row_cells(record: TagRecord) -> list[Any]:
    verdict = "[green]good[/green]" if record.verdict == "good" else "[red]bad[/red]"
    if record.untag:
        verdict = "[dim]untag[/dim]"
    flags = [flag for flag, on in (("rewrite", record.original is not None), ("trace", record.trace)) if on]
    if record.supersedes:
        flags.append(f"{'untags' if record.untag else 'replaces'} {record.supersedes[:8]}")
    if flags:
        verdict += f" [dim]({', '.join(flags)})[/dim]"
    prompt = next((text_of(m) for m in reversed(record.messages[:-1]) if m.role == "user"), "")
    answer = text_of(record.messages[-1]) if record.messages else ""
    source = display_path(record.source.uri)
    source = Path(source).name + (f":{record.source.line}" if record.source.line else "")
    return [
        record.id,
        verdict,
        escape(_short(prompt, 200)),
        escape(_short(answer, 200)),
        escape(_short(record.note, 200)),
        escape(for_terminal(source)),
    ]


def _data_command(args: argparse.Namespace) -> int:
    def body() -> int:
        store = Store.open()
        counts = store.counts()
        torn = store.torn_files()
        if args.json:
            payload = {
                "store": str(store.root),
                "tagged_path": str(store.tagged_path),
                "exists": store.tagged_path.exists(),
                "counts": msgspec.to_builtins(counts),
                "torn_files": [str(path) for path in torn],
                "warnings": store.warnings,
            }
            sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")
            return EXIT_OK
        out = _out()
        out.print(f"[bold]Machine store[/bold] {escape(str(store.root))}")
        if not store.tagged_path.exists():
            out.print("  nothing tagged yet (tag a turn with `machine good --from FILE[:LINE]`)")
        out.print(
            f"  tagged: {counts.total}   [green]good {counts.good}[/green]   [red]bad {counts.bad}[/red]   "
            f"rewritten {counts.rewritten}   traced {counts.traced}"
        )
        _print_store_warnings(store)
        for path in torn:
            _err().print(
                f"[yellow]warning:[/yellow] {escape(path.name)} holds a torn line from an interrupted write "
                "(kept for you to inspect; delete it when done)"
            )
        return EXIT_OK

    return guard(body)


def _export_command(args: argparse.Namespace) -> int:
    if args.format == "adapter" or args.checkpoint is not None:
        return export_adapter_command.run(args)

    def body() -> int:
        store = Store.open()
        records = records_for_export(store.records(), _err())  # the last tag of a turn wins
        _print_store_warnings(store)
        if args.format == "sft":
            by_id = {record.id: record for record in records}
            for dropped, kept in exchange_copies(r for r in records if r.verdict == "good").items():
                _err().print(
                    f"[yellow]note:[/yellow] {escape(for_terminal(describe_copy(by_id[dropped], kept)))}"
                )
            lines = [encode(row) for row in export_sft(records)]
            what = "training rows (good tags, rewrites applied)"
        elif args.format == "pairs":
            lines = [msgspec.json.encode(pair) for pair in export_pairs(records)]
            what = "preference pairs (tinker-cookbook comparisons, chosen = A)"
        else:
            lines = [msgspec.json.encode(row) for row in export_kto(records)]
            what = "KTO examples (good: desirable, bad: undesirable)"
        payload = b"".join(line + b"\n" for line in lines)
        if args.out is None:
            try:
                sys.stdout.buffer.write(payload)
                sys.stdout.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:  # stdout is /dev/full, a full disk, ...
                raise OutputError(
                    f"cannot write the export to stdout: {describe_os_error(exc)}", EXIT_STORE
                ) from None
        else:
            _write_atomically(args.out, payload)
            _err().print(f"Wrote {len(lines)} {what} to {escape(str(args.out))}")
        if not lines:
            _err().print(f"[yellow]note:[/yellow] no {what} to export yet")
        return EXIT_OK

    return guard(body)


def _write_atomically(path: Path, payload: bytes) -> None:
    """Write via a temporary file and rename, so a crash never leaves half an export behind; a symlink is written
    through and a device or FIFO written into (core.safe_files.write_output)."""
    try:
        write_output(path, payload)
    except IsADirectoryError:
        raise OutputError(f"--out {path} is a directory", EXIT_USAGE) from None
    except FileNotFoundError:
        raise OutputError(f"--out {path}: the folder {path.parent} does not exist", EXIT_USAGE) from None
    except OSError as exc:
        raise OutputError(f"cannot write --out {path}: {describe_os_error(exc)}", EXIT_STORE) from None
