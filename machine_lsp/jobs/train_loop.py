"""The steps of one training run and what the run reports: the trainer it creates, the loop (a batch per step,
metrics.jsonl, step events, checkpoints, loss.png), the smoke run's one sample and the job's result. Shared by the
single-objective run (jobs/train_jobs.py) and the staged one (jobs/staged_train.py), which runs one loop per stage.
"""

from __future__ import annotations

import math
import time
from typing import Any

import msgspec

from machine_lsp.core import runs
from machine_lsp.core.run_plan import RunSize, describe_size
from machine_lsp.core.schema import Message
from machine_lsp.jobs import events as ev
from machine_lsp.jobs.common import renderer_for
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.jobs.step_data import StepData
from machine_lsp.scaffold.config import TrainSection
from machine_lsp.scaffold.support import datum_size, lora_settings, lr_at


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


def write_loss_png(ctx: JobContext, history: list[StepRecord]) -> str | None:
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


def run_size(ctx: JobContext, data: StepData, cfg: TrainSection, smoke: bool, anchors: int = 0) -> RunSize:
    """The run's epochs and steps from the units' real token counts (core.run_plan), logged with its warning."""
    datums = [datum for unit in data.units for datum in unit]
    size = datum_size(datums, cfg, units=data.count, scoped=anchors > 0)
    size.anchors = anchors
    if not smoke:
        ctx.log(f"plan: {describe_size(size, cfg.engine)}", "warning" if size.warning else "info")
    return size


def job_renderer(engine: Any, model: str) -> Any:
    from machine_lsp.engines.base import EngineError

    try:
        return renderer_for(engine, model)
    except EngineError as exc:
        raise JobError(str(exc), kind="engine") from None


def create_trainer(
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


class TrainLoop:
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
        write_loss_png(ctx, self.history)

    def close(self) -> str | None:
        """Close metrics.jsonl, record the manifest and draw loss.png (also after a failure or a cancel)."""
        self.metrics.close()
        self.ctx.save_manifest()
        return write_loss_png(self.ctx, self.history)


def sample_one(
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


def outcome(
    ctx: JobContext,
    cfg: TrainSection,
    model: str,
    loop: TrainLoop,
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
