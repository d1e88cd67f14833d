"""What the CLI's job verbs share: exit codes, consoles, usage errors, engine and job options, the cost question."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from machine_lsp.cli.consoles import console_err, console_out

__all__ = ["console_err", "console_out"]  # the verbs import the consoles from here too
from machine_lsp.scaffold.config import ConfigError, load_project_config

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130
CANCEL_GRACE_S = 15.0


class Usage(Exception):
    """Bad usage: printed as one line, exit code 2."""


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=["local", "tinker"], help="override the engine in machine.toml")
    p.add_argument("--model", metavar="M", help="override the base model")
    p.add_argument("--config", metavar="FILE", help="config file (default: ./machine.toml if present)")


def add_job_args(p: argparse.ArgumentParser) -> None:
    add_engine_args(p)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask before a paid (Tinker) run")
    p.add_argument("--json", action="store_true", help="print the raw job events instead of progress bars")


def show_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def cli_verb(fn: Any) -> Any:
    """A verb's `func`: its int exit code, or EXIT_USAGE with one line for a usage or config error."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except (Usage, ConfigError) as exc:
            console_err().print(f"[red]machine:[/] {escape(str(exc))}")
            return EXIT_USAGE

    return run


def resolved_engine(args: argparse.Namespace, checkpoint: str | None = None) -> str:
    if getattr(args, "engine", None):
        return args.engine
    if checkpoint and checkpoint.startswith("tinker://"):
        return "tinker"
    if checkpoint and checkpoint.startswith("local://"):
        return "local"
    config, _ = load_project_config(Path.cwd(), getattr(args, "config", None))
    return config.train.engine


def confirm_cost(args: argparse.Namespace, engine: str, verb: str, payload: dict[str, Any]) -> None:
    """Tinker runs cost money: say what will run and about how many tokens, and ask (or demand --yes)."""
    if engine != "tinker" or args.yes:
        return
    from machine_lsp.scaffold.estimate import estimate_job

    what = verb.replace("-", " ", 1)
    estimate = estimate_job(verb, Path.cwd(), {k: v for k, v in payload.items() if v is not None})
    detail = f" ({estimate.describe()})" if estimate else ""
    if not sys.stdin.isatty():
        raise Usage(
            f"{what} runs on Tinker and costs money{detail}: pass --yes to confirm (stdin is not a terminal)"
        )
    answer = input(f"{what} runs on Tinker and costs money{detail}. Continue? [y/N] ").strip().lower()
    if answer not in {"y", "yes"}:
        raise Usage("cancelled: nothing was started")


def check_file(path: str | None, what: str) -> None:
    if path and not Path(path).is_file():
        raise Usage(f"{path}: no such {what} file")
