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

import math
import time
from pathlib import Path
from typing import Any, Literal

import msgspec

from machine_lsp.core import runs
from machine_lsp.core.run_plan import RunSize, describe_size
from machine_lsp.core.schema import Message
from machine_lsp.engines.objectives import STAGED
from machine_lsp.jobs import events as ev
from machine_lsp.jobs.anchor_jobs import add_anchors
from machine_lsp.jobs.common import EngineArgs, make_engine, project_config, renderer_for, served_model
from machine_lsp.jobs.data import leave_out_eval_rows
from machine_lsp.jobs.gate_jobs import HeldOut, hold_out, run_gate
from machine_lsp.jobs.greedy_cache import AnswerCache
from machine_lsp.jobs.phase_clock import PhaseClock
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.jobs.step_data import StepData, load_rows, step_data
from machine_lsp.scaffold.config import TRAIN_KEYS, MachineConfig, TrainSection
from machine_lsp.scaffold.support import datum_size, lora_settings, lr_at, schedule

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


class _Submitted(msgspec.Struct):
    step: int
    lr: float
    pending: Any  # the trainer's PendingStep
    submitted: float  # time.perf_counter() at submission


class StepRecord(msgspec.Struct, omit_defaults=True):
    step: int
    loss: float
    lr: float
    tokens: int
    trained_tokens: int
    seconds: float
    # a log-prob objective's own figures (dpo: margin, accuracy, rewards; with rpo_alpha its two terms)
    objective: dict[str, float] = msgspec.field(default_factory=dict)


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


def _write_loss_png(ctx: JobContext, history: list[StepRecord]) -> str | None:
    if not history:
        return None
    from machine_lsp.jobs.charts import loss_chart

    path = ctx.run_dir / runs.LOSS_PNG
    try:
        loss_chart([h.step for h in history], [h.loss for h in history], path, title=f"{ctx.run_id} loss")
    except Exception as exc:  # a chart must never fail a training run
        ctx.log(f"could not draw {path.name}: {exc}", "warning")
        return None
    return str(path)


def _train(
    ctx: JobContext, args: TrainArgs, *, smoke: bool, from_store: bool = False
) -> tuple[dict[str, Any], str]:
    config = _config(ctx, args, smoke, from_store)
    cfg = config.train
    if cfg.objective in STAGED:
        from machine_lsp.jobs.staged_train import train_staged

        return train_staged(ctx, config, args.resume, smoke, args.sample_max_tokens)
    clock, answers = PhaseClock(), AnswerCache(_machine_dir(ctx))
    with clock.phase("rows, engine"):
        loaded, held = _rows(ctx, config, smoke)
        engine = make_engine(ctx, cfg.engine, cfg.threads)
        model = served_model(ctx, engine, cfg.resolved_model())
        renderer = _renderer(engine, model)
    snapshot = loaded.snapshot
    start_step, resume_from = (0, None) if smoke else _resume(ctx, args.resume, cfg.engine)
    with clock.phase("model load"):
        trainer = _create_trainer(ctx, engine, model, cfg, resume_from)
    tagged = len(loaded.rows)
    if held is not None and cfg.objective == "sft":  # scoped: the base model answers other prompts first
        with clock.phase("anchors (base model answers)"):
            rows = add_anchors(ctx, config, (engine, trainer, model), loaded.rows, answers)
        loaded = msgspec.structs.replace(loaded, rows=rows)
    data = step_data(ctx, cfg, loaded, renderer)
    size = _run_size(ctx, data, cfg, smoke, anchors=len(loaded.rows) - tagged)
    plan = schedule(data.count, cfg, size)
    if start_step >= len(plan):
        raise JobError(f"{args.resume} is already at step {start_step} of {len(plan)}: nothing left to train")

    loop = _TrainLoop(ctx, cfg, trainer, data, plan, start_step)
    sample: dict[str, str] | None = None
    try:
        with clock.phase(f"training ({len(plan) - start_step} steps, checkpoint save)"):
            loop.run(smoke)
        if smoke:
            sample = _sample_one(ctx, trainer, data.prompt(plan[0][0]), len(plan), args.sample_max_tokens)
    finally:
        loss_png = loop.close()
    result, message = _outcome(ctx, cfg, model, loop, snapshot, loss_png, sample if smoke else None, smoke)
    if held is not None:
        verdict = run_gate(ctx, config, engine, trainer, model, held, clock, answers)
        result.update(plan=msgspec.to_builtins(size), anchors=ctx.manifest.anchors)
        result["gate"] = msgspec.to_builtins(verdict)
        message += f"; {verdict.reason}"
    result.update(timings=clock.as_dict(), greedy_cache=msgspec.to_builtins(answers.stats))
    return result, message


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


