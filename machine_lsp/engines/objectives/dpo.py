"""DPO (Rafailov et al. 2023) as tinker-cookbook's `preference/train_dpo.py` computes it.

loss = mean over pairs of -logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), where pi and ref are a completion's
summed target-token log-probs under the policy and the reference. The batch holds each pair's chosen datum then its
rejected one (even, odd indices), built with reduction "none" (0/1 weights, so a sequence's log-prob is a token sum).
"""

from __future__ import annotations

from machine_lsp.engines.objectives.base import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="dpo",
    summary="direct preference optimization on (chosen, rejected) pairs: rewrites and good/bad tags of a prompt",
    data="pairs",
    needs_reference=True,
    loss="machine_lsp.engines.objectives.dpo_loss:dpo_loss",
)
