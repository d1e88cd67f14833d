"""The objective types: `Objective` (what a step trains with) and `ObjectiveSpec` (what an objective file declares)."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec

from machine_lsp.engines.errors import EngineError

DataShape = Literal["rows", "pairs", "examples"]
#: (objective, per-datum loss weights, policy log-probs, reference log-probs) -> (loss tensor, metrics); torch
#: tensors, per datum of the batch.
LossFn = Callable[["Objective", Sequence[Any], Sequence[Any], Sequence[Any]], tuple[Any, dict[str, float]]]

DEFAULT_BETA = 0.1  # tinker-cookbook's dpo_beta and TRL's KTOConfig.beta


class Objective(msgspec.Struct, frozen=True, kw_only=True):
    """The loss of one training step and its settings (machine.toml `[train]` objective, beta, rpo_alpha,
    kto_*_weight).

    `labels` is per-batch data for KTO: for each example of the batch, whether it is desirable (a good tag).
    """

    name: str = "sft"
    beta: float = DEFAULT_BETA
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0
    #: dpo: weight of the NLL of the chosen answer added to the DPO loss (RPO; TRL's `rpo_alpha`); 0: pure DPO
    rpo_alpha: float = 0.0
    labels: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        if not (self.beta > 0 and math.isfinite(self.beta)):
            raise EngineError(f"beta must be a positive number, got {self.beta}")
        for what, value in (
            ("desirable_weight", self.desirable_weight),
            ("undesirable_weight", self.undesirable_weight),
        ):
            if not (value > 0 and math.isfinite(value)):
                raise EngineError(f"{what} must be a positive number, got {value}")
        if not (self.rpo_alpha >= 0 and math.isfinite(self.rpo_alpha)):
            raise EngineError(f"rpo_alpha must be a number >= 0, got {self.rpo_alpha}")

    def for_batch(self, labels: Sequence[bool]) -> Objective:
        """This objective carrying one batch's KTO labels."""
        return msgspec.structs.replace(self, labels=tuple(bool(x) for x in labels))


class ObjectiveSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What an objective file registers.

    data: rows (chat rows, one datum each), pairs (chosen then rejected datum, interleaved as the cookbook's DPO
    batches are) or examples (KTO: n labelled examples then n mismatched ones for the KL reference point).
    builtin: the engines' native loss for this objective (SFT's cross-entropy); None: `loss` on log-probs (the
    engines compute the reference's log-probs for every such loss: a LossFn takes them).
    loss: "module:function" of the loss (a LossFn), imported when a step runs: torch stays out of the config, the
    CLI and the language server, which name objectives through this registry.
    """

    name: str
    summary: str
    data: DataShape
    loss: str | None = None
    builtin: str | None = None

    def loss_fn(self) -> LossFn:
        if self.loss is None:
            raise EngineError(f"objective {self.name} trains with the engine's built-in {self.builtin} loss")
        module, _, name = self.loss.partition(":")
        return getattr(importlib.import_module(module), name)

    def check_batch(self, objective: Objective, size: int) -> None:
        """Refuse a batch that does not have this objective's shape (before any compute)."""
        if size < 1:
            raise EngineError("the batch is empty")
        if self.data == "pairs" and size % 2:
            raise EngineError(f"{self.name} needs (chosen, rejected) datum pairs, got an odd batch of {size}")
        if self.data == "examples":
            labels = objective.labels
            if labels is None or 2 * len(labels) != size:
                raise EngineError(
                    f"{self.name} needs a label per example and as many mismatched KL examples "
                    f"({size} datums, {0 if labels is None else len(labels)} labels)"
                )
