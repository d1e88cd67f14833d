"""Pi (pi-coding-agent 0.73.1) run for real: every turn read from the log it wrote is what Pi sent the model.

Uses the shared `pi_session` fixture (tests/capture/conftest.py): a text answer, then a resumed turn that runs
`echo hi` through Pi's bash tool. Each of Pi's own Chat Completions calls (those offering tools; Pi also asks for a
session summary) must equal a --trace turn's conversation, system prompt aside, and the reply must be its answer.
"""

from __future__ import annotations

import json
from typing import Any

from harness_runs import TEXT_PROMPT, TOOL_PROMPT

from machine_lsp.core.schema import Message, text_of
from machine_lsp.core.transcripts import load_turns, turn_at


def sent(message: dict[str, Any]) -> tuple:
    calls = tuple(
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
        for c in message.get("tool_calls") or []
    )
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content)
    return (message["role"], content or "", calls, message.get("tool_call_id"))


def read(message: Message) -> tuple:
    calls = tuple((c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or [])
    return (message.role, text_of(message), calls, message.tool_call_id)


def test_pi_log_turns_are_what_pi_sent(pi_session) -> None:  # the shared fixture (conftest.py)
    calls = [r for r in pi_session.endpoint.model_requests("chat") if r.body.get("tools")]
    traced = load_turns(pi_session.log, trace=True)
    assert traced.adapter == "pi" and traced.problems == []
    assert len(traced) == len(calls) == 3  # text answer, the bash call, the final reply
    for turn, call in zip(traced, calls, strict=True):
        request = [m for m in call.body["messages"] if m["role"] not in ("system", "developer")]
        assert [read(m) for m in turn.messages[:-1]] == [sent(m) for m in request]
        assert call.reply is not None
        if call.reply.kind == "text":
            assert text_of(turn.messages[-1]) == call.reply.text
        else:
            assert turn.messages[-1].tool_calls is not None
            assert turn.messages[-1].tool_calls[0].id == call.reply.tool_call_id
    plain = turn_at(load_turns(pi_session.log), None)
    texts = [text_of(m) for m in plain.messages]
    assert texts[-2:] == [TOOL_PROMPT, "The command printed: hi"]
    assert plain.source.harness == "pi" and plain.tags_blocked is None
    # With the small context window the tests give it, Pi compacts before the second prompt: the conversation then
    # starts with Pi's own summary wrapper, which the trace comparison above checked against the request.
    compacted = '"type":"compaction"' in pi_session.log.read_text()
    if compacted:
        assert texts[0].startswith("The conversation history before this point was compacted")
    else:
        assert texts[0] == TEXT_PROMPT
