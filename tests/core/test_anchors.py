"""The anchor rules (pure): the pool is disjoint from the gate's probes, the count follows the ratio."""

from __future__ import annotations

import pytest

from machine_lsp.core import anchors, evals
from machine_lsp.core.schema import Message
from machine_lsp.core.tool_probes import TOOL_PROBES
from machine_lsp.scaffold.config import ConfigError, MachineConfig, apply_overrides


def test_the_pool_shares_no_question_with_the_gates_probes() -> None:
    # The gate's bleed probe and tool probe must not score the run on its own training data.
    probes = [*evals.BUILTIN_PROBES, *(question for _tools, question in TOOL_PROBES)]
    assert anchors.near_duplicates(anchors.ANCHOR_POOL, probes) == []
    assert len(set(anchors.ANCHOR_POOL)) == len(anchors.ANCHOR_POOL)


def test_count_follows_the_ratio_up_to_the_pool() -> None:
    assert anchors.anchor_count(20, 0.5) == 10
    assert anchors.anchor_count(7, 0.5) == 4  # rounded up: a handful of rows still gets anchors
    assert anchors.anchor_count(20, 0) == 0 and anchors.anchor_count(0, 0.5) == 0
    assert anchors.anchor_count(1000, 0.5) == len(anchors.ANCHOR_POOL)


def test_agent_turns_take_up_to_half() -> None:
    assert anchors.split_sources(10, 3) == (3, 7)
    assert anchors.split_sources(10, 20) == (5, 5)
    assert anchors.split_sources(1, 1) == (1, 0)
    assert anchors.split_sources(6, 0) == (0, 6)


def test_pool_prompts_cover_every_kind_and_follow_the_seed() -> None:
    picked = [p.messages[0].content for p in anchors.pool_prompts(0, 5, [])]
    kinds = {k for k, group in anchors.ANCHOR_POOL_BY_KIND.items() for q in picked if q in group}
    assert kinds == set(anchors.ANCHOR_POOL_BY_KIND)
    assert picked == [p.messages[0].content for p in anchors.pool_prompts(0, 5, [])]
    assert picked != [p.messages[0].content for p in anchors.pool_prompts(1, 5, [])]


def test_a_pool_question_resembling_a_user_probe_is_left_out() -> None:
    probe = "Who painted the famous Mona Lisa?"  # a user's probe question, reworded
    picked = [p.messages[0].content for p in anchors.pool_prompts(0, len(anchors.ANCHOR_POOL), [probe])]
    assert "Who painted the Mona Lisa?" not in picked and len(picked) == len(anchors.ANCHOR_POOL) - 1


def test_an_agent_turns_request_keeps_its_system_prompt() -> None:
    messages = [
        Message(role="system", content="You are an agent."),
        Message(role="user", content="List the files."),
        Message(role="assistant", content="Here they are."),
    ]
    assert anchors.turn_prompt(messages) == messages[:2]
    assert anchors.turn_prompt([Message(role="system", content="x")]) is None


def test_a_cut_answer_loses_its_last_sentence() -> None:
    assert anchors.tidy_answer("Paris is the capital. It has") == "Paris is the capital."
    assert anchors.tidy_answer("It has a long") == ""
    assert anchors.tidy_answer("Done.") == "Done."


def test_scope_and_ratio_are_settings() -> None:
    assert MachineConfig().train.scope == "auto" and MachineConfig().train.anchor_ratio == 0.5
    off = apply_overrides(MachineConfig(), {"scope": "off", "anchor_ratio": 1.0})
    assert off.train.scope == "off" and off.train.anchor_ratio == 1.0
    with pytest.raises(ConfigError, match="anchor_ratio must be in"):
        apply_overrides(MachineConfig(), {"anchor_ratio": -1})
    with pytest.raises(ConfigError, match="scope"):
        apply_overrides(MachineConfig(), {"scope": "sometimes"})


