"""An image in a tool result (a screenshot or image-reading tool's) cannot go into a text row: it is dropped with
a warning naming its line when the turn is tagged with the tool trace, never silently, for Codex, Claude Code and
Pi alike. Small logs of our own in each harness's shape (the scripted endpoint's tools return text only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capture_helpers import Cli

PNG = "iVBORw0KGgo="


def _codex(kind: str, **payload) -> dict:
    return {"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload}


CODEX = [
    _codex("session_meta", id="s1"),
    _codex("response_item", type="message", role="user", content=[{"type": "input_text", "text": "look"}]),
    _codex("response_item", type="function_call", name="view_image", arguments="{}", call_id="c1"),
    _codex(
        "response_item",
        type="function_call_output",
        call_id="c1",
        output=[
            {"type": "input_text", "text": "the screenshot:"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
        ],
    ),
    _codex(
        "response_item", type="message", role="assistant", content=[{"type": "output_text", "text": "A cat."}]
    ),
]


def _claude(uuid: str, parent: str | None, kind: str, content) -> dict:
    role = "assistant" if kind == "assistant" else "user"
    message = {"id": f"m_{uuid}", "role": role, "model": "claude-x", "content": content}
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": kind,
        "sessionId": "s",
        "uuid": uuid,
        "message": message,
    }


CLAUDE = [
    _claude("u1", None, "user", "look"),
    _claude(
        "a1",
        "u1",
        "assistant",
        [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.png"}}],
    ),
    _claude(
        "r1",
        "a1",
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [
                    {"type": "text", "text": "the screenshot:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                ],
            }
        ],
    ),
    _claude("a2", "r1", "assistant", [{"type": "text", "text": "A cat."}]),
]


def _pi(entry_id: str, parent: str | None, role: str, content: list[dict], **fields) -> dict:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "message": {"role": role, "content": content, **fields},
    }


PI = [
    {"type": "session", "version": 3, "id": "s"},
    _pi("u1", None, "user", [{"type": "text", "text": "look"}]),
    _pi(
        "a1",
        "u1",
        "assistant",
        [{"type": "toolCall", "id": "t1", "name": "read", "arguments": {}}],
        stopReason="toolUse",
    ),
    _pi(
        "r1",
        "a1",
        "toolResult",
        [
            {"type": "text", "text": "the screenshot:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
        ],
        toolCallId="t1",
        toolName="read",
    ),
    _pi("a2", "r1", "assistant", [{"type": "text", "text": "A cat."}], stopReason="stop"),
]


@pytest.mark.parametrize(
    "harness, log, result_line", [("codex", CODEX, 4), ("claude-code", CLAUDE, 3), ("pi", PI, 4)]
)
def test_an_image_dropped_from_a_tool_result_is_warned_of(
    tmp_path: Path, cli: Cli, harness: str, log: list, result_line: int
) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in log))
    code, _, err = cli("good", "--trace", "--from", str(path))
    assert code == 0, err
    assert f"line {result_line}: an image" in err and "in a tool result was dropped" in err, err
    [record] = cli.records()
    assert record["source"]["harness"] == harness
    [tool] = [m for m in record["messages"] if m["role"] == "tool"]
    assert tool["content"] == "the screenshot:"  # the text kept, the image out (not its base64)
