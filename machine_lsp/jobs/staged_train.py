"""A staged training run (`[train] objective = "sft+dpo"`): SFT on the good rows, then DPO on the pairs, one adapter.

* Data: the SFT stage reads `[train] data` (else the store's good rows), the DPO stage `[train] pairs` (else the
  store's pairs); both are read and validated before the model loads, so bad data fails fast.
* One trainer for both stages: the DPO stage starts from the SFT stage's adapter and its optimizer state. Steps
  and checkpoints are numbered across the stages (`step-<n1>` is the SFT stage's last, `step-<n1 + n2>` the final
  one) and `loss.png` draws both stages as one curve.
* The DPO stage's reference is the SFT stage's policy (`Trainer.freeze_reference` at the stage boundary), not the
  base model: the DPO paper initialises and anchors to pi_SFT; TRL's `DPOTrainer` takes the model it starts from as
  `ref_model`, and the cookbook's `train_dpo` the weights at its start. Against the base, the DPO stage would
  also be pulled back toward the base's style, undoing the SFT stage it is meant to refine.
* The DPO stage trains at `[train] dpo_learning_rate`, by default a tenth of the SFT stage's (the cookbook's
  DPO recipe vs its SFT recipes): at the SFT stage's rate 12 DPO steps on 8 pairs undid the SFT stage
  (examples/minimal-preference). `rpo_alpha` adds the chosen answers' NLL to the DPO stage's loss.
* Each stage is sized from its own rows (core.run_plan; `steps` caps each stage). Not gated yet (the gate scores
  chat rows). The manifest's `objective` records both stages: objective, steps, rows, data, and the DPO stage's
  beta, pair counts and reference checkpoint.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from machine_lsp.jobs import train_loop
from machine_lsp.jobs.common import make_engine, served_model
from machine_lsp.jobs.gate_jobs import HeldOut, run_gate
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.jobs.step_data import LoadedRows, load_rows, step_data
from machine_lsp.scaffold.config import MachineConfig, TrainSection
from machine_lsp.scaffold.support import schedule

REFERENCE = "the sft stage's policy (its last checkpoint)"


def train_staged(
    ctx: JobContext, config: MachineConfig, resume: str | None, smoke: bool, sample_tokens: int
) -> tuple[dict[str, Any], str]:
    cfg = config.train
    if resume:
        raise JobError(f"a {cfg.objective} run cannot be resumed yet: start it again")
    stages = cfg.stages()
    loaded = [load_rows(ctx, stage) for stage in stages]  # before the model loads: bad data fails fast
    for stage, rows in zip(stages, loaded, strict=True):
        ctx.add_data(rows.snapshot)
        ctx.log(f"{stage.objective} stage data: {rows.snapshot.rows} rows from {rows.snapshot.source}")
    engine = make_engine(ctx, cfg.engine, cfg.threads)
    model = served_model(ctx, engine, cfg.resolved_model())
    trainer = train_loop.create_trainer(ctx, engine, model, cfg, None)
    started = time.perf_counter()
    history: list[train_loop.StepRecord] = []
    records: list[dict[str, Any]] = []
    loop: train_loop.TrainLoop | None = None
    for index, (stage, rows) in enumerate(zip(stages, loaded, strict=True)):
        if index:  # the next stage is measured against the weights the previous one left
            trainer.freeze_reference()
        last = index == len(stages) - 1
        loop, record = _run_stage(ctx, stage, rows, (trainer, model, engine), loop, history, smoke, last)
        records.append(record)
        if not smoke and index:
            record["reference"] = records[index - 1]["checkpoint"]
    assert loop is not None
    ctx.update(objective={"name": cfg.objective, "beta": cfg.beta, "reference": REFERENCE, "stages": records})
    sample = (
        train_loop.sample_one(ctx, trainer, loop.data.prompt(0), loop.total, sample_tokens) if smoke else None
    )
    result, message = train_loop.outcome(
        ctx, cfg, model, loop, loaded[-1].snapshot, loop.close(), sample, smoke
    )
    result.update(
        steps=loop.total,
        tokens=sum(h.tokens for h in history),
        seconds=round(time.perf_counter() - started, 2),
        stages=records,
    )
    if not smoke:
        held = HeldOut(skip=f"the gate evaluates held-out chat rows; a {cfg.objective} run is not gated yet")
        verdict = run_gate(ctx, config, engine, trainer, model, held)
        result["gate"] = msgspec.to_builtins(verdict)
        message += f"; {verdict.reason}"
    return result, message


def _run_stage(
    ctx: JobContext,
    stage: TrainSection,
    rows: LoadedRows,
    run: tuple[Any, str, Any],
    previous: train_loop.TrainLoop | None,
    history: list[train_loop.StepRecord],
    smoke: bool,
    last: bool,
) -> tuple[train_loop.TrainLoop, dict[str, Any]]:
    """One stage's steps after the previous stage's (`run`: the same trainer, model and engine), and its record
    for the manifest."""
    trainer, model, engine = run
    data = step_data(ctx, stage, rows, train_loop.job_renderer(engine, model))
    plan = schedule(data.count, stage, train_loop.run_size(ctx, data, stage, smoke))
    offset = previous.total if previous is not None else 0
    if previous is not None:
        previous.close()
    ctx.log(f"{stage.objective} stage: steps {offset + 1}-{offset + len(plan)}")
    loop = train_loop.TrainLoop(ctx, stage, trainer, data, plan, offset, offset=offset, history=history)
    try:
        loop.run(smoke, final=last)
    except BaseException:  # metrics.jsonl closed and loss.png drawn on a failure or a cancel too
        loop.close()
        raise
    record: dict[str, Any] = {
        "objective": stage.objective,
        "steps": [offset + 1, loop.total],
        "rows": rows.snapshot.rows,
        "data": rows.snapshot.source,
        "checkpoint": ctx.manifest.last_checkpoint if not smoke else None,
        "learning_rate": stage.resolved_lr(),
    }
    if stage.objective != "sft":
        recorded = ctx.manifest.objective or {}  # step_data's: beta and how the pairs were built
        record.update({k: v for k, v in recorded.items() if k != "name"})
    return loop, record
