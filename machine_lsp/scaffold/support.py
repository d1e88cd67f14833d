"""Helpers shared by the scaffolded scripts (train_sft.py, eval.py) and the jobs, so both train the same way.

Pure at import time; torch/tinker/cookbook are imported inside functions.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from machine_lsp.core.run_plan import RunSize, estimate_tokens
from machine_lsp.core.schema import (
    Message,
    RowFileError,
    TrainingRow,
    read_training_rows,
)
from machine_lsp.scaffold.config import TrainSection
from machine_lsp.scaffold.estimate import run_size


class DataError(ValueError):
    """Training rows cannot be read; the message names the file and line."""


def schedule(n_rows: int, cfg: TrainSection, size: RunSize | None = None) -> list[list[int]]:
    """Row indices of every step's batch: each epoch shuffles with `seed + epoch` and is cut into the size's batch
    (`batch_size`, or grown for a scoped run); `size` (default: `run_size` without token counts) says how many
    epochs and steps. A pure function of
    the config and the rows, so a resumed run continues with exactly the batches it would have seen."""
    if n_rows <= 0:
        return []
    size = size or run_size(n_rows, cfg)
    batches: list[list[int]] = []
    for epoch in range(size.epochs):
        order = list(range(n_rows))
        random.Random(cfg.seed + epoch).shuffle(order)
        batches.extend(order[i : i + size.batch_size] for i in range(0, n_rows, size.batch_size))
    return batches[: size.steps]


def lr_at(step: int, total: int, cfg: TrainSection) -> float:
    """The learning rate of 1-based `step`, with the cookbook's schedule multiplier (constant, linear, cosine)."""
    from tinker_cookbook.utils.lr_scheduling import compute_schedule_lr_multiplier

    return cfg.resolved_lr() * compute_schedule_lr_multiplier(cfg.lr_schedule, step - 1, max(total, 1))


def lora_settings(cfg: TrainSection) -> Any:
    """machine.toml's `[train]` as the engines' LoraSettings: LoRA, learning rate and Adam (the same on both)."""
    from machine_lsp.engines.base import LoraSettings, OptimizerSettings

    adam = OptimizerSettings(beta1=cfg.adam_beta1, beta2=cfg.adam_beta2, eps=cfg.adam_eps)
    return LoraSettings(rank=cfg.rank, alpha=cfg.alpha, learning_rate=cfg.resolved_lr(), optimizer=adam)


def read_rows(path: Path) -> list[TrainingRow]:
    """Chat rows from a JSONL file through our own parser (tool calls, content parts, extra keys all kept)."""
    try:
        return [row for _line, row in read_training_rows(path)]
    except RowFileError as exc:
        raise DataError(str(exc)) from None


def store_rows(start: Path | None = None) -> list[TrainingRow]:
    """The store's good rows, rewrites applied."""
    from machine_lsp.core.export import export_sft
    from machine_lsp.core.store import Store

    store = Store.open(start)
    rows = export_sft(store.records())
    if not rows:
        raise DataError(
            f"the store ({store.tagged_path}) has no good rows: tag turns with `machine good` first"
        )
    return rows


def training_conversations(data: str | None, base: Path) -> list[list[Message]]:
    """`data` (relative to `base`) or, when None/empty, the store's good rows."""
    if data:
        path = Path(data)
        rows = read_rows(path if path.is_absolute() else base / path)
    else:
        rows = store_rows(base)
    return [row.messages for row in rows]


def planned_size(conversations: list[list[Message]], cfg: TrainSection) -> RunSize:
    """The run size of `conversations` with token counts estimated from characters (train_sft.py's dry run and
    the Tinker script's epochs, before any tokenizer is loaded)."""
    tokens, trained = estimate_tokens(conversations)
    return run_size(len(conversations), cfg, trained_tokens_per_epoch=trained, tokens_per_epoch=tokens)


def datum_size(
    datums: list[Any], cfg: TrainSection, units: int | None = None, *, scoped: bool = False
) -> RunSize:
    """The run size of rendered Datums, from their real token counts (what `machine train run` trains); `units`:
    how many units the schedule batches when a unit is more than one datum (a DPO pair is two); `scoped`: the
    datums include anchors."""
    from machine_lsp.engines import render

    counts = render.count_tokens(datums)
    n = len(datums) if units is None else units
    return run_size(
        n, cfg, trained_tokens_per_epoch=counts.trained, tokens_per_epoch=counts.tokens, scoped=scoped
    )


def datums(conversations: list[list[Message]], renderer: Any, cfg: TrainSection) -> list[Any]:
    from machine_lsp.engines import render

    return render.to_datums(conversations, renderer, train_on=cfg.train_on, max_length=cfg.max_length)


def describe_batch(batch: list[Any]) -> str:
    from machine_lsp.engines import render

    counts = render.count_tokens(batch)
    return f"{len(batch)} rows, {counts.tokens} tokens, {counts.trained} trained tokens"
