"""`machine train sft|smoke|run`: the SFT scaffold, and the smoke and training runs as jobs with progress bars.

Runs on hosted Tinker cost money: without a terminal on stdin they need `--yes`; with one, they ask first (a local
server, `machine tinker serve`, costs nothing and is not asked about). `train run`
with no machine.toml says which defaults it would use and asks the same way (job_support.ask: one asking rule).
Eval verbs are in eval_commands, `machine jobs` in jobs_commands, the job rendering in job_render.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec
from rich.markup import escape

from machine_lsp.cli.job_render import run_job
from machine_lsp.cli.job_support import (
    add_job_args,
    cli_verb,
    confirm_cost,
    confirm_defaults,
    console_out,
    resolved_engine,
    show_plan,
)
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.exit_codes import EXIT_OK, UsageError
from machine_lsp.engines.registry import ENGINE_NAMES
from machine_lsp.scaffold.config import (
    MachineConfig,
    TinkerSection,
    apply_overrides,
    configured_base_url,
)


def register(verbs: VerbParsers) -> None:
    _register_sft(verbs)
    _register_smoke(verbs)
    _register_run(verbs)
    _register_retrain(verbs)


def _register_sft(verbs: VerbParsers) -> None:
    sft = verbs.parser("train sft", _sft)
    sft.add_argument(
        "file", nargs="?", metavar="FILE", help="training JSONL (default: the store's good rows)"
    )
    sft.add_argument("--engine", choices=ENGINE_NAMES, default="local")
    sft.add_argument("--model", metavar="M", help="base model (default: the engine's)")
    sft.add_argument("--epochs", type=int, metavar="N")
    sft.add_argument("--steps", type=int, metavar="N", help="cap on optimizer steps")
    sft.add_argument("--lr", type=float, metavar="X", help="learning rate")
    sft.add_argument("--rank", type=int, metavar="R", help="LoRA rank")
    sft.add_argument("--batch-size", type=int, metavar="B")
    sft.add_argument("--save-every", type=int, metavar="N", help="checkpoint every N steps (0: final only)")
    sft.add_argument("--eval-data", metavar="FILE", help="held-out eval JSONL for [eval] data")
    _add_objective_args(sft)
    sft.add_argument("--force", action="store_true", help="overwrite train_sft.py / machine.toml")


def _register_smoke(verbs: VerbParsers) -> None:
    smoke = verbs.parser("train smoke", _smoke)
    smoke.add_argument(
        "--data", metavar="FILE", help="training JSONL (default: machine.toml, else the store)"
    )
    _add_objective_args(smoke)
    add_job_args(smoke)


def _add_objective_args(parser: argparse.ArgumentParser) -> None:
    from machine_lsp.engines.objectives import REGISTRY, RUN_OBJECTIVES, STAGED_SUMMARY

    summaries = {name: spec.summary for name, spec in REGISTRY.items()} | STAGED_SUMMARY
    parser.add_argument(
        "--objective",
        choices=RUN_OBJECTIVES,
        help="the loss (machine.toml [train] objective): "
        + "; ".join(f"{name}: {summary}" for name, summary in summaries.items()),
    )
    parser.add_argument("--beta", type=float, metavar="X", help="dpo/kto: distance to the reference (0.1)")
    parser.add_argument(
        "--pairs", metavar="FILE", help="sft+dpo: the dpo stage's pairs file (default: the store's pairs)"
    )
    parser.add_argument(
        "--rpo-alpha", type=float, metavar="X", help="dpo: + X * NLL of the chosen answers (RPO; default 0)"
    )
    parser.add_argument(
        "--dpo-lr", type=float, metavar="X", help="sft+dpo: the dpo stage's learning rate (default lr / 10)"
    )


def _register_run(verbs: VerbParsers) -> None:
    run = verbs.parser("train run", _run)
    run.add_argument("--resume", metavar="RUN", help="continue a run (id, id prefix, or checkpoint address)")
    run.add_argument("--data", metavar="FILE", help="training JSONL (default: machine.toml, else the store)")
    run.add_argument("--steps", type=int, metavar="N", help="override the step cap")
    run.add_argument("--epochs", type=int, metavar="N")
    run.add_argument("--lr", type=float, metavar="X")
    run.add_argument("--batch-size", type=int, metavar="B")
    run.add_argument("--save-every", type=int, metavar="N")
    _add_objective_args(run)
    add_job_args(run)


def _register_retrain(verbs: VerbParsers) -> None:
    retrain = verbs.parser("retrain", _retrain)
    retrain.add_argument("--steps", type=int, metavar="N", help="override the step cap")
    retrain.add_argument("--epochs", type=int, metavar="N")
    retrain.add_argument("--lr", type=float, metavar="X")
    retrain.add_argument("--save-every", type=int, metavar="N")
    retrain.add_argument(
        "--scope", choices=("auto", "off"), help="anchor rows (machine.toml [train] scope; default auto)"
    )
    retrain.add_argument("--anchor-ratio", type=float, metavar="X", help="anchors per tagged row (0.5)")
    add_job_args(retrain)


@cli_verb
def _sft(args: argparse.Namespace) -> int:
    from machine_lsp.scaffold.writer import ScaffoldExists, write_train_scaffold

    cwd = Path.cwd()
    data = _sft_data_file(args.file, cwd)
    if args.eval_data and not (cwd / args.eval_data).is_file():
        raise UsageError(f"{args.eval_data}: no such file")
    config = apply_overrides(
        MachineConfig(), _sft_train_section(args, data), {"data": args.eval_data or None}
    )
    served = configured_base_url(cwd)  # `machine tinker serve` wrote it: a rewritten machine.toml keeps it
    if served:
        config = msgspec.structs.replace(config, tinker=TinkerSection(base_url=served))
    command = (
        "machine train sft " + " ".join(sys.argv[3:])
        if sys.argv[1:3] == ["train", "sft"]
        else "machine train sft"
    )
    try:
        written = write_train_scaffold(cwd, config, command=command.strip(), force=args.force)
    except ScaffoldExists as exc:
        raise UsageError(str(exc)) from None
    _print_sft_written(args, config, written, data, served)
    return EXIT_OK


def _sft_data_file(file: str | None, cwd: Path) -> str | None:
    """The training file as machine.toml will name it: relative stays relative, absolute stays absolute."""
    if not file:
        return None
    path = Path(file)
    full = path if path.is_absolute() else cwd / path
    if not full.is_file():
        raise UsageError(f"{file}: no such file" if not full.exists() else f"{file}: not a file")
    return str(path) if not path.is_absolute() else str(full)


def _sft_train_section(args: argparse.Namespace, data: str | None) -> dict[str, Any]:
    return {
        "engine": args.engine,
        "model": args.model,
        "data": data,
        "epochs": args.epochs,
        "steps": args.steps,
        "learning_rate": args.lr,
        "rank": args.rank,
        "batch_size": args.batch_size,
        "save_every": args.save_every,
        "objective": args.objective,
        "beta": args.beta,
        "pairs": args.pairs,
        "rpo_alpha": args.rpo_alpha,
        "dpo_learning_rate": args.dpo_lr,
    }


def _print_sft_written(
    args: argparse.Namespace, config: MachineConfig, written: list[Path], data: str | None, served: str | None
) -> None:
    out = console_out()
    for path in written:
        out.print(f"wrote [bold]{escape(path.name)}[/]")
    source = data or "the store's good rows"
    model = config.train.resolved_model()
    if served and config.train.engine == "tinker" and not args.model:
        model = f"the one served at {served} (else {model})"
    out.print(
        f"engine {config.train.engine}, model {escape(model)}, data {escape(source)}\n"
        f"next: [bold]python train_sft.py --dry-run[/], [bold]machine train smoke[/], [bold]machine train run[/]"
    )


def _train_payload(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "config": args.config,
        "engine": args.engine,
        "model": args.model,
        "data": getattr(args, "data", None),
        "steps": getattr(args, "steps", None),
        "epochs": getattr(args, "epochs", None),
        "learning_rate": getattr(args, "lr", None),
        "batch_size": getattr(args, "batch_size", None),
        "save_every": getattr(args, "save_every", None),
        "resume": getattr(args, "resume", None),
        "objective": getattr(args, "objective", None),
        "beta": getattr(args, "beta", None),
        "pairs": getattr(args, "pairs", None),
        "rpo_alpha": getattr(args, "rpo_alpha", None),
        "dpo_learning_rate": getattr(args, "dpo_lr", None),
    }


def _retrain_payload(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "config": args.config,
        "engine": args.engine,
        "model": args.model,
        "steps": args.steps,
        "epochs": args.epochs,
        "learning_rate": args.lr,
        "save_every": args.save_every,
        "scope": args.scope,
        "anchor_ratio": args.anchor_ratio,
    }


def _planned_job(args: argparse.Namespace, job: str, payload: dict[str, Any]) -> int:
    """Show the plan, ask about missing defaults and the cost where they apply, then run the job."""
    show_plan(args, job, payload)
    confirm_defaults(args, job, payload)
    confirm_cost(args, resolved_engine(args), job, payload)
    return run_job(job, payload, raw=args.json)


@cli_verb
def _retrain(args: argparse.Namespace) -> int:
    return _planned_job(args, args.job_verb, _retrain_payload(args))


@cli_verb
def _smoke(args: argparse.Namespace) -> int:
    payload = _train_payload(args)
    confirm_cost(args, resolved_engine(args), args.job_verb, payload)
    return run_job(args.job_verb, payload, raw=args.json)


@cli_verb
def _run(args: argparse.Namespace) -> int:
    return _planned_job(args, args.job_verb, _train_payload(args))
