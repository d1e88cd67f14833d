"""Codex 0.171.0 rollouts written by the real harness: tags hold exactly what Codex sent the model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from compare import record_conversation, sent_conversation, text_turns
from conftest import AFTER_COMPACT_PROMPT, TEXT_PROMPT, TOOL_PROMPT, AgentSession, Cli, json_lines, line_where
from model_endpoint import ENCRYPTED_REASONING, REASONING_SUMMARY

from machine_lsp.core.transcripts import load_turns, turn_at


def item_line(log: Path, text: str) -> int:
    return line_where(
        log,
        lambda o: (
            o.get("type") == "response_item"
            and o["payload"].get("role") == "assistant"
            and any(p.get("text") == text for p in o["payload"]["content"])
        ),
    )


def request_answered(session: AgentSession, text: str):
    return next(r for r in session.endpoint.model_requests("responses") if r.reply and r.reply.text == text)


def test_plain_tag_of_a_text_answer_is_what_was_sent(codex_session: AgentSession, cli: Cli) -> None:
    log = codex_session.log
    first = request_answered(codex_session, "Scripted reply 1 to: " + TEXT_PROMPT)
    line = item_line(log, first.reply.text)
    code, _, err = cli("good", "--from", f"{log}:{line}")
    assert code == 0, err
    [record] = cli.records()
    assert record["messages"] == [
        {"role": "user", "content": TEXT_PROMPT},
        {"role": "assistant", "content": first.reply.text},
    ]
    assert record["messages"] == text_turns(sent_conversation(first))
    meta = json_lines(log)[0]["payload"]
    source = record["source"]
    assert source["harness"] == "codex" and source["session_id"] == meta["id"] and source["line"] == line
    assert source["model"] == "m" and source["provider"] == "local" and source["entry_id"] == "msg_resp_1"


def test_trace_tag_of_the_tool_turn_is_the_whole_trajectory_sent(
    codex_session: AgentSession, cli: Cli
) -> None:
    log = codex_session.log
    final = request_answered(codex_session, "The command printed: hi")
    code, _, err = cli("good", "--trace", "--from", f"{log}:{item_line(log, final.reply.text)}")
    assert code == 0, err
    [record] = cli.records()
    assert record_conversation(record["messages"]) == sent_conversation(final)
    tool = next(m for m in record["messages"] if m["role"] == "tool")
    assert "hi" in tool["content"] and tool["name"] == "exec_command"
    # Injected context: system messages under --trace, in the order Codex sent it; never a user turn.
    systems = [m["content"] for m in record["messages"] if m["role"] == "system"]
    sent_developer = [
        "\n".join(p["text"] for p in item["content"])
        for item in final.body["input"][1:]  # [0]: the base instructions, not in the rollout
        if item.get("role") == "developer"
        or (item.get("role") == "user" and "<environment_context>" in json.dumps(item))
    ]
    assert systems == sent_developer
    assert [m["content"] for m in record["messages"] if m["role"] == "user"] == [TEXT_PROMPT, TOOL_PROMPT]


def test_plain_tag_drops_injected_context_and_tool_steps(codex_session: AgentSession, cli: Cli) -> None:
    log = codex_session.log
    final = request_answered(codex_session, "The command printed: hi")
    prompt_line = line_where(log, lambda o: o.get("type") == "response_item" and TOOL_PROMPT in json.dumps(o))
    code, _, err = cli("good", "--from", f"{log}:{prompt_line}")  # a line inside the exchange
    assert code == 0, err
    [record] = cli.records()
    assert record["messages"] == text_turns(sent_conversation(final))
    assert not any("<environment_context>" in m["content"] for m in record["messages"])


def test_event_msg_copies_are_not_counted_twice(codex_session: AgentSession) -> None:
    objects = json_lines(codex_session.log)
    assert any(o["type"] == "event_msg" and "Scripted reply 1" in json.dumps(o) for o in objects)
    for trace in (False, True):
        turns = load_turns(codex_session.log, trace=trace)
        last = turn_at(turns, None)
        texts = [m.content for m in last.messages if m.role == "assistant"]
        assert texts.count("Scripted reply 1 to: " + TEXT_PROMPT) == 1
        assert len(turns) == (3 if trace else 2)  # text reply, (tool call,) final reply


def test_reasoning_summary_only_with_thinking_and_never_encrypted(codex_session: AgentSession) -> None:
    text = codex_session.log.read_text()
    assert ENCRYPTED_REASONING in text and REASONING_SUMMARY in text  # Codex logged both
    plain = turn_at(load_turns(codex_session.log), None)
    assert REASONING_SUMMARY not in json.dumps([m.content for m in plain.messages])
    thinking = turn_at(load_turns(codex_session.log, thinking=True), None)
    answer = thinking.messages[-1]
    assert [part.thinking for part in answer.content if hasattr(part, "thinking")] == [REASONING_SUMMARY]
    for turn in load_turns(codex_session.log, trace=True, thinking=True):
        assert ENCRYPTED_REASONING not in json.dumps([str(m.content) for m in turn.messages])


def test_after_compaction_the_replacement_history_is_what_was_sent(
    codex_compact_session: AgentSession, cli: Cli
) -> None:
    log = codex_compact_session.log
    objects = json_lines(log)
    assert any(o["type"] == "compacted" for o in objects)
    final = request_answered(
        codex_compact_session,
        f"Scripted reply {len(codex_compact_session.endpoint.replies())} to: {AFTER_COMPACT_PROMPT}",
    )
    code, _, err = cli("good", "--trace", "--from", str(log))
    assert code == 0, err
    [record] = cli.records()
    assert record_conversation(record["messages"]) == sent_conversation(final)
    # The summaries Codex asked for while compacting are not turns: their prompts are not in the log.
    for turn in load_turns(log, trace=True):
        assert "CONTEXT CHECKPOINT" not in str(turn.messages[turn.answer_index].content)


def test_a_half_written_last_line_is_skipped_with_a_note(codex_session: AgentSession, tmp_path: Path) -> None:
    log = tmp_path / "rollout-live.jsonl"
    shutil.copy(codex_session.log, log)
    with log.open("a") as handle:
        handle.write('{"timestamp":"2026-11-30T00:00:00Z","type":"response_item","payload":{"type":"mess')
    turns = load_turns(log)
    assert not turns.problems and "half-written" in turns.notes[0]
    assert turn_at(turns, None).messages[-1].content == "The command printed: hi"
