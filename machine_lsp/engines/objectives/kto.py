"""KTO (Ethayarajh et al. 2024) as TRL's `KTOTrainer` computes it (its default sigmoid loss).

The batch holds n labelled examples (desirable: a good tag; undesirable: a bad one), then n mismatched examples
(example i's prompt with example i-1's completion; never its own) that estimate the KL reference point:
    kl = clamp(mean(pi_kl - ref_kl), min=0)                       (no gradient, as TRL's `torch.no_grad()` pass)
    desirable:   desirable_weight   * (1 - sigmoid(beta * ((pi - ref) - kl)))
    undesirable: undesirable_weight * (1 - sigmoid(beta * (kl - (pi - ref))))
loss = the mean over the n examples; log-probs are summed over completion tokens (TRL's default).
"""

from __future__ import annotations

from machine_lsp.engines.objectives.base import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="kto",
    summary="Kahneman-Tversky optimization on every good and bad tag, no pairs needed",
    data="examples",
    loss="machine_lsp.engines.objectives.kto_loss:kto_loss",
)


def balanced_desirable_weight(desirable: int, undesirable: int, undesirable_weight: float) -> float:
    """`kto_desirable_weight = "auto"`: the weight that makes desirable_weight * n_desirable equal to
    undesirable_weight * n_undesirable. The KTO paper (section 4.2) advises keeping that ratio in [1, 4/3]; TRL
    leaves it to the user and warns. With 8 good and 32 bad tags, weights of 1 put 4x more of the loss on pushing
    bad answers down than on pulling good ones up. 1.0 when either kind is absent (nothing to balance)."""
    if desirable < 1 or undesirable < 1:
        return 1.0
    return undesirable_weight * undesirable / desirable
