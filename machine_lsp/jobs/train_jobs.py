"""The `train-smoke` and `train-run` jobs: the configured SFT on the configured engine, streamed as events.

Both use the same pipeline: config (machine.toml + overrides) -> data (a validated FILE, or the store's good rows
snapshotted into the run dir) -> cookbook Datums (render.py, the engine's renderer) -> an engine Trainer.

* Batches: rows are shuffled once per epoch with `seed + epoch` and cut into `batch_size` chunks, so the schedule is a
  pure function of the config and a resumed run continues with exactly the batches it would have seen.
* Learning rate: the cookbook's schedule multiplier (`lr_schedule`: constant, linear or cosine); Adam settings from
  machine.toml (`adam_beta1`, `adam_beta2`, `adam_eps`), the same on both engines.
* Pipelined like `tinker_cookbook.supervised.train` (its `submit_ahead=1`): step n+1 is submitted before step n's
  result is awaited (`Trainer.submit_step`), so on Tinker a step costs about one wait instead of two. A step that is
  already done when submitted (the local engine) is recorded at once. At a checkpoint the loop waits for step n
  before it saves, and saves before it submits step n+1, so `step-<n>` holds exactly n optimizer steps.
* Checkpoints every `save_every` steps and a final one (`step-<N>`, final=true), each recorded in the manifest with
  its address; `--resume RUN` (a run id or a checkpoint address) continues from the last checkpoint. On Tinker the
  intermediate ones expire after `checkpoint_ttl` seconds (recorded as `expires_at`); the final one is kept.
* Per-step stats go to `metrics.jsonl`; `loss.png` is redrawn at each checkpoint and at the end (also on cancel).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec

from machine_lsp.core import runs
from machine_lsp.engines.objectives import STAGED
from machine_lsp.jobs.anchor_jobs import add_anchors
from machine_lsp.jobs.common import EngineArgs, make_engine, project_config, served_model
from machine_lsp.jobs.data import leave_out_eval_rows
from machine_lsp.jobs.gate_jobs import HeldOut, hold_out, run_gate
from machine_lsp.jobs.greedy_cache import AnswerCache
from machine_lsp.jobs.phase_clock import PhaseClock
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.jobs.staged_train import train_staged
from machine_lsp.jobs.step_data import load_rows, step_data
from machine_lsp.jobs.train_loop import (
    TrainLoop,
    create_trainer,
    job_renderer,
    outcome,
    run_size,
    sample_one,
)
from machine_lsp.scaffold.config import TRAIN_KEYS, MachineConfig
from machine_lsp.scaffold.support import schedule

SMOKE_STEPS = 2


class StoreRunArgs(EngineArgs, kw_only=True):
    """A training run's size and scope: all `retrain` takes (the store gives the rows, SFT the objective)."""

    epochs: int | None = None
    steps: int | None = None
    learning_rate: float | None = None
    batch_size: int | None = None
    save_every: int | None = None
    seed: int | None = None
    scope: Literal["auto", "off"] | None = None
    anchor_ratio: float | None = None


class TrainArgs(StoreRunArgs, kw_only=True):
    data: str | None = None
    lr_schedule: Literal["constant", "linear", "cosine"] | None = None
    rank: int | None = None
    alpha: int | None = None
    max_length: int | None = None
    resume: str | None = None
    objective: Literal["sft", "dpo", "kto", "sft+dpo"] | None = None
    beta: float | None = None
    pairs: str | None = None
    rpo_alpha: float | None = None
    dpo_learning_rate: float | None = None
    sample_max_tokens: int = 24


