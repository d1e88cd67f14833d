"""Exports: SFT rows (good only, rewrites applied) and preference pairs, from records in a real store."""

from __future__ import annotations

from pathlib import Path

from machine_lsp.core.export import export_pairs, export_sft
from machine_lsp.core.schema import decode_training_row, encode
from machine_lsp.core.store import Store
from machine_lsp.core.tagging import tag
from machine_lsp.core.transcripts import load_turns, turn_at

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