def test_the_plan_counts_the_anchors(tmp_path) -> None:
    from anchor_project import tag_rows

    from machine_lsp.scaffold.estimate import estimate_job

    (tmp_path / ".machine").mkdir()
    tag_rows(tmp_path, 12)
    (tmp_path / "machine.toml").write_text("[train]\ndata = 'elsewhere.jsonl'\n")  # retrain reads the store
    estimate = estimate_job("retrain", tmp_path, {})
    assert estimate is not None and estimate.size is not None
    assert estimate.rows == 12 and estimate.size.anchors == 6 and estimate.size.rows == 18
    assert "18 rows (12 + 6 anchors)" in estimate.describe()
    off = estimate_job("retrain", tmp_path, {"scope": "off"})
    assert off is not None and off.size is not None and off.size.anchors == 0
    assert "anchors" not in off.describe()


def test_every_second_pool_request_is_asked_in_a_tagged_context() -> None:
    system = Message(role="system", content="You are a coding agent.")
    tool = {"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object"}}}
    contexts = evals.distinct_contexts(
        [evals.row_context([system, Message(role="user", content="2+2?")], [tool]), None]
    )
    pool = anchors.pool_prompts(0, 4, [])
    placed = anchors.in_tagged_contexts(pool, contexts)
    assert [p.messages[-1] for p in placed] == [p.messages[-1] for p in pool]  # the same requests
    assert [len(p.messages) for p in placed] == [1, 2, 1, 2]
    assert placed[1].messages[0] == system and placed[1].tools == [tool]
    assert placed[1].origin == anchors.IN_CONTEXT_ORIGIN and placed[0].tools is None
    assert anchors.in_tagged_contexts(pool, []) == pool  # bare tagged rows: bare anchors


def test_where_the_tagged_context_offers_tools_its_slots_ask_workspace_requests() -> None:
    system = Message(role="system", content="You are a coding agent.")
    tool = {"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object"}}}
    with_tools = evals.row_context([system, Message(role="user", content="2+2?")], [tool])
    without = evals.row_context([system, Message(role="user", content="3+3?")], None)
    pool = anchors.pool_prompts(0, 6, [])
    requests = anchors.tool_requests(0, [])
    placed = anchors.in_tagged_contexts(pool, [with_tools, without], requests)
    # slots 1 and 5 fall to the context with tools: workspace requests there; slot 3 keeps its pool request
    assert [p.messages[-1].content for p in placed[1::2]] == [
        requests[0],
        pool[3].messages[-1].content,
        requests[1],
    ]
    assert [p.origin for p in placed[1::2]] == [
        anchors.TOOL_REQUEST_ORIGIN,
        anchors.IN_CONTEXT_ORIGIN,
        anchors.TOOL_REQUEST_ORIGIN,
    ]
    assert placed[1].tools == [tool] and placed[1].messages[0] == system and placed[3].tools is None
    assert placed[0::2] == pool[0::2]  # the bare half is untouched
    # the requests are disjoint from the gate's tool probe (rewordings too), and a clashing one is left out
    probes = [question for _tools, question in TOOL_PROBES]
    assert not anchors.near_duplicates(anchors.TOOL_REQUESTS, probes)
    assert "Show me the last commit message." not in anchors.tool_requests(
        0, ["Show me the last commit message"]
    )
    assert sorted(anchors.tool_requests(3, [])) == sorted(anchors.TOOL_REQUESTS)


def test_rows_asked_where_tools_were_offered_get_workspace_requests_on_top() -> None:
    system = Message(role="system", content="You are a coding agent.")
    tool = {"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object"}}}
    with_tools = evals.row_context([system, Message(role="user", content="2+2?")], [tool])
    without = evals.row_context([system, Message(role="user", content="3+3?")], None)
    assert anchors.tool_anchor_count(10, 0.5) == 5 and anchors.tool_anchor_count(0, 0.5) == 0
    assert anchors.tool_anchor_count(10, 0) == 0
    assert anchors.tool_anchor_count(100, 1) == len(anchors.TOOL_REQUESTS)
    requests = anchors.tool_requests(0, [])[:3]
    placed = anchors.tool_context_prompts(requests, [without, with_tools])
    assert [p.messages for p in placed] == [[system, Message(role="user", content=r)] for r in requests]
    assert all(p.tools == [tool] and p.origin == anchors.TOOL_REQUEST_ORIGIN for p in placed)
    assert anchors.tool_context_prompts(requests, [without]) == []  # no context offers tools: none