def _resume_point(ctx: JobContext, ref: str, engine: str) -> tuple[str, int]:
    """(checkpoint address or state path, its step) from a run id / run dir / checkpoint address."""
    from machine_lsp.core.store import Store

    if "://" in ref:
        step = 0
        tail = ref.rstrip("/").rsplit("/", 1)[-1]
        if tail.startswith("step-") and tail[5:].isdigit():
            step = int(tail[5:])
        return ref, step
    runs_dir = Store.open(ctx.cwd).runs_dir
    try:
        run_dir = runs.find_run(runs_dir, ref)
        manifest = runs.read_manifest(run_dir)
    except (LookupError, OSError, msgspec.MsgspecError) as exc:
        raise JobError(f"cannot resume from {ref!r}: {exc}") from None
    if not manifest.checkpoints:
        raise JobError(f"cannot resume from run {manifest.id}: it saved no checkpoint")
    last = manifest.checkpoints[-1]
    if manifest.engine and manifest.engine != engine:
        raise JobError(f"cannot resume run {manifest.id} (engine {manifest.engine}) with engine {engine}")
    return (last.state or last.address), last.step


def _train(
    ctx: JobContext, args: TrainArgs, *, smoke: bool, from_store: bool = False
) -> tuple[dict[str, Any], str]:
    config = _config(ctx, args, smoke, from_store)
    cfg = config.train
    _hold_budget(ctx, args, "train-smoke" if smoke else "retrain" if from_store else "train-run")
    if cfg.objective in STAGED:
        return train_staged(ctx, config, args.resume, smoke, args.sample_max_tokens)
    clock, answers = PhaseClock(), AnswerCache(_machine_dir(ctx))
    with clock.phase("rows, engine"):
        loaded, held = _rows(ctx, config, smoke)
        engine = make_engine(ctx, cfg.engine, cfg.threads)
        model = served_model(ctx, engine, cfg.resolved_model())
        renderer = job_renderer(engine, model)
    snapshot = loaded.snapshot
    start_step, resume_from = (0, None) if smoke else _resume(ctx, args.resume, cfg.engine)
    with clock.phase("model load"):
        trainer = create_trainer(ctx, engine, model, cfg, resume_from)
    tagged = len(loaded.rows)
    if held is not None and cfg.objective == "sft":  # scoped: the base model answers other prompts first
        with clock.phase("anchors (base model answers)"):
            rows = add_anchors(ctx, config, (engine, trainer, model), loaded.rows, answers)
        loaded = msgspec.structs.replace(loaded, rows=rows)
    anchors = len(loaded.rows) - tagged
    data = step_data(ctx, cfg, loaded, renderer, scoped=anchors > 0)
    size = run_size(ctx, data, cfg, smoke, anchors=anchors)
    plan = schedule(data.count, cfg, size)
    if start_step >= len(plan):
        raise JobError(f"{args.resume} is already at step {start_step} of {len(plan)}: nothing left to train")

    loop = TrainLoop(ctx, cfg, trainer, data, plan, start_step)
    sample: dict[str, str] | None = None
    try:
        with clock.phase(f"training ({len(plan) - start_step} steps, checkpoint save)"):
            loop.run(smoke)
        if smoke:
            sample = sample_one(ctx, trainer, data.prompt(plan[0][0]), len(plan), args.sample_max_tokens)
    finally:
        loss_png = loop.close()
    result, message = outcome(ctx, cfg, model, loop, snapshot, loss_png, sample if smoke else None, smoke)
    if held is not None:
        verdict = run_gate(ctx, config, engine, trainer, model, held, clock, answers)
        result.update(plan=msgspec.to_builtins(size), anchors=ctx.manifest.anchors)
        result["gate"] = msgspec.to_builtins(verdict)
        message += f"; {verdict.reason}"
    result.update(timings=clock.as_dict(), greedy_cache=msgspec.to_builtins(answers.stats))
    return result, message


