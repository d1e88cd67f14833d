"""turn_marks: what the store says about each turn of a session log Claude Code wrote."""

from __future__ import annotations

from pathlib import Path

from machine_lsp.core.tagging import build_record
from machine_lsp.core.transcripts import load_turns
from machine_lsp.core.turn_marks import answer_text, last_prompt, turn_marks

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "claude_code" / "claude-code-2.1.332-echo-hi.jsonl"


def test_untagged_turns_have_no_mark() -> None:
    turns = load_turns(LOG)
    assert len(turns) >= 2
    marks = turn_marks(turns, [])
    assert [(m.verdict, m.records, m.conflict) for m in marks] == [(None, [], False)] * len(turns)
    assert last_prompt(turns[0]) == "Say hello in five words."
    assert answer_text(turns[0]).strip()


def test_a_rewrite_marks_its_original_turn_and_bad_then_rewrite_agree() -> None:
    turns = load_turns(LOG)
    bad = build_record(turns[0], "bad")
    rewrite = build_record(turns[0], "good", rewrite="Hello there, nice to meet!")
    [first, *rest] = turn_marks(turns, [bad, rewrite])
    assert first.verdict == "good" and first.rewritten and not first.conflict
    assert first.records == [bad.id, rewrite.id]
    assert all(m.verdict is None for m in rest)


def test_the_last_tag_stands_and_a_traced_tag_marks_its_turn_by_place() -> None:
    turns = load_turns(LOG)
    traced = load_turns(LOG, trace=True)
    good = build_record(turns[-1], "good")
    bad = build_record(
        traced[-1], "bad", trace=True
    )  # another conversation (the trace), the same place in the log
    assert bad.messages != good.messages and bad.source.end_line == good.source.end_line
    mark = turn_marks(turns, [good, bad])[-1]
    assert mark.verdict == "bad" and mark.records == [good.id, bad.id]
    again = build_record(turns[-1], "good")
    contradicted = turn_marks(turns, [bad, good, build_record(turns[-1], "bad"), again])[-1]
    assert contradicted.verdict == "good" and contradicted.conflict
