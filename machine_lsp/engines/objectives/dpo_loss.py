"""DPO's loss (see dpo.py): torch, imported only when a step runs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from machine_lsp.engines.objectives.base import Objective


def sequence_logprob(weights: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """The completion's log-probability: the weighted sum of its target tokens' log-probs (cookbook DPO)."""
    return (logprobs.float() * weights.float()).sum()


def log_ratios(
    weights: Sequence[torch.Tensor], logprobs: Sequence[torch.Tensor], ref_logprobs: Sequence[torch.Tensor]
) -> torch.Tensor:
    """Per datum: the policy's completion log-prob minus the reference's."""
    return torch.stack(
        [
            sequence_logprob(w, lp) - sequence_logprob(w, ref).detach()
            for w, lp, ref in zip(weights, logprobs, ref_logprobs, strict=True)
        ]
    )


def dpo_loss(
    objective: Objective,
    weights: Sequence[torch.Tensor],
    logprobs: Sequence[torch.Tensor],
    ref_logprobs: Sequence[torch.Tensor],
) -> tuple[torch.Tensor, dict[str, float]]:
    ratios = log_ratios(weights, logprobs, ref_logprobs)
    chosen, rejected = ratios[0::2], ratios[1::2]
    loss = -F.logsigmoid(objective.beta * (chosen - rejected)).mean()
    chosen_reward, rejected_reward = objective.beta * chosen.detach(), objective.beta * rejected.detach()
    metrics = {
        "dpo_loss": float(loss.detach()),
        "accuracy": float((chosen > rejected).float().mean()),
        "margin": float((chosen_reward - rejected_reward).mean()),
        "chosen_reward": float(chosen_reward.mean()),
        "rejected_reward": float(rejected_reward.mean()),
        "pairs": float(len(chosen)),
    }
    return loss, metrics