def _hold_budget(ctx: JobContext, args: TrainArgs, verb: str) -> None:
    """On hosted Tinker, log the run's USD price and refuse it over `[tinker] budget_usd` before anything is
    billed (the engine is not even built yet)."""
    from machine_lsp.scaffold.pricing import plan_price

    job_args = {k: v for k, v in msgspec.to_builtins(args).items() if v is not None}
    price, refusal = plan_price(verb, ctx.cwd, job_args)
    if price is not None:
        ctx.log(f"price: {price.describe()}")
    if refusal is not None:
        raise JobError(f"not started: {refusal}", kind="usage")


def _machine_dir(ctx: JobContext) -> Path:
    from machine_lsp.core.store import Store

    return Store.open(ctx.cwd).root


def _rows(ctx: JobContext, config: MachineConfig, smoke: bool) -> tuple[Any, HeldOut | None]:
    """The run's rows (the gate's held out of an SFT run first) and the held-out set (None: a smoke run)."""
    cfg = config.train
    loaded = load_rows(ctx, cfg)  # chat rows, pairs or KTO examples, per objective
    if cfg.objective == "sft" and loaded.snapshot.source == "store" and config.eval.data:
        rows, snapshot = leave_out_eval_rows(
            ctx, loaded.rows, config.eval.data
        )  # an eval set made from the store
        loaded = msgspec.structs.replace(loaded, rows=rows, snapshot=snapshot or loaded.snapshot)
    held: HeldOut | None = None  # a smoke run is not gated
    if not smoke and cfg.objective == "sft":  # the gate's rows are held out before anything trains on them
        rows, snapshot, held = hold_out(ctx, config, loaded.rows, loaded.snapshot)
        loaded = msgspec.structs.replace(loaded, rows=rows, snapshot=snapshot)
    elif (
        not smoke
    ):  # the gate scores answers to held-out chat prompts; a preference run has none of its own yet
        held = HeldOut(skip=f"the gate evaluates held-out chat rows; a {cfg.objective} run is not gated yet")
    snapshot = loaded.snapshot
    ctx.add_data(snapshot)
    ctx.log(
        f"data: {snapshot.rows} {cfg.objective} rows from {snapshot.source} (sha256 {snapshot.sha256[:12]})"
    )
    return loaded, held


def _config(ctx: JobContext, args: TrainArgs, smoke: bool, from_store: bool = False) -> MachineConfig:
    """machine.toml with the job's overrides (a smoke run: two steps, no checkpoints; `from_store`: the store's
    good rows whatever [train] data says), recorded in the manifest."""
    overrides = {k: getattr(args, k) for k in TRAIN_KEYS}
    config = project_config(ctx, args.config, overrides)
    cfg = config.train
    if from_store and cfg.data is not None:
        ctx.log(f"training on the store's good rows ([train] data = {cfg.data!r} is for `machine train run`)")
        cfg = msgspec.structs.replace(cfg, data=None)
        config = msgspec.structs.replace(config, train=cfg)
    if smoke:
        cfg = msgspec.structs.replace(cfg, steps=SMOKE_STEPS, epochs=1, save_every=0)
        config = msgspec.structs.replace(config, train=cfg)
    ctx.update(engine=cfg.engine, model=cfg.resolved_model(), config=msgspec.to_builtins(cfg))
    return config


def _resume(ctx: JobContext, ref: str | None, engine: str) -> tuple[int, str | None]:
    """(first step to run minus one, checkpoint to resume from) for `--resume REF`, or (0, None); the caller
    checks it against the run's length once the run is sized."""
    if not ref:
        return 0, None
    resume_from, start_step = _resume_point(ctx, ref, engine)
    ctx.update(resumed_from=resume_from, steps_done=start_step)
    ctx.log(f"resuming from {resume_from} at step {start_step}")
    return start_step, resume_from


def train_smoke(ctx: JobContext, args: TrainArgs) -> tuple[dict[str, Any], str]:
    return _train(ctx, args, smoke=True)


def train_run(ctx: JobContext, args: TrainArgs, *, from_store: bool = False) -> tuple[dict[str, Any], str]:
    return _train(ctx, args, smoke=False, from_store=from_store)
