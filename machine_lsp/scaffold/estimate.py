"""What a job will do, in numbers a person can weigh before a paid or long run: rows, passes, tokens.

Tokens are estimated from characters (about four per token for English chat text). The language server asks
this question and must not load a tokenizer; the answer is an order of magnitude, not a bill.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.scaffold.config import ConfigError, MachineConfig, apply_overrides, load_project_config

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4  # the chat template's role header and end-of-turn marker
SMOKE_STEPS = 2  # jobs/train_jobs.py runs this many steps for a smoke run
TRAIN_KEYS = ("engine", "model", "data", "epochs", "steps", "batch_size", "objective")
EVAL_KEYS = ("data", "max_tokens")
BUILTIN_PROBE_QUESTIONS = 12  # rough size of the built-in bleed probe, for the estimate only


class RunEstimate(msgspec.Struct, kw_only=True):
    verb: str
    engine: str
    source: str  # where the rows come from: a file name, or "the store's good rows"
    rows: int
    steps: int | None = None
    tokens: int  # estimated tokens processed by the whole job

    def describe(self) -> str:
        steps = f", {self.steps} step{'' if self.steps == 1 else 's'}" if self.steps else ""
        return f"{self.verb} on {self.engine}: {self.rows} rows from {self.source}{steps}, ~{self.tokens:,} tokens"


def estimate_job(verb: str, project: Path, job_args: dict[str, Any]) -> RunEstimate | None:
    """The estimate for a train or eval job started from `project`, or None when its data cannot be read yet
    (the job itself then reports the precise error)."""
    try:
        config, _ = load_project_config(project, job_args.get("config"))
        config = apply_overrides(
            config,
            {k: job_args.get(k) for k in TRAIN_KEYS if k != "data" or verb.startswith("train")},
            {k: job_args.get(k) for k in EVAL_KEYS if verb.startswith("eval")},
        )
    except ConfigError:
        return None
    if verb.startswith("train"):
        return _estimate_training(verb, project, config)
    if verb.startswith("eval"):
        return _estimate_eval(verb, project, config, job_args)
    return None


def _estimate_training(verb: str, project: Path, config: MachineConfig) -> RunEstimate | None:
    train = config.train
    measured = (
        _measure(project, train.data) if train.objective == "sft" else _measure_preference(project, train)
    )
    if measured is None:
        return None
    source, rows, per_pass = measured
    batches = math.ceil(rows / train.batch_size)
    if verb == "train-smoke":
        steps = SMOKE_STEPS
    else:
        steps = train.steps if train.steps else batches * train.epochs
    tokens = per_pass * steps // batches if batches else 0
    return RunEstimate(verb=verb, engine=train.engine, source=source, rows=rows, steps=steps, tokens=tokens)


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
    source, rows, prompt_tokens = measured
    tokens = prompt_tokens + rows * max_new + probe
    return RunEstimate(verb=verb, engine=config.train.engine, source=source, rows=rows, tokens=tokens)


def _measure(project: Path, data: str | None) -> tuple[str, int, int] | None:
    """(source, rows, estimated tokens) of a chat JSONL file, or of the store's good rows when `data` is None.
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
    return source, len(rows), sum(_row_tokens(row) for row in rows)


def _measure_preference(project: Path, train: Any) -> tuple[str, int, int] | None:
    """(source, pairs or KTO examples, estimated tokens of a pass): a DPO pair trains two sequences, a KTO example
    two (its own and a mismatched one for the KL point)."""
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
    chars = sum(len(msgspec.json.encode(row)) for row in rows)
    return source, len(rows), 2 * chars // CHARS_PER_TOKEN


def _row_tokens(row: Any) -> int:
    from machine_lsp.core.schema import text_of

    return sum(len(text_of(message)) // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE for message in row.messages)
