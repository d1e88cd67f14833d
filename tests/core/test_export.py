"""Exports: SFT rows (good only, rewrites applied) and preference pairs, from records in a real store."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from machine_lsp.core.export import chat_order, export_pairs, export_sft
from machine_lsp.core.schema import Message, ToolCall, ToolFunction, decode_training_row, encode
from machine_lsp.core.store import Store
from machine_lsp.core.tagging import tag
from machine_lsp.core.transcripts import load_turns, turn_at
from machine_lsp.core.validate import validate_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHAT = FIXTURES / "chat.jsonl"
PI_SESSION = FIXTURES / "pi_session_v3.jsonl"


def test_sft_has_good_rows_only_with_rewrites_applied(store: Store) -> None:
    chat = load_turns(CHAT)
    tag(store, turn_at(chat, 1), "good")
    tag(store, turn_at(chat, 2), "bad", note="wrong format")
    tag(store, turn_at(chat, 2), "good", rewrite="answer: 42")
    tag(store, turn_at(load_turns(PI_SESSION), 15), "bad")
    rows = export_sft(store.records())
    assert [row.messages[-1].content for row in rows] == ["answer: 56", "answer: 42"]
    # Every row is valid training JSONL that reads back the same.
    for row in rows:
        assert decode_training_row(encode(row)) == row
    assert all("The answer is 42." not in encode(row).decode() for row in rows)


def test_sft_is_empty_without_good_tags(store: Store) -> None:
    tag(store, turn_at(load_turns(CHAT), 1), "bad")
    assert export_sft(store.records()) == []


def test_pairs_from_a_bad_and_a_good_answer_to_the_same_prompt(store: Store) -> None:
    turns = load_turns(PI_SESSION)
    bad_turn = turn_at(turns, 13)
    tag(store, bad_turn, "bad", note="did not mention the edge case")
    # The same prompt answered well: the user supplies the better answer as a rewrite of the same turn.
    tag(store, bad_turn, "good", rewrite="Fixed, and added a test for '1,234.50'. All 5 tests pass.")
    pairs = export_pairs(store.records())
    # bad vs rewrite, and rewrite vs its original: the same rejected text, so one pair.
    assert len(pairs) == 1
    [pair] = pairs
    assert pair.label == "A"  # the chosen answer is completion_A
    assert [m["role"] for m in pair.comparison.prompt_conversation] == ["user", "assistant", "user"]
    assert pair.comparison.completion_A == [
        {"role": "assistant", "content": "Fixed, and added a test for '1,234.50'. All 5 tests pass."}
    ]
    assert pair.comparison.completion_B[0]["content"].startswith("Fixed: `parse_amount`")


def test_a_rewrite_alone_yields_rewrite_over_original(store: Store) -> None:
    tag(store, turn_at(load_turns(CHAT), 2), "good", rewrite="answer: 42")
    [pair] = export_pairs(store.records())
    assert pair.comparison.completion_A[0]["content"] == "answer: 42"
    assert pair.comparison.completion_B[0]["content"] == "The answer is 42."
    assert pair.comparison.prompt_conversation[-1] == {"role": "user", "content": "What is 12 + 30?"}


def test_pairs_need_a_shared_prompt(store: Store) -> None:
    chat = load_turns(CHAT)
    tag(store, turn_at(chat, 1), "good")
    tag(store, turn_at(chat, 4), "bad")
    assert export_pairs(store.records()) == []


def test_every_good_answer_pairs_with_every_bad_one_for_a_prompt(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    answers = ["answer: 56", "56", "answer: 54", "It is 54."]
    path.write_text(
        "".join(
            f'{{"messages":[{{"role":"user","content":"What is 7 * 8?"}},{{"role":"assistant","content":"{a}"}}]}}\n'
            for a in answers
        )
    )
    turns = load_turns(path)
    tag(store, turn_at(turns, 1), "good")
    tag(store, turn_at(turns, 2), "good")
    tag(store, turn_at(turns, 3), "bad")
    tag(store, turn_at(turns, 4), "bad")
    pairs = export_pairs(store.records())
    sides = [
        (p.comparison.completion_A[0]["content"], p.comparison.completion_B[0]["content"]) for p in pairs
    ]
    assert sorted(sides) == [
        ("56", "It is 54."),
        ("56", "answer: 54"),
        ("answer: 56", "It is 54."),
        ("answer: 56", "answer: 54"),
    ]


def _codex_line(kind: str, **payload) -> str:
    return json.dumps({"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload}) + "\n"


def _codex_message(role: str, text: str) -> str:
    kind = "output_text" if role == "assistant" else "input_text"
    return _codex_line("response_item", type="message", role=role, content=[{"type": kind, "text": text}])


# A Codex rollout with a developer message logged between a call and its output (as real 0.104 rollouts have).
CODEX_INTERLEAVED = "".join(
    [
        _codex_line("session_meta", id="s1"),
        _codex_message("user", "run ls"),
        _codex_line("response_item", type="function_call", name="shell", arguments="{}", call_id="c1"),
        _codex_message("developer", "Approved command prefix saved."),
        _codex_line("response_item", type="function_call_output", call_id="c1", output="a.txt"),
        _codex_message("assistant", "One file: a.txt"),
    ]
)


def test_a_trace_row_puts_a_calls_results_right_after_it(store: Store, tmp_path: Path) -> None:
    """Chat Completions and the cookbook renderers need a call's results directly after it: the developer message
    Codex logged in between moves after the result, in the stored --trace row and in the SFT export, whose rows
    `train validate` then passes."""
    log = tmp_path / "rollout.jsonl"
    log.write_text(CODEX_INTERLEAVED)
    turn = turn_at(load_turns(log, trace=True), None)
    assert [m.role for m in turn.messages] == [
        "user",
        "assistant",
        "system",
        "tool",
        "assistant",
    ]  # the log's
    result = tag(store, turn, "good", trace=True)
    expected = ["user", "assistant", "tool", "system", "assistant"]
    assert [m.role for m in result.record.messages] == expected
    # A record stored in the log's order before this rule exports in chat order all the same.
    old = msgspec.structs.replace(result.record, id="0ld", messages=list(turn.messages), note="older")
    store.append(old)
    [row] = export_sft(store.records())
    assert [m.role for m in row.messages] == expected and row.messages[
        3
    ].content == "Approved command prefix saved."
    assert validate_text(encode(row).decode() + "\n").findings == []
    log_order = msgspec.structs.replace(row, messages=list(turn.messages))
    assert [f.code for f in validate_text(encode(log_order).decode() + "\n").findings] == [
        "tool-results-apart"
    ]


def test_chat_order_moves_only_what_sits_between_calls_and_their_results() -> None:
    calls = [ToolCall(id=i, function=ToolFunction(name="f", arguments="{}")) for i in ("a", "b")]
    note = Message(role="system", content="note")
    messages = [
        Message(role="user", content="go"),
        Message(role="assistant", content="", tool_calls=calls),
        Message(role="tool", content="1", tool_call_id="a"),
        note,
        Message(role="tool", content="2", tool_call_id="b"),
        Message(role="assistant", content="", tool_calls=[calls[0]]),
        note,  # its call's result never came: it stays before the next assistant message
        Message(role="assistant", content="done"),
    ]
    ordered = chat_order(messages)
    assert [(m.role, m.content) for m in ordered] == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "1"),
        ("tool", "2"),
        ("system", "note"),
        ("assistant", ""),
        ("system", "note"),
        ("assistant", "done"),
    ]
    assert chat_order(ordered) == ordered
