"""What a job will do, in numbers a person can weigh before a paid or long run: rows, passes, tokens.

Tokens are estimated from characters (about four per token for English chat text). The language server asks
this question and must not load a tokenizer; the answer is an order of magnitude, not a bill.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.anchors import anchor_count, tool_anchor_count
from machine_lsp.core.run_plan import CHARS_PER_TOKEN, RunSize, describe_size, estimate_tokens, size_run
from machine_lsp.scaffold.config import (
    ConfigError,
    MachineConfig,
    TrainSection,
    apply_overrides,
    load_project_config,
)

SMOKE_STEPS = 2  # jobs/train_jobs.py runs this many steps for a smoke run
# The job arguments that change a job's size estimate (not every [train] override: config.TRAIN_KEYS lists those).
TRAIN_SIZING_KEYS = (
    "engine",
    "model",
    "data",
    "epochs",
    "steps",
    "batch_size",
    "objective",
    "scope",
    "anchor_ratio",
    "pairs",
)
# `retrain` trains on the store whatever [train] data says
TRAINING_VERBS = ("train-smoke", "train-run", "retrain")
EVAL_SIZING_KEYS = ("data", "max_tokens")
# An anchor: a short request and the base model's answer (at most core.anchors.ANCHOR_MAX_TOKENS)
ANCHOR_TOKENS, ANCHOR_TRAINED_TOKENS = 60, 45
BUILTIN_PROBE_QUESTIONS = 12  # rough size of the built-in bleed probe, for the estimate only


def run_size(
    n_rows: int,
    cfg: TrainSection,
    *,
    trained_tokens_per_epoch: int = 0,
    tokens_per_epoch: int = 0,
    scoped: bool = False,
) -> RunSize:
    """Epochs and steps of a run on `n_rows` rows under machine.toml's `[train]` (the one rule: core.run_plan);
    `scoped`: the rows include anchors."""
    return size_run(
        n_rows,
        cfg.batch_size,
        epochs=cfg.epochs,
        steps=cfg.steps,
        trained_tokens_per_epoch=trained_tokens_per_epoch,
        tokens_per_epoch=tokens_per_epoch,
        scoped=scoped,
    )


class RunEstimate(msgspec.Struct, kw_only=True):
    verb: str
    engine: str
    source: str  # where the rows come from: a file name, or "the store's good rows"
    rows: int
    steps: int | None = None
    tokens: int  # estimated tokens processed by the whole job
    size: RunSize | None = None  # a training run's epochs and steps (core.run_plan)

    @property
    def warning(self) -> str | None:
        return self.size.warning if self.size else None

    def describe(self) -> str:
        if self.size is not None:
            return f"{self.verb} on {self.engine}: {self.source}: {describe_size(self.size, self.engine)}"
        steps = f", {self.steps} step{'' if self.steps == 1 else 's'}" if self.steps else ""
        return f"{self.verb} on {self.engine}: {self.rows} rows from {self.source}{steps}, ~{self.tokens:,} tokens"


def estimate_job(verb: str, project: Path, job_args: dict[str, Any]) -> RunEstimate | None:
    """The estimate for a train or eval job started from `project`, or None when its data cannot be read yet
    (the job itself then reports the precise error)."""
    try:
        config, _ = load_project_config(project, job_args.get("config"))
        config = apply_overrides(
            config,
            {k: job_args.get(k) for k in TRAIN_SIZING_KEYS if k != "data" or verb.startswith("train")},
            {k: job_args.get(k) for k in EVAL_SIZING_KEYS if verb.startswith("eval")},
        )
    except ConfigError:
        return None
    if verb == "retrain":
        config = msgspec.structs.replace(config, train=msgspec.structs.replace(config.train, data=None))
    if verb in TRAINING_VERBS:
        return _estimate_training(verb, project, config)
    if verb.startswith("eval"):
        return _estimate_eval(verb, project, config, job_args)
    return None


def _estimate_training(verb: str, project: Path, config: MachineConfig) -> RunEstimate | None:
    """A run's estimate; a staged run's (sft+dpo) is the sum of its stages', each sized from its own rows."""
    estimates = [_estimate_stage(verb, project, stage) for stage in config.train.stages()]
    if any(e is None for e in estimates):
        return None
    if len(estimates) == 1:
        return estimates[0]
    parts = [e for e in estimates if e is not None]
    return RunEstimate(
        verb=verb,
        engine=config.train.engine,
        source=" then ".join(e.source for e in parts),
        rows=sum(e.rows for e in parts),
        steps=sum(e.steps or 0 for e in parts),
        tokens=sum(e.tokens for e in parts),
    )


