"""The shared capture infrastructure: the scripted endpoint's three APIs, and each real agent run against it."""

from __future__ import annotations

import json
import urllib.request

import pytest
from conftest import TEXT_PROMPT, TOOL_PROMPT, AgentSession
from model_endpoint import TOOL_TEXT, ModelEndpoint


def post(endpoint: ModelEndpoint, path: str, body: dict) -> tuple[str, str]:
    request = urllib.request.Request(
        endpoint.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer secret-key"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def sse_data(text: str) -> list:
    return [
        json.loads(line[6:])
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


BASH_TOOL = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def test_chat_completions_text_tool_call_and_final(endpoint: ModelEndpoint) -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": BASH_TOOL}}]
    _, text = post(
        endpoint, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert json.loads(text)["choices"][0]["message"]["content"] == "Scripted reply 1 to: hi"
    asked = [{"role": "user", "content": "run echo hi"}]
    kind, text = post(endpoint, "/v1/chat/completions", {"messages": asked, "tools": tools, "stream": True})
    assert kind == "text/event-stream" and text.rstrip().endswith("data: [DONE]")
    calls = [c for chunk in sse_data(text) for c in chunk["choices"][0]["delta"].get("tool_calls", [])]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("bash", {"command": "echo hi"})
    ]
    # Without a shell tool on offer the same prompt gets text.
    _, text = post(endpoint, "/v1/chat/completions", {"messages": asked})
    assert "tool_calls" not in json.loads(text)["choices"][0]["message"]
    after = [*asked, {"role": "assistant", "tool_calls": calls}, {"role": "tool", "content": "hi\n"}]
    _, text = post(endpoint, "/v1/chat/completions", {"messages": after, "tools": tools})
    assert json.loads(text)["choices"][0]["message"]["content"] == "The command printed: hi"
    assert len(endpoint.model_requests("chat")) == 4
    assert "authorization" not in endpoint.requests[0].headers  # never keep a key


def test_responses_stream_events(endpoint: ModelEndpoint) -> None:
    tool = {"type": "function", "name": "shell", "parameters": {"properties": {"command": {"type": "array"}}}}
    body = {
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "echo hi"}]}]
    }
    _, text = post(endpoint, "/v1/responses", {**body, "tools": [tool], "stream": True})
    events = sse_data(text)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[1]["item"]["type"] == "reasoning"
    item = events[3]["item"]
    assert item["type"] == "function_call" and json.loads(item["arguments"]) == {
        "command": ["bash", "-lc", "echo hi"]
    }
    output = {"type": "function_call_output", "call_id": item["call_id"], "output": "hi"}
    _, text = post(endpoint, "/v1/responses", {"input": [*body["input"], item, output], "stream": True})
    done = sse_data(text)[-1]["response"]["output"][-1]
    assert done["content"][0]["text"] == "The command printed: hi"


def test_anthropic_messages_stream_one_message_two_blocks(endpoint: ModelEndpoint) -> None:
    tool = {
        "name": "Bash",
        "input_schema": {"properties": {"command": {"type": "string"}, "description": {}}},
    }
    content = [
        {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
        {"type": "text", "text": "echo hi"},
    ]
    body = {"messages": [{"role": "user", "content": content}], "tools": [tool], "stream": True}
    _, text = post(endpoint, "/v1/messages?beta=true", body)
    events = sse_data(text)
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["text", "tool_use"]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert endpoint.replies()[-1].text == TOOL_TEXT


@pytest.mark.parametrize("name", ["claude-code", "codex", "pi"])
def test_agent_runs_a_real_tool_call_and_writes_a_log(name: str, agent_run) -> None:
    run = agent_run(name)
    run.run(TEXT_PROMPT)
    run.run(TOOL_PROMPT, resume=True)
    replies = run.endpoint.replies()
    kinds = [reply.kind for reply in replies]
    # Title/summary side requests may come too (Pi summarises); the tool call is followed by the final text.
    assert kinds.count("tool_call") == 1, kinds
    assert replies[kinds.index("tool_call") + 1].text == "The command printed: hi"
    assert len(run.logs()) == 1
    log_text = run.log().read_text()
    assert "Scripted reply 1" in log_text and "The command printed: hi" in log_text
    assert "hi" in run.runs[-1].stdout


def test_session_fixture_shares_one_log(claude_code_session: AgentSession) -> None:
    assert claude_code_session.log.exists()
    assert claude_code_session.endpoint.model_requests("anthropic")
