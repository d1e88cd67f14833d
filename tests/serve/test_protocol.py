"""Pieces of the server without a model: request translation against the SDK types, the real renderer's tool-call
round trip, the streaming hold-back of `<tool_call>` markup, and the served log's whole-line appends."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from serve_helpers import BASH_TOOL, MODEL

from machine_lsp.core.schema import Message, ToolCall, ToolFunction
from machine_lsp.core.transcripts import load_turns
from machine_lsp.serve import protocol as P
from machine_lsp.serve.served_log import ServedLog, ServedRow, now_iso


@pytest.fixture(scope="module")
def renderer():  # noqa: ANN201
    from machine_lsp.engines import render

    return render.load_tokenizer_and_renderer(MODEL)[1]


def test_tool_calls_render_and_parse_back_through_the_cookbook_renderer(renderer) -> None:  # noqa: ANN001
    call = ToolCall(id="call_9", function=ToolFunction(name="bash", arguments='{"command": "ls -la"}'))
    answer = [Message(role="user", content="hi"), Message(role="assistant", content="", tool_calls=[call])]
    from machine_lsp.engines import render

    datum = render.to_datum(answer, renderer, reduction="none")
    tokens, _, weights = render.datum_tokens(datum)
    targets = [int(t) for t in datum.loss_fn_inputs["target_tokens"].tolist()]
    reply = [t for t, w in zip(targets, weights, strict=True) if w > 0][
        :-1
    ]  # the trained answer, minus <|im_end|>
    end = renderer.get_stop_sequences()[0]
    text, calls = P.parse_reply(reply, renderer, end, finished=True)
    assert text == "" and [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("bash", {"command": "ls -la"})
    ]
    cut_text, cut_calls = P.parse_reply(reply[:-3], renderer, end, finished=False)
    assert cut_calls == [] and cut_text.startswith("<tool_call>")  # a cut-off call stays text


def test_requests_of_each_api_become_the_same_conversation() -> None:
    chat = P.from_chat_completions(
        {
            "model": "m",
            "stream": True,
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "List files"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
            ],
            "tools": [BASH_TOOL],
        }
    )
    responses = P.from_responses(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "List files"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            ],
            "tools": [{"type": "function", **BASH_TOOL["function"], "strict": False}],
        }
    )
    messages = P.from_messages(
        {
            "model": "m",
            "max_tokens": 5,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": "List files"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"}],
                },
            ],
            "tools": [
                {
                    "name": "bash",
                    "description": "Run a shell command",
                    "input_schema": BASH_TOOL["function"]["parameters"],
                }
            ],
        }
    )
    assert chat.stream and not responses.stream and not messages.stream
    assert chat.messages == responses.messages == messages.messages
    assert chat.tools == responses.tools == messages.tools == [BASH_TOOL["function"]]


def test_unsupported_content_is_a_precise_400() -> None:
    with pytest.raises(P.RequestError, match=r"messages\.0: content part type 'image_url' is not supported"):
        P.from_chat_completions(
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}
                ],
            }
        )
    with pytest.raises(P.RequestError, match="previous_response_id"):
        P.from_responses({"model": "m", "input": "hi", "previous_response_id": "resp_1"})


def test_a_ready_server_leaves_its_first_request_nothing_to_import(smollm2_dir: Path) -> None:
    """`server.run` builds the validators before it reports ready: once `on_ready` fires, parsing a first request
    of each API imports nothing (built on first use, the SDK types were imported then: 0.6-1.8 s)."""
    import subprocess
    import sys

    code = """
import asyncio, sys
from machine_lsp.serve import llama_backend, server, protocol as P

def ready(url):
    before = set(sys.modules)
    P.from_chat_completions({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    P.from_responses({"model": "m", "input": "hi"})
    P.from_messages({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    print(sorted(set(sys.modules) - before), P._adapter.cache_info().currsize)
    stop.set()

async def main():
    global stop
    stop = asyncio.Event()
    loaded = llama_backend.load_backend(None, None)
    settings = server.ServeSettings(model_name="m", checkpoint="base")
    await server.run(server.bind("127.0.0.1", 0), loaded, settings, on_ready=ready, stop=stop)

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "3"]


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        ("hello", 5),
        ("hello <tool", 6),  # may be the start of a tool call: held back
        ("hello <tool_call>\n{", 6),
        ("a < b", 5),
        ("caf\ufffd", 3),  # an incomplete UTF-8 character
    ],
)
def test_streaming_holds_back_tool_call_markup(text: str, safe: int) -> None:
    assert P.streamable_prefix(text) == safe


def test_served_log_appends_whole_lines_from_many_threads(tmp_path: Path) -> None:
    log = ServedLog(tmp_path / ".machine")
    long_answer = "x" * 20_000  # bigger than a pipe buffer: a torn write would show

    def append(i: int) -> None:
        log.append(
            ServedRow(
                messages=[
                    Message(role="user", content=f"q{i}"),
                    Message(role="assistant", content=long_answer),
                ],
                model="machine",
                checkpoint="base",
                time=now_iso(),
                api="chat.completions",
                finish_reason="stop",
            )
        )

    threads = [threading.Thread(target=append, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (path,) = (tmp_path / ".machine" / "served").glob("*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["messages"][0]["content"] for r in rows) == sorted(f"q{i}" for i in range(16))
    turns = load_turns(path)
    assert len(turns) == 16 and not turns.problems  # every row is a taggable chat turn
