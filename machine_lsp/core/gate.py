"""The eval gate's rules (pure): which tagged rows are held out, and whether a checkpoint may be promoted.

* Held-out split: deterministic, by session (a tagged turn's `session_id`, else the log it came from), so turns of
  one conversation never sit on both sides. Sessions are taken in the order of a hash of their key until at least
  `max(min_rows, fraction * rows)` rows are held out. With a single session (or when whole sessions would leave
  training fewer rows than are held out) the split is by row, and says so. Fewer than `2 * min_rows` rows: no
  split, and the gate is skipped with that reason (an evaluation on a handful of rows proves nothing).
* Decision: the new checkpoint is compared with the reference (the promoted checkpoint, else the base model) on
  the same held-out rows with the exact McNemar test (`evals.mcnemar_exact_p`). It is refused when it is
  significantly worse (more rows lost than gained, p < alpha), when its bleed rate on the off-distribution probe
  is above `max_bleed` (asked bare, and asked inside the tagged rows' system prompts and tools when they have
  any: each rate has the bound), or when it keeps a tool call on fewer than `min_tool_retention` of the tool
  probes where the reference calls one. Anything not measured is recorded as such, never counted as a pass or a fail.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import msgspec

from machine_lsp.core.evals import mcnemar_exact_p


class Split(msgspec.Struct, kw_only=True):
    train: list[int]  # row indices
    held_out: list[int]
    by: str  # "session" | "row"
    sessions_held_out: int = 0
    note: str = ""


def _rank(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def holdout_split(session_keys: Sequence[str], *, min_rows: int, fraction: float) -> Split | str:
    """Indices of the rows to train on and to hold out; a string saying why not when there are too few rows.

    `session_keys[i]` names the session of row i (rows of one session stay together)."""
    n = len(session_keys)
    if n < 2 * min_rows:
        return (
            f"{n} rows are too few for a held-out split (the gate needs {2 * min_rows}: {min_rows} held out "
            "and as many to train on); set [eval] data to a held-out file or tag more turns"
        )
    target = max(min_rows, math.ceil(fraction * n))
    sessions: dict[str, list[int]] = {}
    for i, key in enumerate(session_keys):
        sessions.setdefault(key, []).append(i)
    held: list[int] = []
    taken = 0
    for key in sorted(sessions, key=_rank):
        if len(held) >= target:
            break
        held.extend(sessions[key])
        taken += 1
    if len(sessions) >= 2 and n - len(held) >= len(held):
        held_set = set(held)
        return Split(
            train=[i for i in range(n) if i not in held_set],
            held_out=sorted(held),
            by="session",
            sessions_held_out=taken,
        )
    order = sorted(range(n), key=lambda i: _rank(f"{session_keys[i]}\0{i}"))
    held_set = set(order[:target])
    note = (
        "all rows come from one session: held out by row"
        if len(sessions) < 2
        else "whole sessions would leave too few rows to train on: held out by row"
    )
    return Split(
        train=[i for i in range(n) if i not in held_set],
        held_out=sorted(held_set),
        by="row",
        note=note,
    )


def too_few_held_out(n: int, min_rows: int, where: str) -> str | None:
    """Why a given held-out set is too small for the gate (the same minimum as the split's), or None."""
    if n >= min_rows:
        return None
    return (
        f"{n} held-out rows in {where} are too few for the gate (it needs {min_rows}, [gate] min_eval_rows)"
    )


class GateBounds(msgspec.Struct, kw_only=True):
    alpha: float = 0.05
    max_bleed: float = 0.1
    min_tool_retention: float = 0.9


class GateMetrics(msgspec.Struct, kw_only=True, omit_defaults=False):
    reference: str  # the promoted checkpoint's address, or "base"
    eval_rows: int = 0
    eval_source: str = ""
    reference_correct: int = 0
    candidate_correct: int = 0
    gained: int = 0  # wrong for the reference, right for the candidate
    lost: int = 0
    mcnemar_p: float | None = None
    reference_format_rate: float | None = None
    candidate_format_rate: float | None = None
    reference_bleed_rate: float | None = None
    candidate_bleed_rate: float | None = None
    # the same probe questions asked inside the tagged rows' system prompts and tools (None: every row is bare)
    contexts: int = 0  # distinct (system prompt, tools) contexts among the tagged rows
    context_probes: int = 0
    reference_context_bleed_rate: float | None = None
    candidate_context_bleed_rate: float | None = None
    tool_probes: int = 0
    reference_tool_calls: int = 0  # tool probes where the reference calls a tool
    tool_calls_kept: int = 0  # ... and the candidate calls one too
    tool_retention: float | None = None  # None: the reference calls no tool on the probes (not measurable)
    notes: list[str] = msgspec.field(default_factory=list)


class GateResult(msgspec.Struct, kw_only=True):
    promoted: bool
    reason: str
    metrics: GateMetrics | None = None
    skipped: bool = False


def paired_counts(reference: Sequence[bool], candidate: Sequence[bool]) -> tuple[int, int]:
    """(gained, lost) over rows paired by position."""
    if len(reference) != len(candidate):
        raise ValueError(f"{len(candidate)} candidate results for {len(reference)} reference results")
    gained = sum(1 for r, c in zip(reference, candidate, strict=True) if c and not r)
    lost = sum(1 for r, c in zip(reference, candidate, strict=True) if r and not c)
    return gained, lost


def tool_retention(reference_calls: Sequence[bool], candidate_calls: Sequence[bool]) -> tuple[int, int]:
    """(probes where the reference calls a tool, of those where the candidate still calls one)."""
    base = [i for i, called in enumerate(reference_calls) if called]
    return len(base), sum(1 for i in base if candidate_calls[i])


def decide(metrics: GateMetrics, bounds: GateBounds) -> GateResult:
    """Promote unless the candidate is significantly worse, bleeds too much, or drops tool calls."""
    m = metrics
    m.mcnemar_p = mcnemar_exact_p(m.gained, m.lost)
    if m.reference_tool_calls:
        m.tool_retention = m.tool_calls_kept / m.reference_tool_calls
    refusals: list[str] = []
    if m.lost > m.gained and m.mcnemar_p < bounds.alpha:
        refusals.append(
            f"significantly worse than {m.reference} on {m.eval_rows} held-out rows "
            f"({m.candidate_correct} vs {m.reference_correct} right, lost {m.lost}, gained {m.gained}, "
            f"exact McNemar p = {m.mcnemar_p:.3g} < {bounds.alpha:g})"
        )
    if m.candidate_bleed_rate is not None and m.candidate_bleed_rate > bounds.max_bleed:
        refusals.append(
            f"bleed {m.candidate_bleed_rate:.0%} of the off-distribution probes took the trained format "
            f"(the bound is {bounds.max_bleed:.0%})"
        )
    if m.candidate_context_bleed_rate is not None and m.candidate_context_bleed_rate > bounds.max_bleed:
        refusals.append(
            f"bleed {m.candidate_context_bleed_rate:.0%} of the probes asked in the tagged rows' context "
            f"({m.contexts} system prompt/tools context{'s' * (m.contexts != 1)}) took the trained format "
            f"(the bound is {bounds.max_bleed:.0%})"
        )
    if m.tool_retention is not None and m.tool_retention < bounds.min_tool_retention:
        refusals.append(
            f"tool calls kept on {m.tool_calls_kept}/{m.reference_tool_calls} probes where {m.reference} "
            f"calls a tool ({m.tool_retention:.0%}, the bound is {bounds.min_tool_retention:.0%})"
        )
    if refusals:
        return GateResult(promoted=False, reason="not promoted: " + "; ".join(refusals), metrics=m)
    verdict = (
        f"{m.candidate_correct}/{m.eval_rows} vs {m.reference_correct}/{m.eval_rows} held-out rows right "
        f"(gained {m.gained}, lost {m.lost}, p = {m.mcnemar_p:.3g})"
    )
    if m.candidate_bleed_rate is not None:
        verdict += f", bleed {m.candidate_bleed_rate:.0%}"
    if m.candidate_context_bleed_rate is not None:
        verdict += f" ({m.candidate_context_bleed_rate:.0%} in the tagged rows' context)"
    verdict += (
        f", tool calls kept {m.tool_calls_kept}/{m.reference_tool_calls}"
        if m.tool_retention is not None
        else ", tool retention not measurable (the reference calls no tool on the probes)"
    )
    return GateResult(promoted=True, reason=f"promoted over {m.reference}: {verdict}", metrics=m)


def skipped(reason: str) -> GateResult:
    """A gate that could not run: nothing is promoted, and the reason says why."""
    return GateResult(promoted=False, reason=f"gate skipped: {reason}", skipped=True)
