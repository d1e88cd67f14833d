"""What a job command will run, resolved as the job resolves it (machine.toml + the command's overrides, the data
file or the store's good rows, the eval set), and why it is sure to fail when it is: no data, 0 rows, no eval set.

The confirmation question states this plan, and a job sure to fail is refused before anyone is asked. Light work
only (reads machine.toml and the data file): the language server never loads a model or a tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from machine_lsp.engines.registry import engine_for_address
from machine_lsp.lsp.replies import JobPlan

TRAIN_VERBS = ("train-smoke", "train-run", "retrain")


def plan_job(verb: str, project: Path, job_args: dict[str, Any]) -> JobPlan:
    from machine_lsp.scaffold.config import TRAIN_KEYS, ConfigError, apply_overrides, load_project_config
    from machine_lsp.scaffold.estimate import estimate_job

    training = verb in TRAIN_VERBS
    try:
        config, _ = load_project_config(project, job_args.get("config"))
        if training:
            train = {k: job_args.get(k) for k in TRAIN_KEYS}
            config = apply_overrides(config, train)
        else:
            evals = {k: job_args.get(k) for k in ("data", "max_tokens", "grader", "format_pattern")}
            config = apply_overrides(config, {"model": job_args.get("model")}, evals)
    except ConfigError as exc:
        return JobPlan(verb=verb, engine="?", model="?", problem=str(exc))
    engine = config.train.engine
    checkpoint = job_args.get("checkpoint") if isinstance(job_args.get("checkpoint"), str) else None
    if not training:
        engine = job_args.get("engine") or engine_for_address(checkpoint) or engine
    plan = JobPlan(verb=verb, engine=engine, model=config.train.resolved_model(), checkpoint=checkpoint)
    if engine == "tinker":
        from machine_lsp.scaffold.config import tinker_costs_money

        plan.costs_money = tinker_costs_money(project)
    if training:
        data = None if verb == "retrain" else config.train.data  # retrain trains on the store
        plan.data, plan.rows, plan.problem = _training_rows(project, data)
    elif verb == "eval-probe":
        plan.data = "the bleed probe"
    else:
        plan.problem = _checkpoint_problem(verb, checkpoint)
        data = config.eval.data
        if plan.problem is None and not data:
            plan.problem = "no eval data: pass data (held-out rows) or set [eval] data in machine.toml"
        elif plan.problem is None:
            plan.data, plan.rows, plan.problem = _file_rows(project, data, "no held-out rows to evaluate")
    if plan.problem is None and (estimate := estimate_job(verb, project, job_args)) is not None:
        plan.tokens = estimate.tokens
        if training:  # steps from the one sizing rule (core.run_plan), and its text with the floor warning
            plan.steps = estimate.steps
            if config.train.objective != "sft":  # pairs or KTO examples (a staged run: each stage's rows)
                plan.data, plan.rows = estimate.source, estimate.rows
            if estimate.size is not None:
                plan.message = f"{estimate.describe()}; model {plan.model}"
    if plan.problem is None and training and plan.costs_money:
        _price(plan, project, job_args)
    return plan


def _price(plan: JobPlan, project: Path, job_args: dict[str, Any]) -> None:
    """Hosted Tinker: the run's USD price joins the plan, and a run over `[tinker] budget_usd` is refused. Off
    the event loop like the rest of the plan (the pricing file is fetched once per process, 5 s at most)."""
    from machine_lsp.scaffold.pricing import plan_price

    price, refusal = plan_price(plan.verb, project, job_args)
    if price is not None:
        plan.message = f"{describe(plan)}; {price.describe()}"
    plan.problem = refusal


def describe(plan: JobPlan) -> str:
    """`train-run on local: 2 rows from train.jsonl, 1 step, ~16 tokens; model HuggingFaceTB/SmolLM2-135M-Instruct`;
    a training run's plan keeps the sizing text `plan_job` gave it (rows, epochs, steps, tokens, time, warning)."""
    if plan.message:
        return plan.message
    where = f"{plan.rows} rows from {plan.data}" if plan.rows is not None else plan.data
    details = [
        d for d in (where, _steps(plan.steps), f"~{plan.tokens:,} tokens" if plan.tokens else None) if d
    ]
    text = f"{plan.verb} on {plan.engine}" + (": " + ", ".join(details) if details else "")
    text += f"; model {plan.model}" + (f", checkpoint {plan.checkpoint}" if plan.checkpoint else "")
    return text


def _steps(steps: int | None) -> str | None:
    return f"{steps} step{'' if steps == 1 else 's'}" if steps else None


def _checkpoint_problem(verb: str, checkpoint: str | None) -> str | None:
    if verb == "eval-baseline" and checkpoint:
        return "eval-baseline evaluates the base model: use eval-checkpoint for a checkpoint"
    if verb == "eval-checkpoint" and not checkpoint:
        return "eval-checkpoint needs a checkpoint (local://RUN/NAME, tinker://..., or latest)"
    return None


def _training_rows(project: Path, data: str | None) -> tuple[str, int | None, str | None]:
    if data:
        return _file_rows(project, data, "no rows to train on")
    from machine_lsp.core.export import export_sft
    from machine_lsp.core.store import Store, StoreError

    try:
        store = Store.open(project)
        rows = len(export_sft(store.records()))
    except (OSError, StoreError) as exc:
        return "the store's good rows", None, str(exc)
    if not rows:
        return (
            "the store's good rows",
            0,
            f"the store ({store.tagged_path}) has no good rows yet: tag turns as good, or pass a training file (data)",
        )
    return "the store's good rows", rows, None


def _file_rows(project: Path, data: str, empty: str) -> tuple[str, int | None, str | None]:
    path = Path(data).expanduser()
    path = path if path.is_absolute() else project / path
    if not path.is_file():
        return data, None, f"{data}: no such file" if not path.exists() else f"{data}: not a file"
    try:
        with path.open("rb") as fh:
            rows = sum(1 for line in fh if line.strip())
    except OSError as exc:
        return data, None, f"{data}: {exc.strerror or exc}"
    return path.name, rows, None if rows else f"{data}: {empty}"
