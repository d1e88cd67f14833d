"""DPO (Rafailov et al. 2023) as tinker-cookbook's `preference/train_dpo.py` computes it.

loss = mean over pairs of -logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), where pi and ref are a completion's
summed target-token log-probs under the policy and the reference. The batch holds each pair's chosen datum then its
rejected one (even, odd indices), built with reduction "none" (0/1 weights, so a sequence's log-prob is a token sum).

RPO (Pang et al. 2024, "Iterative Reasoning Preference Optimization"; TRL's `DPOConfig.rpo_alpha`): with
`rpo_alpha` > 0 the loss is DPO's plus rpo_alpha * the NLL of the chosen answers, as TRL computes it: the mean of
-log pi over every chosen target token of the batch (one cross-entropy over the chosen half with the prompt masked,
so a long answer weighs more than a short one; not a mean of per-answer means). DPO sees only the difference of the
chosen and rejected log-probs, so what both answers share (here: the right sum) gets no signal; the NLL term trains
the chosen answer itself and keeps its likelihood from falling with the rejected one's.
"""

from __future__ import annotations

from machine_lsp.engines.objectives.base import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="dpo",
    summary="direct preference optimization on (chosen, rejected) pairs: rewrites and good/bad tags of a prompt",
    data="pairs",
    loss="machine_lsp.engines.objectives.dpo_loss:dpo_loss",
)
