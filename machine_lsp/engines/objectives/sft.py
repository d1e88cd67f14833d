"""SFT: cross-entropy on the assistant tokens, each engine's native loss (the default objective)."""

from __future__ import annotations

from machine_lsp.engines.objectives.base import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="sft",
    summary="supervised fine-tuning on good rows (rewrites applied)",
    data="rows",
    builtin="cross_entropy",
)
