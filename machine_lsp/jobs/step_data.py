"""What each step of a training run trains on, per objective (machine.toml `[train] objective`).

* sft: chat rows (a FILE or the store's good rows, `jobs.data.training_data`), one datum each.
* dpo: comparison rows (a pairs FILE, or the store's pairs: `core.export.build_pairs`), two datums each, chosen then
  rejected, rendered with reduction "none" so a completion's log-prob is a token sum (the cookbook's DPO datums).
  Ties carry no preference and are skipped, as the cookbook's DPO dataset skips them.
* kto: KTO rows (a FILE, or every good and bad tag: `core.export.build_kto`); a step's batch is its examples then,
  for each example i, example i's prompt with example i-1's completion (TRL's mismatched pairs for the KL point).

`StepData.batch(indices)` gives a step's datums and the Objective it trains with; the schedule (`scaffold.support
.schedule`) cuts the run into steps over `StepData.count` units (rows, pairs or examples).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from machine_lsp.core import runs
from machine_lsp.core.preference import ComparisonRow, KtoRow, PairCounts, messages_of
from machine_lsp.core.schema import Message, RowFileError, TrainingRow
from machine_lsp.engines.objectives.kto import balanced_desirable_weight
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.scaffold.config import TrainSection

KTO_NEEDS_TWO = "kto needs at least 2 examples: its KL estimate pairs a prompt with another example's answer"
COMPLETION_ONLY = (
    "last_assistant_message"  # the completion is the last assistant message of each rendered row
)


class StepData:
    """Rendered units of one run and how a step's batch is made from them."""

    def __init__(self, cfg: TrainSection, renderer: Any, prompts: list[list[Message]]) -> None:
        from machine_lsp.engines.objectives import Objective

        self.cfg, self.renderer, self.prompts = cfg, renderer, prompts
        self.objective = Objective(
            name=cfg.objective,
            beta=cfg.beta,
            rpo_alpha=cfg.rpo_alpha if cfg.objective == "dpo" else 0.0,
            desirable_weight=1.0 if cfg.kto_desirable_weight == "auto" else cfg.kto_desirable_weight,
            undesirable_weight=cfg.kto_undesirable_weight,
        )
        self.units: list[list[Any]] = []  # the datums of each unit

    @property
    def count(self) -> int:
        return len(self.units)

    def batch(self, indices: Sequence[int]) -> tuple[list[Any], Any]:
        return [d for i in indices for d in self.units[i]], (
            None if self.cfg.objective == "sft" else self.objective
        )

    def prompt(self, index: int) -> list[Message]:
        """Unit `index`'s prompt (the smoke run samples an answer to it)."""
        return self.prompts[index]

    def render(self, messages: Sequence[Message], where: str, **options: Any) -> Any:
        from machine_lsp.engines import render
        from machine_lsp.engines.base import EngineError

        try:
            return render.to_datum(messages, self.renderer, max_length=self.cfg.max_length, **options)
        except EngineError as exc:
            raise JobError(f"{where}: {exc}") from None


class KtoStepData(StepData):
    def __init__(self, cfg: TrainSection, renderer: Any, rows: list[tuple[str, KtoRow]]) -> None:
        self.rows = [(where, messages_of(r.prompt), messages_of(r.completion), r.label) for where, r in rows]
        super().__init__(cfg, renderer, [prompt for _, prompt, _, _ in self.rows])
        for where, prompt, completion, _ in self.rows:
            self.units.append([self.render([*prompt, *completion], where, **_PREFERENCE_RENDER)])
        if cfg.kto_desirable_weight == "auto":
            good = sum(1 for row in self.rows if row[3])
            weight = balanced_desirable_weight(good, len(self.rows) - good, cfg.kto_undesirable_weight)
            self.objective = msgspec.structs.replace(self.objective, desirable_weight=weight)

    def batch(self, indices: Sequence[int]) -> tuple[list[Any], Any]:
        """The examples, then each one's prompt with the previous example's completion (the last one's for the
        first); a batch of one (an epoch's last) borrows the completion of its neighbour in the data."""
        if self.count < 2:
            raise JobError(
                "kto needs at least 2 examples: its KL estimate pairs a prompt with another's answer"
            )
        pool = list(indices) if len(indices) > 1 else [indices[0], (indices[0] - 1) % self.count]
        examples = [self.units[i][0] for i in indices]
        mismatched = []
        for j, i in enumerate(indices):
            where, prompt, _, _ = self.rows[i]
            other = self.rows[pool[j - 1]][2]
            mismatched.append(self.render([*prompt, *other], f"{where} (KL pair)", **_PREFERENCE_RENDER))
        labels = [self.rows[i][3] for i in indices]
        return examples + mismatched, self.objective.for_batch(labels)


