"""Training objectives: the loss is a parameter of the trainer step (`Trainer.submit_step(batch, lr, objective)`).

One file per objective, registered by one line in `REGISTRY` below (the way trl keeps one config and one trainer
file per method). Each file declares an `ObjectiveSpec`: its name, the shape of the data it trains on, whether it
needs reference log-probs, and its loss. This package is light (msgspec only) so the config, the jobs and the CLI
can name objectives without importing torch; the losses import torch when they run.

Both engines call a spec's `loss` on the same inputs, per datum of the batch: the policy's log-prob of each target
token (a torch tensor, with gradients), the reference's (no gradients) and the datum's loss weights. SFT is the
exception: it keeps each engine's native cross-entropy (the local fused micro-batch step, Tinker's
`cross_entropy`), so its numbers are exactly what they were before objectives existed.
"""

from __future__ import annotations

from machine_lsp.engines.errors import EngineError
from machine_lsp.engines.objectives import dpo, kto, sft
from machine_lsp.engines.objectives.base import Objective, ObjectiveSpec

#: Every objective, by name: adding one is one file in this package and one entry here.
REGISTRY: dict[str, ObjectiveSpec] = {spec.name: spec for spec in (sft.SPEC, dpo.SPEC, kto.SPEC)}
OBJECTIVE_NAMES: tuple[str, ...] = tuple(REGISTRY)
SFT = Objective()
#: Runs of more than one stage, each stage one registered objective trained from where the previous one stopped.
#: sft+dpo: SFT on the good rows, then DPO on the pairs with the SFT stage's policy as the reference (the DPO paper's
#: pi_ref = pi_SFT; TRL's default reference is the model DPO starts from, the cookbook's the weights at its start).
STAGED: dict[str, tuple[str, ...]] = {"sft+dpo": ("sft", "dpo")}
#: What `[train] objective` / `--objective` accept: one objective, or a staged run.
RUN_OBJECTIVES: tuple[str, ...] = (*OBJECTIVE_NAMES, *STAGED)
STAGED_SUMMARY = {"sft+dpo": "sft on the good rows, then dpo on the pairs from the sft stage's adapter"}


def spec_for(objective: Objective | str) -> ObjectiveSpec:
    """The registered spec of an objective (or its name); unknown names are an EngineError naming the choices."""
    name = objective if isinstance(objective, str) else objective.name
    spec = REGISTRY.get(name)
    if spec is None:
        raise EngineError(f"unknown objective {name!r}: choose one of {', '.join(OBJECTIVE_NAMES)}")
    return spec


__all__ = [
    "OBJECTIVE_NAMES",
    "REGISTRY",
    "RUN_OBJECTIVES",
    "SFT",
    "STAGED",
    "STAGED_SUMMARY",
    "Objective",
    "ObjectiveSpec",
    "spec_for",
]
