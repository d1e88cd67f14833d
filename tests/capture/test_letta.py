"""Letta Code (0.32.18, local backend) transcripts: recognised as Letta Code, read as Letta sent them.

The fixture runs the real Letta Code against the scripted endpoint (a turn where it runs `echo hi` with its Bash
tool). tests/fixtures/letta/ holds the transcript and the requests of one such real run, so the reader is checked
where the agent is not installed too. Letta puts `<system-reminder>` context into the user's message: a plain tag
keeps only what the user typed, a --trace tag keeps the message exactly as sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness_runs import TOOL_PROMPT, require
from letta_run import LettaRun
from model_endpoint import ModelEndpoint

from machine_lsp.core.schema import Message, text_of
from machine_lsp.core.sessions import Homes, find_sessions
from machine_lsp.core.transcripts import load_turns, turn_at

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "letta"


@pytest.fixture(scope="module")
def letta_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LettaRun, list[dict[str, Any]]]]:
    require("letta-code")
    with ModelEndpoint() as served:
        run = LettaRun("letta-code", tmp_path_factory.mktemp("letta"), served)
        run.run(TOOL_PROMPT)
        requests = [
            {"tools": r.body.get("tools") or [], "messages": r.body["messages"]}
            for r in served.requests
            if r.api == "chat"
        ]
        yield run, requests


def sent(message: dict[str, Any]) -> tuple:
    calls = tuple(
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
        for c in message.get("tool_calls") or []
    )
    content = message.get("content")
    parts = [p.get("text", "") for p in content] if isinstance(content, list) else [content or ""]
    return (message["role"], parts, calls, message.get("tool_call_id"))


def read(message: Message) -> tuple:
    calls = tuple((c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or [])
    parts = [p.text for p in message.content] if isinstance(message.content, list) else [message.content]
    return (message.role, parts, calls, message.tool_call_id)


def as_logged(request: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request in the adapters' --trace shape: the user message's `<system-reminder>` parts become one `system`
    message before what the user typed (docs/CAPTURE.md, the injected-context rule)."""
    out: list[dict[str, Any]] = []
    for message in request:
        if message["role"] == "system":
            continue  # the system prompt is not in the log
        content = message.get("content")
        if message["role"] == "user" and isinstance(content, list):
            injected = [
                p["text"].strip() for p in content if p["text"].lstrip().startswith("<system-reminder>")
            ]
            typed = [p for p in content if not p["text"].lstrip().startswith("<system-reminder>")]
            if injected:
                out.append({"role": "system", "content": "\n".join(injected)})
            out.append({**message, "content": typed[0]["text"] if len(typed) == 1 else typed})
        else:
            out.append(message)
    return out


def check(log: Path, requests: list[dict[str, Any]]) -> None:
    conversations = [as_logged(r["messages"]) for r in requests if r["tools"]]
    traced = load_turns(log, trace=True)
    assert traced.adapter == "letta-code" and traced.problems == []
    assert len(traced) == len(conversations) == 2  # the Bash call, then the final reply
    for turn, request in zip(traced, conversations, strict=True):
        assert [read(m) for m in turn.messages[:-1]] == [sent(m) for m in request]
        assert turn.source.harness == "letta-code"
    assert traced[0].messages[-1].tool_calls is not None
    assert traced[0].messages[-1].tool_calls[0].function.name == "Bash"
    plain = turn_at(load_turns(log), None)
    assert [m.role for m in plain.messages] == ["user", "assistant"]
    assert plain.messages[0].content == TOOL_PROMPT  # the <system-reminder> parts are not what the user typed
    assert text_of(plain.messages[1]) == "The command printed: hi"
    assert plain.source.session_id.startswith("local-conv-")


def test_the_transcript_letta_wrote_reads_as_it_sent_it(
    letta_run: tuple[LettaRun, list[dict[str, Any]]],
) -> None:
    run, requests = letta_run
    check(run.log(), requests)


def test_letta_sessions_are_listed_for_the_project(letta_run: tuple[LettaRun, list[dict[str, Any]]]) -> None:
    run, _ = letta_run
    sessions = find_sessions(run.project, homes=Homes({"HOME": str(run.home)}))
    assert [(s.harness, s.turns) for s in sessions] == [("letta-code", 1)]
    assert sessions[0].first_prompt == TOOL_PROMPT


def test_the_stored_real_transcript_reads_as_letta_sent_it() -> None:
    check(FIXTURES / "messages.jsonl", json.loads((FIXTURES / "requests.json").read_text()))
