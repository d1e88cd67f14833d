"""What the CLI's job verbs share: exit codes, consoles, usage errors, engine and job options, the cost question."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from machine_lsp.cli.consoles import console_err, console_out
from machine_lsp.core.exit_codes import EXIT_USAGE, UsageError

__all__ = ["console_err", "console_out"]  # the verbs import the consoles from here too
from machine_lsp.engines.registry import ENGINE_NAMES, engine_for_address
from machine_lsp.scaffold.config import ConfigError, load_project_config

# How long `jobs cancel` and Ctrl-C wait for a job to record its own end before killing it: a step in
# progress finishes first, and on a loaded 2-core machine one step can take tens of seconds.
CANCEL_GRACE_S = 30.0


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=ENGINE_NAMES, help="override the engine in machine.toml")
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
        except (UsageError, ConfigError) as exc:
            console_err().print(f"[red]machine:[/] {escape(str(exc))}")
            return EXIT_USAGE

    return run


def resolved_engine(args: argparse.Namespace, checkpoint: str | None = None) -> str:
    if getattr(args, "engine", None):
        return args.engine
    if engine := engine_for_address(checkpoint):
        return engine
    config, _ = load_project_config(Path.cwd(), getattr(args, "config", None))
    return config.train.engine


def confirm_cost(args: argparse.Namespace, engine: str, verb: str, payload: dict[str, Any]) -> None:
    """Tinker runs cost money: say what will run and about how many tokens, and ask (or demand --yes). A server on
    this machine (`machine tinker serve`, a loopback URL) costs nothing: no question."""
    if engine != "tinker" or tinker_is_local():
        return
    from machine_lsp.scaffold.estimate import estimate_job
    from machine_lsp.scaffold.pricing import plan_price

    what = verb.replace("-", " ", 1)
    job_args = {k: v for k, v in payload.items() if v is not None}
    price, refusal = plan_price(verb, Path.cwd(), job_args)
    if refusal is not None:  # --yes does not lift a budget
        raise UsageError(f"{what} not started: {refusal}")
    if args.yes:
        return
    estimate = estimate_job(verb, Path.cwd(), job_args)
    detail = f" ({estimate.describe()}{'; ' + price.describe() if price else ''})" if estimate else ""
    ask(
        f"{what} runs on Tinker and costs money{detail}. Continue?",
        f"{what} runs on Tinker and costs money{detail}: pass --yes to confirm (stdin is not a terminal)",
    )


def tinker_is_local() -> bool:
    """The Tinker server a job here would use is on this machine (`scaffold.config.project_tinker_url`)."""
    from machine_lsp.scaffold.config import tinker_costs_money

    return not tinker_costs_money(Path.cwd())


def ask(question: str, refusal: str) -> None:
    """The one asking rule of the CLI: with a terminal on stdin, ask `question` [y/N] (anything but y/yes stops);
    without one, refuse with `refusal`, which says how to go ahead (usage error, exit 2). Nothing has started."""
    if not sys.stdin.isatty():
        raise UsageError(refusal)
    try:
        answer = input(f"{question} [y/N] ").strip().lower()
    except EOFError:
        answer = ""
    if answer not in {"y", "yes"}:
        raise UsageError("cancelled: nothing was started")


def confirm_defaults(args: argparse.Namespace, verb: str, payload: dict[str, Any]) -> None:
    """`train run` with no machine.toml: say which defaults it will train with, and ask (or demand --yes)."""
    if args.yes:
        return
    from machine_lsp.scaffold.config import apply_overrides, find_config
    from machine_lsp.scaffold.estimate import estimate_job

    if find_config(Path.cwd(), args.config) is not None:
        return
    train = {k: v for k, v in payload.items() if k not in ("config", "resume") and v is not None}
    cfg = apply_overrides(load_project_config(Path.cwd(), None)[0], train).train
    estimate = estimate_job(verb, Path.cwd(), {k: v for k, v in payload.items() if v is not None})
    data = (
        f"{estimate.rows} rows from {estimate.source}" if estimate else (cfg.data or "the store's good rows")
    )
    batch = cfg.batch_size
    if estimate and estimate.size:
        length = f"{estimate.size.epochs} epochs, {estimate.size.steps} steps"
        batch = estimate.size.batch_size  # a scoped run grows it (core.run_plan)
    elif cfg.epochs is None and cfg.steps is None:
        length = "epochs sized from the rows"
    else:
        length = f"{cfg.epochs or 1} epochs" + (f" (at most {cfg.steps} steps)" if cfg.steps else "")
    what = (
        f"there is no machine.toml here, so {verb.replace('-', ' ', 1)} uses the defaults: engine {cfg.engine}, "
        f"model {cfg.resolved_model()}, data {data}, {length}, "
        f"batch size {batch}, learning rate {cfg.resolved_lr():g}"
    )
    ask(
        f"{what}. Train with these?",
        f"{what}: pass --yes to train with them, or run `machine train sft` first to write machine.toml "
        "(stdin is not a terminal)",
    )


def show_plan(args: argparse.Namespace, verb: str, payload: dict[str, Any]) -> None:
    """Print the run a training verb is about to start (rows, epochs, steps, tokens, time; the floor warning),
    sized by the one rule (core.run_plan) the job and the editor's confirmation use too."""
    from machine_lsp.scaffold.estimate import estimate_job

    estimate = estimate_job(verb, Path.cwd(), {k: v for k, v in payload.items() if v is not None})
    if estimate is None:
        return  # the job reports the precise reason it cannot read its data
    console = console_err() if getattr(args, "json", False) else console_out()
    console.print(f"plan: {escape(estimate.describe())}", highlight=False)


def check_file(path: str | None, what: str) -> None:
    if path and not Path(path).is_file():
        raise UsageError(f"{path}: no such {what} file")
