"""How the local engine lays out a step: rows grouped into micro-batches by length, and whether the output head can
run only where the loss needs it. Below `local.py`, `local_objectives.py` and `local_packing.py`, which all use it
(its own module so that none of them imports another back)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def length_groups(lengths: Sequence[int], max_tokens: int, max_padding: float) -> list[list[int]]:
    """Row indices grouped by length, longest first: each group's padding fraction stays <= `max_padding` and
    its padded size (rows x longest) <= `max_tokens` (a single longer row still gets its own group)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    real = 0
    for i in order:
        if current:
            padded = lengths[current[0]] * (len(current) + 1)
            waste = 1.0 - (real + lengths[i]) / padded
            if padded > max_tokens or waste > max_padding:
                groups.append(current)
                current, real = [], 0
        current.append(i)
        real += lengths[i]
    if current:
        groups.append(current)
    return groups


def fast_head(lm: Any) -> bool:
    """Run the decoder stack without the output head, so the head runs only where the loss needs it. Models that
    post-process logits (soft-capping, scaling) take the plain full forward instead."""
    return not any(getattr(lm.config, a, None) for a in ("final_logit_softcapping", "logit_scale"))
