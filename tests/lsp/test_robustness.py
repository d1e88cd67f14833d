"""Hostile documents and settings over the real server (raw JSON-RPC): answers stay normal, nothing blocks or leaks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_client import RawClient  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
INTERNAL_ERROR = -32603


@pytest.fixture
def raw(tmp_path: Path):
    (tmp_path / ".machine").mkdir()
    client = RawClient(tmp_path)
    client.initialize()
    yield client
    client.close()


def _requests_on_line(client: RawClient, uri: str, line: int) -> list[dict]:
    where = {"textDocument": {"uri": uri}, "position": {"line": line, "character": 0}}
    hover = client.call("textDocument/hover", where)
    rng = {"start": {"line": line, "character": 0}, "end": {"line": line, "character": 0}}
    actions = client.call(
        "textDocument/codeAction",
        {"textDocument": {"uri": uri}, "range": rng, "context": {"diagnostics": []}},
    )
    return [hover, actions]


def _session_header() -> str:
    return json.dumps({"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"})


@pytest.mark.parametrize("session", [False, True], ids=["chat", "session-log"])
def test_deep_nesting_and_lone_surrogates_get_normal_answers(raw, tmp_path, session):
    deep = "[" * 100_000 + "]" * 100_000
    surrogate = json.dumps(
        {"messages": [{"role": "user", "content": "q\ud800"}, {"role": "assistant", "content": "a\udfff"}]}
    )
    pi_surrogate = json.dumps(
        {
            "type": "message",
            "id": "m1",
            "parentId": None,
            "timestamp": "t",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "x\ud800"}]},
        }
    )
    lines = [_session_header(), deep, pi_surrogate] if session else [deep, surrogate]
    uri = raw.open(tmp_path / "hostile.jsonl", "\n".join(lines) + "\n")
    for line in range(len(lines)):
        for answer in _requests_on_line(raw, uri, line):
            assert "error" not in answer, answer
    tagged = raw.call(
        "workspace/executeCommand",
        {"command": "machine.tag", "arguments": [{"uri": uri, "line": len(lines), "verdict": "bad"}]},
    )
    assert tagged.get("error", {}).get("code") != INTERNAL_ERROR, tagged


def test_invalid_settings_are_shown_and_defaults_kept(tmp_path):
    (tmp_path / ".machine").mkdir()
    client = RawClient(tmp_path)
    client.initialize({"machine": {"debounceMs": "fast", "trainGlobs": ["**/a*/" * 6 + "x.jsonl"]}})
    shown = [client.wait_notification("window/showMessage") for _ in range(2)]
    assert any("machine.debounceMs" in m["message"] for m in shown)
    assert any("machine.trainGlobs" in m["message"] and "'**'" in m["message"] for m in shown)
    info = client.call("workspace/executeCommand", {"command": "machine.server.info"})["result"]
    assert info["settings"] == {
        "trainGlobs": ["**/*.jsonl"],
        "evalGlobs": ["**/*eval*.jsonl", "**/*heldout*.jsonl"],
        "debounceMs": 60,
    }
    # 16 repeated `**/` are one `**/`: accepted, and matching stays cheap (the server answers at once).
    client.notify(
        "workspace/didChangeConfiguration",
        {"settings": {"machine": {"trainGlobs": ["**/" * 16 + "*.jsonl"]}}},
    )
    uri = client.open(tmp_path / ("a/" * 30 + "t.jsonl"), "{bad\n")
    published = client.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == uri)
    assert [d["code"] for d in published["diagnostics"]] == ["json-invalid"]
    assert client.close() == 0


def test_line_cache_is_dropped_on_close(raw, tmp_path):
    rows = "".join(
        json.dumps(
            {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}
        )
        + "\n"
        for i in range(50)
    )
    uri = raw.open(tmp_path / "c.jsonl", rows + "{bad\n")
    raw.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == uri)
    change = {
        "range": {"start": {"line": 50, "character": 0}, "end": {"line": 50, "character": 0}},
        "text": " ",
    }
    raw.notify(
        "textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [change]}
    )
    raw.wait_notification(
        "textDocument/publishDiagnostics", lambda p: p["uri"] == uri and p.get("version") == 2
    )
    info = raw.call("workspace/executeCommand", {"command": "machine.server.info"})["result"]
    assert info["line_cache_chars"] > 0
    raw.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    info = raw.call("workspace/executeCommand", {"command": "machine.server.info"})["result"]
    assert info["line_cache_chars"] == 0


def test_hover_on_a_long_session_log_does_not_hold_other_requests(raw, tmp_path):
    """The turns are built in a worker thread: a request sent after the hover is answered before it."""
    lines = [_session_header()]
    parent = None
    for index in range(20_000):
        role = "user" if index % 2 == 0 else "assistant"
        content = f"{role} {index} " + "words " * 10
        message = {
            "role": role,
            "content": content if role == "user" else [{"type": "text", "text": content}],
        }
        lines.append(
            json.dumps(
                {
                    "type": "message",
                    "id": f"e{index}",
                    "parentId": parent,
                    "timestamp": "t",
                    "message": message,
                }
            )
        )
        parent = f"e{index}"
    uri = raw.open(tmp_path / "long.jsonl", "\n".join(lines) + "\n")
    raw.call("workspace/executeCommand", {"command": "machine.server.info"})  # the open is handled
    hover_id = raw.request(
        "textDocument/hover",
        {"textDocument": {"uri": uri}, "position": {"line": len(lines) - 1, "character": 0}},
    )
    ping_id = raw.request("workspace/executeCommand", {"command": "machine.server.info"})
    first = raw.messages.get(timeout=120)
    while "method" in first:
        first = raw.messages.get(timeout=120)
    assert first["id"] == ping_id, "the hover held the event loop"
    assert "assistant 19999" in raw.reply(hover_id, timeout=300)["result"]["contents"]["value"]
