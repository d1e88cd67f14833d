"""The `eval-pairs` job: preference accuracy and mean reward margin of a checkpoint on held-out pairs.

Each pair's chosen and rejected completions are scored under the checkpoint and under the base model (the reference
the preference objectives train against: `Engine.scorer_for`); accuracy is the share of pairs whose implicit reward
margin beta * ((chosen - chosen_ref) - (rejected - rejected_ref)) is positive, as tinker-cookbook's DPO metrics
count it. Result: `eval_results/pairs-<name>.json` (`core.preference.PreferenceReport` plus where it came from).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from machine_lsp.core import runs
from machine_lsp.core.preference import PairScore, messages_of, preference_report, read_comparison_rows
from machine_lsp.core.schema import RowFileError
from machine_lsp.engines.registry import engine_for_address
from machine_lsp.jobs import events as ev
from machine_lsp.jobs.common import EngineArgs, make_engine, project_config, renderer_for, served_model
from machine_lsp.jobs.data import resolve, validate_or_fail
from machine_lsp.jobs.eval_jobs import checkpoint_name, write_file
from machine_lsp.jobs.runner import JobContext, JobError

BATCH = 16  # pairs scored per engine call


class EvalPairsArgs(EngineArgs, kw_only=True):
    data: str  # a pairs file (tinker-cookbook comparisons, `machine export pairs`)
    checkpoint: str | None = None  # None: the base model (accuracy 0, margin 0: the reference itself)
    name: str | None = None
    out: str | None = None
    beta: float | None = None  # None: machine.toml [train] beta


def _pairs(ctx: JobContext, data: str) -> tuple[Any, list[tuple[int, Any]]]:
    path = resolve(ctx.cwd, data)
    if not path.is_file():
        raise JobError(f"{data}: no such file" if not path.exists() else f"{data}: not a file")
    validate_or_fail(path, "pairs", ctx)
    try:
        rows = read_comparison_rows(path)
    except RowFileError as exc:
        raise JobError(str(exc)) from None
    pairs = [(line, row) for line, row in rows if row.chosen_rejected() is not None]
    if not pairs:
        raise JobError(f"{data}: every pair is a Tie: nothing to score")
    return path, pairs


def _scores(
    ctx: JobContext, scorer: Any, renderer: Any, pairs: list[tuple[int, Any]], cfg: Any
) -> list[PairScore]:
    from machine_lsp.engines import render
    from machine_lsp.engines.base import EngineError

    scores: list[PairScore] = []
    for start in range(0, len(pairs), BATCH):
        chunk, datums = pairs[start : start + BATCH], []
        for line, row in chunk:
            prompt = messages_of(row.comparison.prompt_conversation)
            for side in row.chosen_rejected():
                conversation = [*prompt, *messages_of(side)]
                try:
                    datums.append(
                        render.to_datum(
                            conversation,
                            renderer,
                            train_on="last_assistant_message",
                            reduction="none",
                            max_length=cfg.max_length,
                        )
                    )
                except EngineError as exc:
                    raise JobError(f"line {line}: {exc}") from None
        try:
            logprobs = scorer.completion_logprobs(datums)
        except EngineError as exc:
            raise JobError(str(exc), kind="engine") from None
        for i, (line, _) in enumerate(chunk):
            (chosen, chosen_ref), (rejected, rejected_ref) = logprobs[2 * i], logprobs[2 * i + 1]
            scores.append(PairScore(line, chosen, rejected, chosen_ref, rejected_ref))
        ctx.emit(ev.Progress(done=len(scores), total=len(pairs), message="scoring pairs"))
    return scores


def eval_pairs(ctx: JobContext, args: EvalPairsArgs) -> tuple[dict[str, Any], str]:
    from machine_lsp.engines.base import EngineError

    started = time.perf_counter()
    if args.checkpoint == runs.LATEST:
        from machine_lsp.core.store import Store

        try:
            args.checkpoint = runs.latest_checkpoint(Store.open(ctx.cwd).runs_dir)
        except LookupError as exc:
            raise JobError(str(exc), kind="input") from None
    cfg = project_config(
        ctx, args.config, {"model": args.model, "threads": args.threads, "beta": args.beta}
    ).train
    engine_name = args.engine or engine_for_address(args.checkpoint) or cfg.engine
    path, pairs = _pairs(ctx, args.data)
    engine = make_engine(ctx, engine_name, cfg.threads)
    model = served_model(ctx, engine, cfg.resolved_model())
    ctx.update(engine=engine_name, model=model, config=msgspec.to_builtins(cfg))
    ctx.emit(ev.Progress(done=0, total=len(pairs), message=f"loading {args.checkpoint or model}"))
    try:
        scorer = engine.scorer_for(model, args.checkpoint)
        renderer = renderer_for(engine, model)
    except EngineError as exc:
        raise JobError(str(exc), kind="engine") from None
    report = preference_report(_scores(ctx, scorer, renderer, pairs, cfg), cfg.beta)
    name = args.name or (checkpoint_name(args.checkpoint) if args.checkpoint else "baseline")
    where = {"checkpoint": args.checkpoint, "engine": engine_name, "model": model, "data_path": str(path)}
    out = _write_report(
        ctx, args, report, name, {**where, "seconds": round(time.perf_counter() - started, 3)}
    )
    summary = msgspec.structs.asdict(report)
    del summary["rows"]
    message = f"{name}: preference accuracy {report.accuracy:.1%}, mean margin {report.margin:+.4f} on {report.pairs} pairs"
    return {**summary, "name": name, "checkpoint": args.checkpoint, "out": out}, message


def _write_report(ctx: JobContext, args: EvalPairsArgs, report: Any, name: str, where: dict[str, Any]) -> str:
    """eval_results/pairs-<name>.json (or --out): the report, where it came from, the data's checksum."""
    try:
        runs.check_name(name, "eval result name")
    except ValueError as exc:
        raise JobError(str(exc), kind="usage") from None
    payload = {
        **msgspec.to_builtins(report),
        "name": name,
        **where,
        "data_sha256": runs.sha256_file(where["data_path"]),
        "created_at": runs.now_iso(),
        "run_id": ctx.run_id,
    }
    target = resolve(ctx.cwd, args.out or f"eval_results/pairs-{name}.json")
    return write_file(ctx, target, msgspec.json.format(msgspec.json.encode(payload)) + b"\n")
