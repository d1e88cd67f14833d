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
