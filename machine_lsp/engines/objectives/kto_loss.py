"""KTO's loss (see kto.py): torch, imported only when a step runs."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from machine_lsp.engines.objectives.base import Objective
from machine_lsp.engines.objectives.dpo_loss import log_ratios


def kto_loss(
    objective: Objective,
    weights: Sequence[torch.Tensor],
    logprobs: Sequence[torch.Tensor],
    ref_logprobs: Sequence[torch.Tensor],
) -> tuple[torch.Tensor, dict[str, float]]:
    assert objective.labels is not None  # ObjectiveSpec.check_batch ran first
    n = len(objective.labels)
    ratios = log_ratios(weights, logprobs, ref_logprobs)
    examples, mismatched = ratios[:n], ratios[n:].detach()
    kl = mismatched.mean().clamp(min=0)
    desirable = torch.tensor(objective.labels, dtype=torch.bool)
    beta = objective.beta
    losses = torch.where(
        desirable,
        objective.desirable_weight * (1 - torch.sigmoid(beta * (examples - kl))),
        objective.undesirable_weight * (1 - torch.sigmoid(beta * (kl - examples))),
    )
    loss = losses.mean()
    rewards = beta * examples.detach()
    metrics = {
        "kto_loss": float(loss.detach()),
        "kl": float(kl),
        "desirable": float(desirable.sum()),
        "undesirable": float((~desirable).sum()),
    }
    if bool(desirable.any()):
        metrics["chosen_reward"] = float(rewards[desirable].mean())
    if bool((~desirable).any()):
        metrics["rejected_reward"] = float(rewards[~desirable].mean())
    return loss, metrics