_PREFERENCE_RENDER: dict[str, Any] = {"train_on": COMPLETION_ONLY, "reduction": "none"}


def sft_step_data(
    cfg: TrainSection, renderer: Any, labelled: list[tuple[str, TrainingRow]], *, by_token: bool = False
) -> StepData:
    """One datum per row; `by_token`: every trained token weighs the same (`render.token_weighted`), not every
    row (each row's mean, the cookbook's default)."""
    from machine_lsp.engines import render

    data = StepData(cfg, renderer, [_prompt_of(row.messages) for _, row in labelled])
    reduction = "none" if by_token else "mean"
    for where, row in labelled:
        options = {"train_on": cfg.train_on, "tools": row.extra.get("tools"), "reduction": reduction}
        data.units.append([data.render(row.messages, where, **options)])
    if by_token:
        data.units = [[datum] for datum in render.token_weighted([unit[0] for unit in data.units])]
    return data


def dpo_step_data(
    cfg: TrainSection, renderer: Any, rows: list[tuple[str, ComparisonRow]]
) -> tuple[StepData, int]:
    """(the pairs' datums, ties skipped)."""
    data, ties = StepData(cfg, renderer, []), 0
    for where, row in rows:
        sides = row.chosen_rejected()
        if sides is None:
            ties += 1
            continue
        prompt = messages_of(row.comparison.prompt_conversation)
        data.prompts.append(prompt)
        chosen, rejected = (messages_of(side) for side in sides)
        pair = [data.render([*prompt, *side], where, **_PREFERENCE_RENDER) for side in (chosen, rejected)]
        data.units.append(pair)
    return data, ties


def _prompt_of(messages: Sequence[Message]) -> list[Message]:
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=len(messages))
    return list(messages[:last])


def preference_rows(
    ctx: JobContext, cfg: TrainSection
) -> tuple[list[tuple[str, Any]], runs.DataSnapshot, PairCounts]:
    """The objective's rows labelled by where they came from, the snapshot and how they were built."""
    from machine_lsp.core.preference import read_comparison_rows, read_kto_rows
    from machine_lsp.jobs.data import resolve, validate_or_fail

    kind = "pairs" if cfg.objective == "dpo" else "kto"
    if cfg.data:
        path = resolve(ctx.cwd, cfg.data)
        if not path.is_file():
            raise JobError(f"{cfg.data}: no such file" if not path.exists() else f"{cfg.data}: not a file")
        validate_or_fail(path, kind, ctx)
        try:
            rows = read_comparison_rows(path) if kind == "pairs" else read_kto_rows(path)
        except RowFileError as exc:
            raise JobError(str(exc)) from None
        counts = PairCounts(source=str(path))
        snapshot = runs.DataSnapshot(
            role="train", source=str(path), path=str(path), sha256=runs.sha256_file(path), rows=len(rows)
        )
        return (
            [(f"{path.name}:{line}", row) for line, row in rows],
            snapshot,
            _counted(counts, [r for _, r in rows]),
        )
    return _store_rows(ctx, kind)


