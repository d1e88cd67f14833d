"""Qwen Code 0.24.4 logs written by the real agent: tags hold what Qwen Code sent the model, labelled qwen-code."""

from __future__ import annotations

from pathlib import Path

import pytest
from capture_compare import record_conversation, sent_conversation, text_turns
from capture_helpers import PROJECT_INSTRUCTIONS, TEXT_PROMPT, TOOL_PROMPT, AgentSession, Cli, json_lines

from machine_lsp.core.sessions import find_sessions
from machine_lsp.core.transcripts import load_turns


def _answered(session: AgentSession, text: str):
    return next(r for r in session.endpoint.model_requests("chat") if r.reply and r.reply.text == text)


def _line_of(log: Path, text: str) -> int:
    return next(
        i
        for i, o in enumerate(json_lines(log), start=1)
        if o.get("type") == "assistant" and any(p.get("text") == text for p in o["message"]["parts"])
    )


def test_plain_tag_of_a_text_answer_is_what_was_sent(qwen_code_session: AgentSession, cli: Cli) -> None:
    log = qwen_code_session.log
    first = next(
        r
        for r in qwen_code_session.endpoint.model_requests("chat")
        if r.reply and r.reply.text.startswith("Scripted reply") and TEXT_PROMPT in r.reply.text
    )
    line = _line_of(log, first.reply.text)
    code, _, err = cli("good", "--from", f"{log}:{line}")
    assert code == 0, err
    [record] = cli.records()
    assert record["messages"] == [
        {"role": "user", "content": TEXT_PROMPT},
        {"role": "assistant", "content": first.reply.text},
    ]
    assert record["messages"] == text_turns(sent_conversation(first))
    source, entry = record["source"], json_lines(log)[line - 1]
    assert source["harness"] == "qwen-code" and source["kind"] == "session_log"
    assert source["session_id"] == entry["sessionId"] == log.stem
    assert source["entry_id"] == entry["uuid"] and source["model"] == entry["model"]


def test_trace_tag_of_the_shell_turn_is_the_whole_trajectory_sent(
    qwen_code_session: AgentSession, cli: Cli
) -> None:
    log = qwen_code_session.log
    final = _answered(qwen_code_session, "The command printed: hi")
    code, _, err = cli("good", "--trace", "--from", str(log))  # the last turn
    assert code == 0, err
    [record] = cli.records()
    assert record["trace"] is True
    assert record_conversation(record["messages"]) == sent_conversation(final)
    call = next(m for m in record["messages"] if m.get("tool_calls"))
    tool = next(m for m in record["messages"] if m["role"] == "tool")
    assert call["tool_calls"][0]["function"]["name"] == "run_shell_command"
    assert tool["tool_call_id"] == call["tool_calls"][0]["id"] and tool["name"] == "run_shell_command"
    # The real shell ran and exited 0. Its output is what Qwen Code sent, whichever it was: Qwen Code 0.24.4's
    # child-process runner settles on the process's 'exit' event, which on a loaded machine can come before stdout's
    # 'data' event, and then it sends "Output: (empty)" for `echo hi` (its bug, not the log reader's).
    assert "Exit Code: 0" in tool["content"], tool["content"]
    assert "Output: hi" in tool["content"] or "Output: (empty)" in tool["content"], tool["content"]
    assert [m["content"] for m in record["messages"] if m["role"] == "user"] == [TEXT_PROMPT, TOOL_PROMPT]
    assert PROJECT_INSTRUCTIONS not in str(record["messages"])  # Qwen Code does not log what it injects


def test_the_session_is_found_and_from_last_tags_its_last_turn(
    qwen_code_session: AgentSession, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = qwen_code_session.run
    monkeypatch.setenv("HOME", str(run.home))
    [session] = find_sessions(run.project, harness="qwen-code")
    assert session.path == qwen_code_session.log and session.turns == 2
    assert session.first_prompt == TEXT_PROMPT
    monkeypatch.chdir(run.project)
    code, out, err = cli("sessions", "--harness", "qwen-code")
    assert code == 0 and "qwen-code" in out and session.id[:8] in out, out + err
    code, _, err = cli("bad", "--from", "last")
    assert code == 0, err
    assert cli.records()[-1]["messages"][-1] == {"role": "assistant", "content": "The command printed: hi"}


def test_a_log_read_as_claude_code_before_is_never_labelled_claude_code(
    qwen_code_session: AgentSession,
) -> None:
    turns = load_turns(qwen_code_session.log)
    assert turns.adapter == "qwen-code" and not turns.problems
    assert {turn.source.harness for turn in turns} == {"qwen-code"}
    assert all(turn.tags_blocked is None for turn in turns)