def _run_size(ctx: JobContext, data: StepData, cfg: TrainSection, smoke: bool, anchors: int = 0) -> RunSize:
    """The run's epochs and steps from the units' real token counts (core.run_plan), logged with its warning."""
    size = datum_size([datum for unit in data.units for datum in unit], cfg, units=data.count)
    size.anchors = anchors
    if not smoke:
        ctx.log(f"plan: {describe_size(size, cfg.engine)}", "warning" if size.warning else "info")
    return size


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


def _renderer(engine: Any, model: str) -> Any:
    from machine_lsp.engines.base import EngineError

    try:
        return renderer_for(engine, model)
    except EngineError as exc:
        raise JobError(str(exc), kind="engine") from None


def _resume(ctx: JobContext, ref: str | None, engine: str) -> tuple[int, str | None]:
    """(first step to run minus one, checkpoint to resume from) for `--resume REF`, or (0, None); the caller
    checks it against the run's length once the run is sized."""
    if not ref:
        return 0, None
    resume_from, start_step = _resume_point(ctx, ref, engine)
    ctx.update(resumed_from=resume_from, steps_done=start_step)
    ctx.log(f"resuming from {resume_from} at step {start_step}")
    return start_step, resume_from


def _create_trainer(
    ctx: JobContext, engine: Any, model: str, cfg: TrainSection, resume_from: str | None
) -> Any:
    from machine_lsp.engines.base import EngineError

    try:
        lora = lora_settings(cfg)
        ctx.emit(ev.Progress(done=0, total=None, message=f"loading {model} on the {cfg.engine} engine"))
        loaded = time.perf_counter()
        trainer = engine.create_trainer(model, lora, ctx.run_dir, resume_from=resume_from)
        ctx.log(f"trainer ready in {time.perf_counter() - loaded:.1f} s")
    except EngineError as exc:
        raise JobError(str(exc), kind="engine") from None
    return trainer


class _TrainLoop:
    """The steps of one run: a batch per step, metrics.jsonl, step events, checkpoints, loss.png."""

    def __init__(
        self,
        ctx: JobContext,
        cfg: TrainSection,
        trainer: Any,
        data: StepData,
        plan: list[list[int]],
        start_step: int,
        *,
        offset: int = 0,
        history: list[StepRecord] | None = None,
    ) -> None:
        """`offset`: steps of earlier stages (a staged run numbers its steps and checkpoints across stages, and
        draws one loss curve from the shared `history`)."""
        self.ctx, self.cfg, self.trainer, self.data, self.plan = ctx, cfg, trainer, data, plan
        self.start_step, self.offset = start_step, offset
        self.total = offset + len(plan)
        self.history: list[StepRecord] = [] if history is None else history
        self.saved_steps: set[int] = set()
        self.tokens_total = 0
        ctx.emit(ev.Progress(done=start_step, total=self.total, message=f"training {self.total} steps"))
        self.metrics = open(ctx.run_dir / "metrics.jsonl", "ab")  # noqa: SIM115
        self.started = time.perf_counter()
        self.last_finished = self.started

    def run(self, smoke: bool, final: bool = True) -> None:
        """One step in flight ahead of the one awaited (the cookbook's loop); drained at each checkpoint. The last
        checkpoint is the run's final one unless a later stage follows (`final` False)."""
        cfg, total = self.cfg, self.total
        pending: _Submitted | None = None
        for step in range(self.start_step + 1, total + 1):
            submitted = self.submit(step)
            if pending is not None:
                self.finish(pending)
            pending = submitted
            if pending.pending.done():  # computed in-process: record it now rather than after the next step
                self.finish(pending)
                pending = None
            if not smoke and cfg.save_every and step % cfg.save_every == 0 and step < total:
                if pending is not None:  # step n's result before its checkpoint; step n+1 waits for the save
                    self.finish(pending)
                    pending = None
                self.save(step, final=False)
        if pending is not None:
            self.finish(pending)
        if not smoke:
            if total not in self.saved_steps:
                self.save(total, final=final)
            elif final:
                self.ctx.manifest.checkpoints[-1].final = True
                self.ctx.save_manifest()

    def submit(self, step: int) -> _Submitted:
        from machine_lsp.engines.base import EngineError

        batch, objective = self.data.batch(self.plan[step - 1 - self.offset])
        lr = lr_at(step - self.offset, len(self.plan), self.cfg)
        submitted = time.perf_counter()
        try:
            pending = self.trainer.submit_step(batch, lr, objective)
        except EngineError as exc:
            raise JobError(f"step {step}: {exc}", kind="engine") from None
        return _Submitted(step, lr, pending, submitted)

    def finish(self, submitted: _Submitted) -> None:
        """Wait for a step, then record it: metrics.jsonl, a Step event, the manifest's steps_done."""
        from machine_lsp.engines.base import EngineError

        step, lr = submitted.step, submitted.lr
        try:
            stats = submitted.pending.result()
        except EngineError as exc:
            raise JobError(f"step {step}: {exc}", kind="engine") from None
        now = time.perf_counter()
        seconds = now - max(submitted.submitted, self.last_finished)  # this step's share of the wall time
        self.last_finished = now
        if not math.isfinite(stats.loss):
            raise JobError(f"step {step}: the loss is not finite ({stats.loss}); lower the learning rate")
        record = StepRecord(
            step, stats.loss, lr, stats.tokens, stats.trained_tokens, seconds, dict(stats.metrics or {})
        )
        self.history.append(record)
        self.metrics.write(msgspec.json.encode(record) + b"\n")
        self.metrics.flush()
        self.tokens_total += stats.tokens
        per_step = (now - self.started) / (step - self.start_step)
        self.ctx.emit(
            ev.Step(
                step=step,
                total=self.total,
                loss=round(stats.loss, 6),
                lr=lr,
                tokens=stats.tokens,
                seconds_per_step=round(per_step, 3),
                eta_seconds=round(per_step * (self.total - step), 1),
            )
        )
        self.ctx.manifest.steps_done = step
        if step % 10 == 0:
            self.ctx.save_manifest()

    def save(self, step: int, final: bool) -> None:
        from machine_lsp.engines.base import EngineError

        name = f"step-{step}"
        ctx = self.ctx
        # Tinker deletes an intermediate checkpoint after its TTL (the cookbook's 7 days); the final one is kept.
        ttl = self.cfg.checkpoint_ttl if self.cfg.engine == "tinker" and not final else 0
        with ctx.shielded():  # a cancel during the save waits until the checkpoint is written and recorded
            try:
                address = self.trainer.save(name, ttl_seconds=ttl or None)
            except EngineError as exc:
                raise JobError(f"saving checkpoint {name}: {exc}", kind="engine") from None
            ctx.add_checkpoint(
                name,
                address,
                step,
                final=final,
                state=getattr(self.trainer, "last_state_path", None),
                ttl_seconds=ttl or None,
            )
        self.saved_steps.add(step)
        _write_loss_png(ctx, self.history)

    def close(self) -> str | None:
        """Close metrics.jsonl, record the manifest and draw loss.png (also after a failure or a cancel)."""
        self.metrics.close()
        self.ctx.save_manifest()
        return _write_loss_png(self.ctx, self.history)


