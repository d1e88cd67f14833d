"""Claude Code 2.1.332 logs written by the real harness: tags hold exactly what Claude Code sent the model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from compare import record_conversation, sent_conversation, text_turns
from conftest import (
    AFTER_COMPACT_PROMPT,
    PARALLEL_PROMPT,
    TEXT_PROMPT,
    TOOL_PROMPT,
    AgentSession,
    Cli,
    json_lines,
    line_where,
)

from machine_lsp.core.transcripts import load_turns, turn_at


def assistant_line(log: Path, text: str) -> int:
    return line_where(
        log,
        lambda o: (
            o.get("type") == "assistant"
            and any(b.get("text") == text for b in o["message"]["content"] if isinstance(b, dict))
        ),
    )


def request_answered(session: AgentSession, text: str):
    return next(r for r in session.endpoint.model_requests("anthropic") if r.reply and r.reply.text == text)


def test_plain_tag_of_a_text_answer_is_what_was_sent(claude_code_session: AgentSession, cli: Cli) -> None:
    log = claude_code_session.log
    first = request_answered(claude_code_session, "Scripted reply 1 to: " + TEXT_PROMPT)
    line = assistant_line(log, first.reply.text)
    code, out, err = cli("good", "--from", f"{log}:{line}")
    assert code == 0, err
    [record] = cli.records()
    assert record["verdict"] == "good" and record.get("trace") is not True
    assert record["messages"] == [
        {"role": "user", "content": TEXT_PROMPT},
        {"role": "assistant", "content": first.reply.text},
    ]
    assert record["messages"] == text_turns(sent_conversation(first))
    source = record["source"]
    entry = json_lines(log)[line - 1]
    assert source["harness"] == "claude-code" and source["kind"] == "session_log"
    assert source["session_id"] == log.stem == entry["sessionId"]
    assert source["entry_id"] == entry["uuid"] and source["line"] == line
    assert source["model"] == entry["message"]["model"]


def test_trace_tag_of_the_tool_turn_is_the_whole_trajectory_sent(
    claude_code_session: AgentSession, cli: Cli
) -> None:
    log = claude_code_session.log
    final = request_answered(claude_code_session, "The command printed: hi")
    line = assistant_line(log, final.reply.text)
    code, _, err = cli("good", "--trace", "--from", f"{log}:{line}")
    assert code == 0, err
    [record] = cli.records()
    assert record["trace"] is True
    sent = sent_conversation(final)
    assert record_conversation(record["messages"]) == sent
    # The real shell ran: its output is the tool message, paired with the call by id.
    tool = next(m for m in record["messages"] if m["role"] == "tool")
    call = next(m for m in record["messages"] if m.get("tool_calls"))
    assert tool["content"].strip() == "hi" and tool["tool_call_id"] == call["tool_calls"][0]["id"]
    assert tool["name"] == "Bash"
    # Injected context (environment, date, reminders) is kept as system messages, never as user turns.
    users = [m["content"] for m in record["messages"] if m["role"] == "user"]
    assert users == [TEXT_PROMPT, TOOL_PROMPT]
    assert any(m["role"] == "system" and "<system-reminder>" in m["content"] for m in record["messages"])


def test_plain_tag_of_the_tool_turn_keeps_text_turns_only(
    claude_code_session: AgentSession, cli: Cli
) -> None:
    log = claude_code_session.log
    final = request_answered(claude_code_session, "The command printed: hi")
    # Any line of the exchange (here the prompt's line) selects its final reply.
    prompt_line = line_where(
        log, lambda o: o.get("type") == "user" and o["message"]["content"] == TOOL_PROMPT
    )
    code, _, err = cli("good", "--from", f"{log}:{prompt_line}")
    assert code == 0, err
    [record] = cli.records()
    assert record["messages"] == text_turns(sent_conversation(final))
    assert record["messages"][-1] == {"role": "assistant", "content": "The command printed: hi"}


def test_one_message_id_over_two_lines_is_one_message(claude_code_session: AgentSession, cli: Cli) -> None:
    log = claude_code_session.log
    lines = [o for o in json_lines(log) if o.get("type") == "assistant"]
    by_id: dict[str, list[dict]] = {}
    for obj in lines:
        by_id.setdefault(obj["message"]["id"], []).append(obj)
    split = [group for group in by_id.values() if len(group) > 1]
    assert split, "Claude Code wrote each content block of the tool-call reply on its own line"
    tool_use_line = line_where(
        log, lambda o: o.get("type") == "assistant" and o["message"]["content"][0].get("type") == "tool_use"
    )
    code, _, err = cli("bad", "--trace", "--from", f"{log}:{tool_use_line}")
    assert code == 0, err
    [record] = cli.records()
    answer = record["messages"][-1]
    assert record["verdict"] == "bad"
    assert answer["content"] == "I'll run it." and [c["function"]["name"] for c in answer["tool_calls"]] == [
        "Bash"
    ]
    sent = request_answered(claude_code_session, "I'll run it.")
    assert record_conversation(record["messages"]) == sent_conversation(sent)


def test_parallel_tool_calls_on_branches_are_one_message_and_all_results(
    claude_code_more_session: AgentSession, cli: Cli
) -> None:
    log = claude_code_more_session.log
    objects = json_lines(log)
    calls = [
        o
        for o in objects
        if o.get("type") == "assistant" and o["message"]["content"][0].get("type") == "tool_use"
    ]
    parallel = [o for o in calls if o["message"]["content"][0]["name"] == "Bash"]
    assert len(parallel) == 2 and parallel[0]["message"]["id"] == parallel[1]["message"]["id"]
    # The harness writes each result under its own tool_use line: the final reply's path holds only one of them.
    results = [
        o for o in objects if o.get("type") == "user" and "toolUseResult" in o and "hi" in json.dumps(o)
    ]
    assert {r["parentUuid"] for r in results} >= {p["uuid"] for p in parallel}
    final = next(
        r
        for r in claude_code_more_session.endpoint.model_requests("anthropic")
        if r.reply
        and r.reply.text == "The command printed: hi"
        and PARALLEL_PROMPT in json.dumps(r.body)
        and "tool_result" in json.dumps(r.body["messages"][-1])
    )
    line = next(
        i
        for i, o in enumerate(objects, start=1)
        if o.get("type") == "assistant" and o["message"]["id"] == f"msg_{final.reply.response_id}"
    )
    code, _, err = cli("good", "--trace", "--from", f"{log}:{line}")
    assert code == 0, err
    [record] = cli.records()
    assert record_conversation(record["messages"]) == sent_conversation(final)
    tools = [m for m in record["messages"] if m["role"] == "tool"]
    assert len(tools) >= 2 and [t["content"].strip() for t in tools[-2:]] == ["hi", "hi"]


def test_a_sub_agent_never_leaks_and_its_transcript_tags_on_its_own(
    claude_code_more_session: AgentSession, cli: Cli
) -> None:
    log = claude_code_more_session.log
    subagent_files = sorted(log.parent.glob(f"{log.stem}/subagents/agent-*.jsonl"))
    assert len(subagent_files) == 1
    sub_request = next(
        r
        for r in claude_code_more_session.endpoint.model_requests("anthropic")
        if r.reply and r.reply.text.endswith("to: Say hi from the subagent.")
    )
    sidechain_texts = {"Say hi from the subagent.", sub_request.reply.text}
    for trace in (False, True):
        for turn in load_turns(log, trace=trace):
            # (The Agent call's arguments and the harness's task notification may quote it: that is main context.)
            assert all(
                m.content not in sidechain_texts for m in turn.messages if m.role in ("user", "assistant")
            )
    # The sub-agent transcript alone: its prompt and answer, as the sub-agent's request had them.
    code, _, err = cli("good", "--from", str(subagent_files[0]))
    assert code == 0, err
    [record] = cli.records()
    assert record["messages"] == text_turns(sent_conversation(sub_request))
    assert record["messages"][0] == {"role": "user", "content": "Say hi from the subagent."}


def test_after_compaction_the_summary_starts_the_context(
    claude_code_more_session: AgentSession, cli: Cli
) -> None:
    log = claude_code_more_session.log
    objects = json_lines(log)
    assert any(o.get("subtype") == "compact_boundary" for o in objects)
    final = [
        r
        for r in claude_code_more_session.endpoint.model_requests("anthropic")
        if r.reply and AFTER_COMPACT_PROMPT in json.dumps(r.body["messages"][-2:])
    ][-1]
    code, _, err = cli("good", "--trace", "--from", str(log))  # no line: the last turn
    assert code == 0, err
    [record] = cli.records()
    assert record_conversation(record["messages"]) == sent_conversation(final)
    summary = next(o for o in objects if o.get("isCompactSummary"))
    assert record["messages"][0] == {"role": "user", "content": summary["message"]["content"]}
    plain = turn_at(load_turns(log), None)
    assert [m.role for m in plain.messages][0] == "user" and plain.messages[0].content.startswith(
        "This session"
    )


def test_a_half_written_last_line_is_skipped_with_a_note(
    claude_code_session: AgentSession, tmp_path: Path
) -> None:
    log = tmp_path / "live.jsonl"
    shutil.copy(claude_code_session.log, log)
    with log.open("a") as handle:
        handle.write('{"parentUuid":"x","isSidechain":false,"type":"assistant","message":{"role":"assis')
    turns = load_turns(log)
    assert not turns.problems and turns.notes and "half-written" in turns.notes[0]
    last = turn_at(turns, None)
    assert last.messages[-1].content == "The command printed: hi"
    assert any("half-written" in warning for warning in last.warnings)


def test_an_interrupted_or_failed_reply_cannot_be_tagged_good(
    claude_code_session: AgentSession, tmp_path: Path, cli: Cli
) -> None:
    """The real log with its final reply marked as Claude Code marks API errors and user interrupts."""
    objects = json_lines(claude_code_session.log)
    final = max(i for i, o in enumerate(objects) if o.get("type") == "assistant")
    errored = [dict(o) for o in objects]
    errored[final] = {**objects[final], "isApiErrorMessage": True}
    path = tmp_path / "error.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in errored))
    code, _, err = cli("good", "--from", f"{path}:{final + 1}")
    assert code == 1 and "API error" in err
    interrupted = [*objects]
    interrupted.insert(
        final + 1,
        {
            "parentUuid": objects[final]["uuid"],
            "isSidechain": False,
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "text", "text": "[Request interrupted by user]"}],
            },
            "uuid": "00000000-0000-4000-8000-000000000001",
            "sessionId": objects[final]["sessionId"],
        },
    )
    path = tmp_path / "interrupted.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in interrupted))
    code, _, err = cli("good", "--from", f"{path}:{final + 1}")
    assert code == 1 and "interrupted" in err
    code, _, err = cli("bad", "--from", f"{path}:{final + 1}")
    assert code == 0, err