def _store_rows(ctx: JobContext, kind: str) -> tuple[list[tuple[str, Any]], runs.DataSnapshot, PairCounts]:
    from machine_lsp.core.export import build_kto, build_pairs
    from machine_lsp.jobs.data import store_records

    store, records = store_records(ctx)
    rows, counts = build_pairs(records) if kind == "pairs" else build_kto(records)
    if not rows:
        need = "a rewrite, or a good and a bad tag on one prompt" if kind == "pairs" else "good or bad tags"
        raise JobError(f"the store ({store.tagged_path}) has no {kind} to train on yet: it needs {need}")
    (ctx.run_dir / "data").mkdir(exist_ok=True)
    snap = ctx.run_dir / "data" / f"{kind}.jsonl"
    payload = b"".join(msgspec.json.encode(row) + b"\n" for row in rows)
    snap.write_bytes(payload)
    snapshot = runs.DataSnapshot(
        role="train", source="store", path=str(snap), sha256=runs.sha256_bytes(payload), rows=len(rows)
    )
    return [(f"store {kind} row {i}", row) for i, row in enumerate(rows, start=1)], snapshot, counts


def _counted(counts: PairCounts, rows: Sequence[Any]) -> PairCounts:
    """A file's counts: its pairs (ties included) or its desirable/undesirable examples."""
    if rows and isinstance(rows[0], ComparisonRow):
        counts.pairs = len(rows)
    else:
        counts.desirable = sum(1 for r in rows if r.label)
        counts.undesirable = len(rows) - counts.desirable
    return counts


class LoadedRows(msgspec.Struct):
    """A run's rows for its objective, before rendering (read before the engine starts: bad data fails fast)."""

    rows: list[Any]  # (where, TrainingRow | ComparisonRow | KtoRow)
    snapshot: runs.DataSnapshot
    counts: PairCounts | None = None


def load_rows(ctx: JobContext, cfg: TrainSection) -> LoadedRows:
    """The objective's rows and their snapshot (sft: chat rows; dpo: pairs; kto: examples)."""
    from machine_lsp.jobs.data import training_data

    if cfg.objective == "sft":
        labelled, snapshot = training_data(ctx, cfg.data)
        return LoadedRows(list(labelled), snapshot)
    rows, snapshot, counts = preference_rows(ctx, cfg)
    if cfg.objective == "kto" and len(rows) < 2:  # before the model loads
        raise JobError(f"{snapshot.source}: {KTO_NEEDS_TWO}")
    return LoadedRows(rows, snapshot, counts)


def step_data(
    ctx: JobContext, cfg: TrainSection, loaded: LoadedRows, renderer: Any, *, scoped: bool = False
) -> StepData:
    """The run's rendered StepData (`scoped`: anchors were added); a preference objective's settings and counts
    go to the manifest."""
    if cfg.objective == "sft":
        by_token = cfg.loss_weighting == "token" or (cfg.loss_weighting == "auto" and scoped)
        weighting = "token" if by_token else "row"
        ctx.update(objective={"name": "sft", "loss_weighting": weighting})
        ctx.log(f"loss: every trained {weighting} weighs the same ([train] loss_weighting)")
        return sft_step_data(cfg, renderer, loaded.rows, by_token=by_token)
    counts = loaded.counts or PairCounts(source=loaded.snapshot.source)
    data: StepData
    if cfg.objective == "dpo":
        data, counts.ties_skipped = dpo_step_data(cfg, renderer, loaded.rows)
        if not data.count:
            raise JobError(f"{loaded.snapshot.source}: every pair is a Tie: no preference to train on")
    else:
        data = KtoStepData(cfg, renderer, loaded.rows)
    ctx.update(
        objective={
            "name": cfg.objective,
            "beta": cfg.beta,
            **({"rpo_alpha": cfg.rpo_alpha} if cfg.objective == "dpo" else {}),
            **_weights(cfg, data.objective),
            "counts": msgspec.to_builtins(counts),
        }
    )
    return data


def _weights(cfg: TrainSection, objective: Any) -> dict[str, Any]:
    """KTO's class weights as trained (an "auto" desirable weight resolved from the counts) and as set."""
    if cfg.objective != "kto":
        return {}
    return {
        "desirable_weight": objective.desirable_weight,
        "desirable_weight_setting": cfg.kto_desirable_weight,
        "undesirable_weight": objective.undesirable_weight,
    }
