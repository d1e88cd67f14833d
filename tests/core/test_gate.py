"""The gate's rules: the held-out split and the promote-or-refuse decision."""

from __future__ import annotations

import pytest

from machine_lsp.core import gate


def test_split_is_by_session_deterministic_and_disjoint() -> None:
    keys = [f"s{i // 3}" for i in range(24)]  # 8 sessions of 3 rows
    split = gate.holdout_split(keys, min_rows=6, fraction=0.25)
    assert isinstance(split, gate.Split) and split.by == "session"
    assert sorted(split.train + split.held_out) == list(range(24)) and len(split.held_out) >= 6
    held_sessions = {keys[i] for i in split.held_out}
    assert not held_sessions & {keys[i] for i in split.train}  # a session is on one side only
    again = gate.holdout_split(list(reversed(keys)), min_rows=6, fraction=0.25)
    assert isinstance(again, gate.Split)
    assert {list(reversed(keys))[i] for i in again.held_out} == held_sessions  # order does not matter


def test_one_session_is_split_by_row_and_says_so() -> None:
    split = gate.holdout_split(["only"] * 12, min_rows=6, fraction=0.25)
    assert isinstance(split, gate.Split) and split.by == "row" and "one session" in split.note
    assert len(split.held_out) == 6 and len(split.train) == 6


def test_too_few_rows_skip_the_gate_with_the_reason() -> None:
    reason = gate.holdout_split([f"s{i}" for i in range(10)], min_rows=6, fraction=0.25)
    assert isinstance(reason, str) and "10 rows are too few" in reason and "needs 12" in reason
    assert gate.skipped(reason).promoted is False
    assert gate.too_few_held_out(3, 6, "eval.jsonl") == (
        "3 held-out rows in eval.jsonl are too few for the gate (it needs 6, [gate] min_eval_rows)"
    )
    assert gate.too_few_held_out(6, 6, "eval.jsonl") is None


def _metrics(**kw: object) -> gate.GateMetrics:
    return gate.GateMetrics(reference="base", eval_rows=10, **kw)  # type: ignore[arg-type]


def test_significantly_worse_is_refused() -> None:
    gained, lost = gate.paired_counts([True] * 8 + [False] * 2, [False] * 8 + [False] * 2)
    assert (gained, lost) == (0, 8)
    result = gate.decide(_metrics(gained=0, lost=8, reference_correct=8), gate.GateBounds())
    assert not result.promoted and "significantly worse" in result.reason
    assert result.metrics is not None and result.metrics.mcnemar_p == pytest.approx(2 / 256)


def test_the_same_model_is_not_significantly_worse() -> None:
    same = [True, False] * 5
    gained, lost = gate.paired_counts(same, same)
    result = gate.decide(_metrics(gained=gained, lost=lost), gate.GateBounds())
    assert result.promoted and result.metrics is not None and result.metrics.mcnemar_p == 1.0
    assert "tool retention not measurable" in result.reason


def test_a_few_lost_rows_are_not_significant() -> None:  # 5 lost, 0 gained: p = 0.0625
    assert gate.decide(_metrics(gained=0, lost=5), gate.GateBounds()).promoted


def test_bleed_and_tool_retention_bounds() -> None:
    bled = gate.decide(_metrics(candidate_bleed_rate=0.5), gate.GateBounds(max_bleed=0.1))
    assert not bled.promoted and "bleed 50%" in bled.reason
    base, kept = gate.tool_retention([True, True, True, False], [True, False, False, True])
    assert (base, kept) == (3, 1)
    dropped = gate.decide(_metrics(reference_tool_calls=base, tool_calls_kept=kept), gate.GateBounds())
    assert not dropped.promoted and "tool calls kept on 1/3" in dropped.reason


def test_bleed_in_the_tagged_rows_context_has_the_same_bound() -> None:
    # measured: a checkpoint taught in Pi's context bled 0/10 bare and 2/10 asked with Pi's system prompt
    in_context = _metrics(
        candidate_bleed_rate=0.0, candidate_context_bleed_rate=0.2, contexts=1, context_probes=12
    )
    refused = gate.decide(in_context, gate.GateBounds(max_bleed=0.1))
    assert not refused.promoted
    assert "bleed 20% of the probes asked in the tagged rows' context (1 system prompt/tools context)" in (
        refused.reason
    )
    kept = gate.decide(
        _metrics(candidate_bleed_rate=0.0, candidate_context_bleed_rate=0.0, contexts=2), gate.GateBounds()
    )
    assert kept.promoted and "(0% in the tagged rows' context)" in kept.reason
    bare = gate.decide(_metrics(candidate_bleed_rate=0.0), gate.GateBounds())  # every tagged row bare
    assert bare.promoted and "context" not in bare.reason
