"""`machine train promote CHECKPOINT` / `machine train rollback` / `machine train promoted`: the promoted checkpoint,
set by hand on the record (.machine/promotions.jsonl, core.promotions) next to the gate's own promotions."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from machine_lsp.cli.job_support import cli_verb, console_err, console_out
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.exit_codes import EXIT_OK, UsageError


def register(verbs: VerbParsers) -> None:
    promote = verbs.parser("train promote", _promote)
    promote.add_argument("checkpoint", metavar="CHECKPOINT", help="local://RUN/NAME, tinker://..., or latest")
    rollback = verbs.parser("train rollback", _rollback)
    for recorded in (promote, rollback):
        recorded.add_argument("--reason", default="by hand", help="why (kept in the record)")
    verbs.parser("train promoted", _show)


def _machine_dir() -> Path:
    from machine_lsp.core.store import Store, StoreError

    try:
        return Store.open(Path.cwd()).root
    except StoreError as exc:
        raise UsageError(str(exc)) from None


def _checked(name: str, machine_dir: Path) -> str:
    """The address a name resolves to (`latest` -> its checkpoint); a local one must exist and load."""
    from machine_lsp.serve.checkpoints import CheckpointError, resolve

    try:
        target = resolve(name, machine_dir)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    if target.kind == "base":
        raise UsageError(
            "`base` is what nothing promoted means: use `machine train rollback` to go back to it"
        )
    return target.address


@cli_verb
def _promote(args: argparse.Namespace) -> int:
    from machine_lsp.core import promotions

    machine_dir = _machine_dir()
    address = _checked(args.checkpoint, machine_dir)
    try:
        event = promotions.promote(machine_dir, address, by="hand", reason=args.reason)
    except promotions.PromotionError as exc:
        raise UsageError(str(exc)) from None
    before = event.previous or "base"
    console_out().print(f"promoted {escape(address)} (was {escape(before)})", highlight=False)
    return EXIT_OK


@cli_verb
def _rollback(args: argparse.Namespace) -> int:
    from machine_lsp.core import promotions

    try:
        event = promotions.rollback(_machine_dir(), reason=args.reason)
    except promotions.PromotionError as exc:
        raise UsageError(str(exc)) from None
    console_out().print(
        f"rolled back {escape(event.previous or '')}: promoted is now {escape(event.checkpoint)}",
        highlight=False,
    )
    return EXIT_OK


@cli_verb
def _show(args: argparse.Namespace) -> int:
    from machine_lsp.core import promotions

    try:
        log = promotions.read_log(_machine_dir())
    except promotions.PromotionError as exc:
        raise UsageError(str(exc)) from None
    for warning in log.warnings:
        console_err().print(f"[yellow]warning:[/] {escape(warning)}")
    out = console_out()
    out.print(f"promoted: {escape(log.current() or 'base (nothing promoted)')}", highlight=False)
    for event in log.events[-10:]:
        out.print(
            f"  {event.at} {event.action} {escape(event.checkpoint)} by {event.by}: {escape(event.reason)}",
            highlight=False,
        )
    return EXIT_OK