def _estimate_stage(verb: str, project: Path, train: Any) -> RunEstimate | None:
    measured = (
        _measure(project, train.data) if train.objective == "sft" else _measure_preference(project, train)
    )
    if measured is None:
        return None
    source, rows, per_pass, trained = measured
    anchors = 0
    if verb == "train-smoke":
        train = msgspec.structs.replace(train, steps=SMOKE_STEPS, epochs=1)
    elif train.objective == "sft" and train.data is None and train.scope == "auto":
        # the job adds these (jobs.anchor_jobs)
        anchors = anchor_count(rows, train.anchor_ratio)
        anchors += tool_anchor_count(_rows_with_tools(project), train.anchor_ratio)
        per_pass += anchors * ANCHOR_TOKENS
        trained += anchors * ANCHOR_TRAINED_TOKENS
    size = run_size(
        rows + anchors, train, trained_tokens_per_epoch=trained, tokens_per_epoch=per_pass, scoped=anchors > 0
    )
    size.anchors = anchors
    return RunEstimate(
        verb=verb,
        engine=train.engine,
        source=source,
        rows=rows,
        steps=size.steps,
        tokens=size.tokens,
        size=None if verb == "train-smoke" else size,
    )


def _estimate_eval(
    verb: str, project: Path, config: MachineConfig, job_args: dict[str, Any]
) -> RunEstimate | None:
    max_new = config.eval.max_tokens
    probe = BUILTIN_PROBE_QUESTIONS * (1 + max_new) if (verb == "eval-probe" or job_args.get("probe")) else 0
    if verb == "eval-probe":
        return RunEstimate(
            verb=verb, engine=config.train.engine, source="the bleed probe", rows=0, tokens=probe
        )
    measured = _measure(project, config.eval.data)
    if measured is None:
        return None
    source, rows, prompt_tokens, _trained = measured
    tokens = prompt_tokens + rows * max_new + probe
    return RunEstimate(verb=verb, engine=config.train.engine, source=source, rows=rows, tokens=tokens)


def _measure(project: Path, data: str | None) -> tuple[str, int, int, int] | None:
    """(source, rows, estimated tokens, of them trained) of a chat JSONL file, or of the store's good rows when `data` is None.
    Lines that do not parse are skipped here: the job reports them precisely."""
    from machine_lsp.core.schema import TrainingRow, decode_training_row

    rows: list[TrainingRow] = []
    if data is None:
        from machine_lsp.core.export import export_sft
        from machine_lsp.core.store import Store, StoreError

        try:
            rows = export_sft(Store.open(project).records())
        except (OSError, StoreError):
            return None
        source = "the store's good rows"
    else:
        path = Path(data) if Path(data).is_absolute() else project / data
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        source = path.name
        for line in raw.splitlines():
            if line.strip():
                try:
                    rows.append(decode_training_row(line))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
    tokens, trained = estimate_tokens(row.messages for row in rows)
    return source, len(rows), tokens, trained


def _rows_with_tools(project: Path) -> int:
    """The store's good rows that declare `tools` (each gets workspace-request anchors: core.anchors)."""
    from machine_lsp.core.export import export_sft
    from machine_lsp.core.store import Store, StoreError

    try:
        return sum(1 for row in export_sft(Store.open(project).records()) if row.extra.get("tools"))
    except (OSError, StoreError):
        return 0


def _measure_preference(project: Path, train: Any) -> tuple[str, int, int, int] | None:
    """(source, pairs or KTO examples, estimated tokens of a pass, of them trained): a DPO pair trains two
    sequences (the prompt with each completion), a KTO example two (its own and a mismatched one for the KL
    point); the completions are the trained tokens. A Tie trains nothing."""
    from machine_lsp.core import preference
    from machine_lsp.core.schema import RowFileError

    kind = "pairs" if train.objective == "dpo" else "KTO examples"
    if train.data is None:
        from machine_lsp.core.export import build_kto, build_pairs
        from machine_lsp.core.store import Store, StoreError

        try:
            records = Store.open(project).records()
        except (OSError, StoreError):
            return None
        rows: list[Any] = (build_pairs if train.objective == "dpo" else build_kto)(records)[0]
        source = f"the store's {kind}"
    else:
        path = Path(train.data) if Path(train.data).is_absolute() else project / train.data
        read = preference.read_comparison_rows if train.objective == "dpo" else preference.read_kto_rows
        try:
            rows = [row for _, row in read(path)]
        except RowFileError:
            return None
        source = path.name
    prompt_chars = completion_chars = 0
    for row in rows:
        if isinstance(row, preference.ComparisonRow):
            sides = row.chosen_rejected()
            if sides is not None:
                prompt_chars += 2 * _chars(row.comparison.prompt_conversation)
                completion_chars += _chars(sides[0]) + _chars(sides[1])
        else:
            prompt_chars += 2 * _chars(row.prompt)
            completion_chars += 2 * _chars(row.completion)
    return (
        source,
        len(rows),
        (prompt_chars + completion_chars) // CHARS_PER_TOKEN,
        completion_chars // CHARS_PER_TOKEN,
    )


def _chars(messages: list[dict[str, Any]]) -> int:
    return len(msgspec.json.encode(messages))
