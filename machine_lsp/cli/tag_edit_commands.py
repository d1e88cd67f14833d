"""`machine untag ID` and `machine retag ID --note … | --as … | --verdict good|bad`: edit a tag by appending a
record that supersedes it (core/tag_edits.py)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from machine_lsp.cli.consoles import console_err, console_out
from machine_lsp.cli.tag_commands import guard, warn_overrides
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.conflicts import claim_kind, resolve, turn_key
from machine_lsp.core.exit_codes import EXIT_OK
from machine_lsp.core.schema import TagRecord
from machine_lsp.core.store import Store
from machine_lsp.core.tag_edits import retag, untag
from machine_lsp.core.terminal_text import for_terminal


def register(verbs: VerbParsers) -> None:
    untag_parser = verbs.parser("untag", _untag_command)
    untag_parser.add_argument(
        "record", metavar="ID", help="the record's id or a unique prefix (`machine tagged`)"
    )
    untag_parser.add_argument("note", nargs="?", default="", metavar="NOTE", help="why (optional)")

    retag_parser = verbs.parser("retag", _retag_command)
    retag_parser.add_argument(
        "record", metavar="ID", help="the record's id or a unique prefix (`machine tagged`)"
    )
    retag_parser.add_argument("--note", help="the new note (empty: none)")
    retag_parser.add_argument(
        "--as", dest="rewrite", metavar="TEXT", help="a new rewrite of the model's answer"
    )
    retag_parser.add_argument("--verdict", choices=["good", "bad"], help="the other verdict")


def _untag_command(args: argparse.Namespace) -> int:
    def body() -> int:
        store = Store.open()
        record = untag(store, args.record, note=args.note).record
        console_out().print(
            f"Untagged record {record.supersedes} -> record {record.id} in {escape(str(store.tagged_path))} "
            "(the history is kept: machine tagged --history)"
        )
        _say_what_stands(store, record, console_err())
        return EXIT_OK

    return guard(body)


def _retag_command(args: argparse.Namespace) -> int:
    def body() -> int:
        store = Store.open()
        result = retag(store, args.record, note=args.note, rewrite=args.rewrite, verdict=args.verdict)
        record = result.record
        console_out().print(
            f"Retagged record {record.supersedes} as {claim_kind(record)} -> record {record.id} "
            f"in {escape(str(store.tagged_path))}"
        )
        warn_overrides(result.overrides, record, console_err())
        return EXIT_OK

    return guard(body)


def _say_what_stands(store: Store, untagged: TagRecord, err: Console) -> None:
    """After an untag: another tag of the same turn may train now (the one the untagged record outvoted)."""
    key = turn_key(untagged)
    for record in resolve(store.records()).kept:
        if turn_key(record) == key:
            err.print(
                f"[dim]note: record {record.id} ({claim_kind(record)}, {escape(for_terminal(record.created_at))}) "
                "tags the same turn and now stands[/dim]"
            )
