"""The three APIs end to end: a real `machine serve` process on the real SmolLM2, driven by the real `openai` and
`anthropic` SDK clients (so every response and stream event is parsed by the client that agents use)."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from serve_helpers import API_KEY, BASH_TOOL, ServeProcess, machine

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "Say hello in five words."}]


def _openai(server: ServeProcess, key: str = API_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=300)


def _anthropic(server: ServeProcess, key: str = API_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.root, api_key=key, max_retries=0, timeout=300)


def test_models_and_the_key_check(base_server: ServeProcess) -> None:
    assert [m.id for m in _openai(base_server).models.list()] == ["machine"]
    with pytest.raises(openai.AuthenticationError):
        _openai(base_server, key="wrong").chat.completions.create(
            model="machine", messages=QUESTION, max_tokens=4
        )
    with pytest.raises(anthropic.AuthenticationError):
        _anthropic(base_server, key="wrong").messages.create(model="machine", max_tokens=4, messages=QUESTION)


def test_chat_completions_whole_and_streamed_agree(base_server: ServeProcess) -> None:
    client = _openai(base_server)
    whole = client.chat.completions.create(model="machine", messages=QUESTION, max_tokens=12)
    text = whole.choices[0].message.content
    assert text and whole.choices[0].finish_reason in {"stop", "length"}
    assert whole.usage is not None and whole.usage.completion_tokens <= 12 and whole.usage.prompt_tokens > 5
    chunks = list(
        client.chat.completions.create(
            model="machine",
            messages=QUESTION,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text  # greedy: the same answer either way
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2  # really streamed
    assert (
        chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    )


def test_responses_whole_and_streamed_agree(base_server: ServeProcess) -> None:
    client = _openai(base_server)
    whole = client.responses.create(model="machine", input="Say hello in five words.", max_output_tokens=12)
    assert whole.output_text and whole.status in {"completed", "incomplete"}
    events = list(
        client.responses.create(
            model="machine", input="Say hello in five words.", max_output_tokens=12, stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in {"response.completed", "response.incomplete"}
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == events[-1].response.output_text
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))


def test_messages_whole_and_streamed_agree(base_server: ServeProcess) -> None:
    client = _anthropic(base_server)
    whole = client.messages.create(model="machine", max_tokens=12, system="Be brief.", messages=QUESTION)
    assert whole.content[0].type == "text" and whole.content[0].text
    assert whole.stop_reason in {"end_turn", "max_tokens"}
    with client.messages.stream(
        model="machine", max_tokens=12, system="Be brief.", messages=QUESTION
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == whole.content[0].text == final.content[0].text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_served_rows_are_chat_rows_that_can_be_tagged(base_server: ServeProcess) -> None:
    client = _openai(base_server)
    reply = client.chat.completions.create(
        model="machine", messages=[{"role": "user", "content": "What is 2 plus 2?"}], max_tokens=8
    )
    path, number, row = next(
        (p, n, r)
        for p, n, r in reversed(base_server.served_rows())
        if r["messages"][0]["content"] == "What is 2 plus 2?"
    )
    assert row["messages"][-1] == {"role": "assistant", "content": reply.choices[0].message.content}
    assert row["checkpoint"] == "base" and row["model"] == "machine" and row["api"] == "chat.completions"
    assert row["time"].endswith("Z") and row["usage"]["completion_tokens"] == reply.usage.completion_tokens
    done = machine(base_server.project, "good", "--from", f"{path}:{number}", "--as", "answer: 4")
    assert done.returncode == 0, done.stderr
    records = [
        json.loads(x) for x in (base_server.project / ".machine" / "tagged.jsonl").read_text().splitlines()
    ]
    record = records[-1]
    assert record["verdict"] == "good" and record["messages"][-1]["content"] == "answer: 4"
    assert record["original"] == reply.choices[0].message.content
    assert record["source"]["line"] == number and record["source"]["uri"].endswith(path.name)


def test_trained_checkpoint_answers_in_the_trained_form(trained_server: ServeProcess) -> None:
    assert trained_server.ready_line.startswith("serving local://")
    reply = _openai(trained_server).chat.completions.create(
        model="machine", messages=[{"role": "user", "content": "What is 5 plus 6?"}], max_tokens=10
    )
    assert reply.choices[0].message.content.startswith("answer: ")


TOOL_PROMPT = [{"role": "user", "content": "List the files here."}]


def test_tool_calls_round_trip_in_chat_completions(trained_server: ServeProcess) -> None:
    client = _openai(trained_server)
    whole = client.chat.completions.create(
        model="machine", messages=TOOL_PROMPT, tools=[BASH_TOOL], max_tokens=60
    )
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "bash" and json.loads(call.function.arguments) == {"command": "ls"}
    chunks = list(
        client.chat.completions.create(
            model="machine", messages=TOOL_PROMPT, tools=[BASH_TOOL], max_tokens=60, stream=True
        )
    )
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert [(tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
        ("bash", {"command": "ls"})
    ]
    assert not any(
        c.choices[0].delta.content for c in chunks if c.choices
    )  # the <tool_call> markup never leaks
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # Second leg: the call and its result go back; the served row keeps the whole trace.
    history = [
        *TOOL_PROMPT,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "README.md\nsetup.py"},
    ]
    after = client.chat.completions.create(
        model="machine", messages=history, tools=[BASH_TOOL], max_tokens=20
    )
    assert after.choices[0].finish_reason in {"stop", "length", "tool_calls"}
    row = trained_server.served_rows()[-1][2]
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert "<tools>" in row["messages"][0]["content"]  # the rendered tool block: trains on what the model saw
    assert row["messages"][2]["tool_calls"][0]["function"]["name"] == "bash"
    assert row["messages"][3]["tool_call_id"] == call.id


def test_tool_calls_round_trip_in_responses(trained_server: ServeProcess) -> None:
    client = _openai(trained_server)
    tool = {"type": "function", **BASH_TOOL["function"], "strict": False}
    whole = client.responses.create(
        model="machine", input="List the files here.", tools=[tool], max_output_tokens=60
    )
    calls = [item for item in whole.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("bash", {"command": "ls"})]
    events = list(
        client.responses.create(
            model="machine", input="List the files here.", tools=[tool], max_output_tokens=60, stream=True
        )
    )
    done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a) for a in done] == [{"command": "ls"}]
    assert events[-1].type == "response.completed"
    second = client.responses.create(
        model="machine",
        input=[
            {"type": "message", "role": "user", "content": "List the files here."},
            {
                "type": "function_call",
                "call_id": calls[0].call_id,
                "name": "bash",
                "arguments": calls[0].arguments,
            },
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "README.md"},
        ],
        tools=[tool],
        max_output_tokens=20,
    )
    assert second.status in {"completed", "incomplete"}


def test_tool_calls_round_trip_in_messages(trained_server: ServeProcess) -> None:
    client = _anthropic(trained_server)
    tool = {
        "name": "bash",
        "description": "Run a shell command",
        "input_schema": BASH_TOOL["function"]["parameters"],
    }
    whole = client.messages.create(model="machine", max_tokens=60, tools=[tool], messages=TOOL_PROMPT)
    assert whole.stop_reason == "tool_use"
    uses = [b for b in whole.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("bash", {"command": "ls"})]
    with client.messages.stream(model="machine", max_tokens=60, tools=[tool], messages=TOOL_PROMPT) as stream:
        final = stream.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [("bash", {"command": "ls"})]
    after = client.messages.create(
        model="machine",
        max_tokens=20,
        tools=[tool],
        messages=[
            *TOOL_PROMPT,
            {"role": "assistant", "content": [u.model_dump() for u in uses]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "README.md"}],
            },
        ],
    )
    assert after.stop_reason in {"end_turn", "max_tokens", "tool_use"}