def _sample_one(
    ctx: JobContext, trainer: Any, prompt: list[Message], total: int, max_tokens: int
) -> dict[str, str]:
    """The smoke run's one sample: an answer to the first trained row's prompt (up to its last assistant message)."""
    from machine_lsp.core.schema import text_of
    from machine_lsp.engines.base import EngineError

    ctx.emit(ev.Progress(done=total, total=total, message="sampling one answer"))
    try:
        output = trainer.sampler().sample([prompt], max_tokens)[0]
    except EngineError as exc:
        raise JobError(f"sampling: {exc}", kind="engine") from None
    users = [m for m in prompt if m.role == "user"]
    sample = {"prompt": text_of(users[-1]) if users else "", "output": output}
    ctx.log(f"sample: {sample['prompt']!r} -> {output!r}")
    return sample


def _outcome(
    ctx: JobContext,
    cfg: TrainSection,
    model: str,
    loop: _TrainLoop,
    snapshot: Any,
    loss_png: str | None,
    sample: dict[str, str] | None,
    smoke: bool,
) -> tuple[dict[str, Any], str]:
    history = loop.history
    wall = time.perf_counter() - loop.started
    losses = [h.loss for h in history]
    result: dict[str, Any] = {
        "engine": cfg.engine,
        "model": model,
        "steps": loop.total,
        "steps_run": len(history),
        "losses": [round(x, 6) for x in losses],
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "tokens": loop.tokens_total,
        "seconds": round(wall, 2),
        "seconds_per_step": round(wall / len(history), 3) if history else None,
        "loss_png": loss_png,
        "data": msgspec.to_builtins(snapshot),
    }
    if smoke:
        result["sample"] = sample
        msg = "smoke ok: loss " + " -> ".join(f"{x:.3f}" for x in losses)
        if sample:
            msg += f"; sample {sample['output']!r}"
        return result, msg
    result["checkpoint"] = ctx.manifest.last_checkpoint
    result["checkpoints"] = [c.address for c in ctx.manifest.checkpoints]
    msg = f"trained {len(history)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}; checkpoint {ctx.manifest.last_checkpoint}"
    return result, msg


def train_smoke(ctx: JobContext, args: TrainArgs) -> tuple[dict[str, Any], str]:
    return _train(ctx, args, smoke=True)


def train_run(ctx: JobContext, args: TrainArgs, *, from_store: bool = False) -> tuple[dict[str, Any], str]:
    return _train(ctx, args, smoke=False, from_store=from_store)
