"""A project for the scoped-training tests: tagged rows in the store and one untagged agent turn with `tools`.

The agent turn is a recording-proxy capture (`.machine/captured/`, found by core.sessions as the project's own
session): a system prompt, a request, a tool call and its result, then the answer; it is not tagged, so a scoped
run turns its request into an anchor.
"""

from __future__ import annotations

import json
from pathlib import Path

from machine_lsp.core.schema import Message, Source, TagRecord
from machine_lsp.core.store import Store

AGENT_SYSTEM = "You are a coding agent working in a repository."
AGENT_REQUEST = "Check whether the build log mentions errors."
SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "run_shell",
        "description": "Run a shell command in the repository.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def tag_rows(project: Path, n: int) -> None:
    """`n` good tags of addition questions in the `answer: N` style, over four sessions."""
    store = Store.open(project)
    for a in range(n):
        store.append(
            TagRecord(
                id=f"r{a}",
                verdict="good",
                messages=[
                    Message(role="user", content=f"What is {a + 10} plus {a + 3}?"),
                    Message(role="assistant", content=f"answer: {2 * a + 13}"),
                ],
                source=Source(
                    kind="session_log",
                    uri=f"file:///logs/s{a % 4}.jsonl",
                    line=a + 1,
                    end_line=a + 1,
                    session_id=f"s{a % 4}",
                ),
                created_at="2026-11-30T10:00:00.000Z",
                tool_version="0.1.0",
            )
        )


def capture_agent_turn(project: Path) -> None:
    call = {"name": "run_shell", "arguments": json.dumps({"command": "grep -i error build.log"})}
    messages = [
        {"role": "system", "content": AGENT_SYSTEM},
        {"role": "user", "content": AGENT_REQUEST},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "(no output)"},
        {"role": "assistant", "content": "The build log mentions no errors."},
    ]
    line = {
        "capture": "proxy",
        "session": "agent1",
        "time": "2026-11-30T10:00:00Z",
        "done": "2026-11-30T10:00:01Z",
        "api": "chat.completions",
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "messages": messages,
        "tools": [SHELL_TOOL],
    }
    directory = project / ".machine" / "captured"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "20261130T100000-agent1.jsonl").write_text(json.dumps(line) + "\n")
