"""tag(): records from real transcript turns into a real store; rewrites, refusals, duplicates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp import __version__
from machine_lsp.core.schema import text_of
from machine_lsp.core.store import Store
from machine_lsp.core.tagging import TagRefused, tag
from machine_lsp.core.transcripts import load_turns, turn_at

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PI_SESSION = FIXTURES / "pi_session_v3.jsonl"
CHAT = FIXTURES / "chat.jsonl"


def test_tag_good_stores_the_conversation_and_its_source(store: Store) -> None:
    turn = turn_at(load_turns(PI_SESSION), 13)
    result = tag(store, turn, "good", note="clear and correct")
    assert not result.duplicate
    [stored] = store.records()
    assert stored == result.record
    assert stored.verdict == "good" and stored.note == "clear and correct"
    assert stored.messages == turn.messages
    assert stored.source == turn.source and stored.source.entry_id == "b2f4000a"
    assert stored.tool_version == __version__
    assert stored.created_at.endswith("Z") and stored.original is None and not stored.trace


def test_rewrite_replaces_the_answer_and_keeps_the_original(store: Store) -> None:
    turn = turn_at(load_turns(CHAT), 2)
    result = tag(store, turn, "good", rewrite="answer: 42")
    record = result.record
    assert record.messages[-1].content == "answer: 42"
    assert record.original == "The answer is 42."
    assert record.messages[:-1] == turn.messages[:-1]
    assert store.counts().rewritten == 1


def test_rewrite_drops_the_thinking_that_led_to_the_old_answer(store: Store) -> None:
    turn = turn_at(load_turns(PI_SESSION, thinking=True), 7)
    record = tag(store, turn, "good", rewrite="Use float(text.replace(',', '')).").record
    assert record.messages[-1].content == "Use float(text.replace(',', ''))."
    assert record.original is not None and record.original.startswith("`text.split")


def test_good_on_a_blocked_turn_is_refused_with_the_reason(store: Store) -> None:
    turns = load_turns(PI_SESSION)
    with pytest.raises(TagRefused, match="aborted"):
        tag(store, turn_at(turns, 15), "good")
    with pytest.raises(TagRefused, match="429"):
        tag(store, turn_at(turns, 21), "good")
    assert store.records() == []
    # Bad is exactly what such a turn may be.
    bad = tag(store, turn_at(turns, 15), "bad", note="gave up mid-sentence")
    assert text_of(bad.record.messages[-1]).startswith("The traceback shows")


def test_rewrite_with_bad_or_empty_is_refused(store: Store) -> None:
    turn = turn_at(load_turns(CHAT), 1)
    with pytest.raises(TagRefused, match="goes with good"):
        tag(store, turn, "bad", rewrite="x")
    with pytest.raises(TagRefused, match="empty"):
        tag(store, turn, "good", rewrite="   ")
    assert store.records() == []


def test_same_conversation_and_verdict_twice_is_a_duplicate_not_a_second_row(store: Store) -> None:
    turn = turn_at(load_turns(CHAT), 1)
    first = tag(store, turn, "good")
    again = tag(store, turn_at(load_turns(CHAT), 1), "good")
    assert again.duplicate and again.duplicate_of == first.record.id
    assert again.record == first.record
    # A different verdict, a different rewrite or the trace view are different records.
    assert not tag(store, turn, "bad").duplicate
    assert not tag(store, turn, "good", rewrite="56").duplicate
    assert tag(store, turn, "good", rewrite="56").duplicate
    assert len(store.records()) == 3


def test_trace_tag_is_marked_and_keeps_tool_messages(store: Store) -> None:
    turn = turn_at(load_turns(PI_SESSION, trace=True), 13)
    record = tag(store, turn, "good", trace=True).record
    assert record.trace
    assert sum(1 for message in record.messages if message.role == "tool") == 3
    plain = tag(store, turn_at(load_turns(PI_SESSION), 13), "good")
    assert not plain.duplicate and not plain.record.trace
    counts = store.counts()
    assert (counts.good, counts.traced) == (2, 1)


def test_an_empty_answer_is_tagged_neither_good_nor_bad(store: Store, tmp_path: Path) -> None:
    """A reply with no text and no calls (a Pi API error, a reply that only called tools, read plainly) would be an
    empty assistant row: every export refuses it (KTO: kto-empty-completion). Refused, nothing stored; the same
    reply with --trace keeps its calls and is tagged."""
    call = {"type": "toolCall", "id": "t1", "name": "bash", "arguments": {"command": "make"}}
    log = tmp_path / "pi.jsonl"
    lines = [
        {"type": "session", "version": 3, "id": "s"},
        {"type": "message", "id": "u1", "parentId": None, "message": {"role": "user", "content": "build"}},
        {
            "type": "message",
            "id": "a1",
            "parentId": "u1",
            "message": {"role": "assistant", "content": [], "stopReason": "error", "errorMessage": "400"},
        },
        {"type": "message", "id": "u2", "parentId": "a1", "message": {"role": "user", "content": "again"}},
        {
            "type": "message",
            "id": "a2",
            "parentId": "u2",
            "message": {"role": "assistant", "content": [call], "stopReason": "toolUse"},
        },
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    for line in (3, 5):
        with pytest.raises(TagRefused, match="no text: nothing to tag"):
            tag(store, turn_at(load_turns(log), line), "bad")
    assert store.records() == []
    traced = tag(store, turn_at(load_turns(log, trace=True), 5), "bad", trace=True).record
    assert traced.messages[-1].tool_calls is not None and traced.messages[-1].tool_calls[0].id == "t1"
