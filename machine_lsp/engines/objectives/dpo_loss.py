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


def chosen_nll(weights: Sequence[torch.Tensor], logprobs: Sequence[torch.Tensor]) -> torch.Tensor:
    """RPO's NLL term: -log pi per chosen target token, averaged over all of the batch's chosen tokens (TRL's
    `cross_entropy_loss` over the chosen half, ignore_index on the prompt); weights other than 0/1 weigh tokens."""
    total = torch.stack([sequence_logprob(w, lp) for w, lp in zip(weights, logprobs, strict=True)]).sum()
    tokens = torch.stack([w.float().sum() for w in weights]).sum()
    return -total / tokens.clamp(min=1)


def dpo_loss(
    objective: Objective,
    weights: Sequence[torch.Tensor],
    logprobs: Sequence[torch.Tensor],
    ref_logprobs: Sequence[torch.Tensor],
) -> tuple[torch.Tensor, dict[str, float]]:
    ratios = log_ratios(weights, logprobs, ref_logprobs)
    chosen, rejected = ratios[0::2], ratios[1::2]
    preference = -F.logsigmoid(objective.beta * (chosen - rejected)).mean()
    loss, extra = preference, {}
    if objective.rpo_alpha > 0:  # alpha 0 leaves the graph exactly DPO's (the recorded parity)
        nll = chosen_nll(weights[0::2], logprobs[0::2])
        loss = preference + objective.rpo_alpha * nll
        extra = {"preference_loss": float(preference.detach()), "nll_loss": float(nll.detach())}
    chosen_reward, rejected_reward = objective.beta * chosen.detach(), objective.beta * rejected.detach()
    metrics = {
        "dpo_loss": float(loss.detach()),
        **extra,
        "accuracy": float((chosen > rejected).float().mean()),
        "margin": float((chosen_reward - rejected_reward).mean()),
        "chosen_reward": float(chosen_reward.mean()),
        "rejected_reward": float(rejected_reward.mean()),
        "pairs": float(len(chosen)),
    }
    return loss, metrics
