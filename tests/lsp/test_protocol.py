"""The base protocol and the lifecycle under hostile traffic, over the real server's stdio (raw JSON-RPC)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_client import RawClient, frame  # noqa: E402


@pytest.fixture
def raw(tmp_path: Path):
    (tmp_path / ".machine").mkdir()
    client = RawClient(tmp_path, env={"MACHINE_LSP_FRAME_STALL_S": "1"})
    client.initialize()
    yield client
    client.close()


def _alive(client: RawClient) -> None:
    """The server still answers a request after whatever came before."""
    answer = client.call("workspace/executeCommand", {"command": "machine.server.info", "arguments": [{}]})
    assert "result" in answer, answer
    assert answer["result"]["version"]


def _body(msg_id: int) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "workspace/executeCommand",
            "params": {"command": "machine.server.info"},
        }
    ).encode()


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda body: b"Content-Length: %d\r\n\r\n" % (len(body) - 5) + body, id="too-short"),
        pytest.param(lambda body: b"Content-Length: %d\r\n\r\n" % (len(body) + 40) + body, id="too-long"),
        pytest.param(lambda body: b"Content-Length: -12\r\n\r\n" + body, id="negative"),
        pytest.param(lambda body: b"Content-Length: twelve\r\n\r\n" + body, id="non-numeric"),
        pytest.param(lambda body: b"Content-Length: 999999999999\r\n\r\n" + body, id="huge"),
        pytest.param(lambda body: b"garbage line\r\n\r\n" + body, id="no-length"),
    ],
)
def test_a_malformed_frame_costs_one_message_not_the_server(raw, bad):
    raw.send_bytes(bad(_body(900)))
    _alive(raw)  # resynchronised: the next well-formed request is answered
    # A broken request whose id can be read is answered with an error, so no client waits for it forever.
    answer = raw.reply(900, timeout=10)
    assert "error" in answer or "result" in answer


def test_lowercase_and_lf_only_headers_are_read(raw):
    body = _body(901)
    raw.send_bytes(b"content-length: %d\n\n" % len(body) + body)
    assert raw.reply(901)["result"]["version"]
    _alive(raw)


def test_huge_length_is_reported_on_stderr_and_the_server_lives(tmp_path):
    (tmp_path / ".machine").mkdir()
    client = RawClient(tmp_path, env={"MACHINE_LSP_FRAME_STALL_S": "1"})
    client.initialize()
    client.send_bytes(b"Content-Length: 999999999999\r\n\r\n{}")
    _alive(client)
    assert client.close() == 0
    assert "Content-Length 999999999999" in client.stderr()


def test_requests_after_shutdown_get_invalid_request(raw):
    assert raw.call("shutdown")["result"] is None
    answer = raw.call(
        "textDocument/hover", {"textDocument": {"uri": "file:///x"}, "position": {"line": 0, "character": 0}}
    )
    assert answer["error"]["code"] == -32600  # InvalidRequest
    raw.notify("exit")
    assert raw.proc.wait(timeout=10) == 0


def test_exit_without_shutdown_exits_1(tmp_path):
    (tmp_path / ".machine").mkdir()
    client = RawClient(tmp_path)
    client.initialize()
    client.notify("exit")
    assert client.proc.wait(timeout=10) == 1


def test_document_changes_leave_no_request_futures_behind(raw, tmp_path):
    uri = raw.open(tmp_path / "t.jsonl", '{"messages": []}\n')
    for version in range(2, 302):
        change = {
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
            "text": " ",
        }
        raw.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]},
        )
    info = raw.call("workspace/executeCommand", {"command": "machine.server.info", "arguments": [{}]})[
        "result"
    ]
    assert info["open_requests"] <= 2, info["open_requests"]  # pygls 2.1.1 alone keeps one per change: 300


def test_frames_split_across_writes_are_joined(raw):
    data = frame(
        {
            "jsonrpc": "2.0",
            "id": 902,
            "method": "workspace/executeCommand",
            "params": {"command": "machine.server.info"},
        }
    )
    for index in range(0, len(data), 7):
        raw.send_bytes(data[index : index + 7])
    assert raw.reply(902)["result"]["version"]


def test_a_body_that_never_completes_is_given_up_and_the_next_message_read(raw):
    """Content-Length larger than the message and nothing more for a while: the reader gives up on it after the
    stall time (1 s here) and reads the next message whole, even though a read was pending meanwhile."""
    body = _body(903)
    raw.send_bytes(b"Content-Length: %d\r\n\r\n" % (len(body) + 100) + body)
    assert "error" in raw.reply(903, timeout=10)  # answered ParseError once given up
    time.sleep(1.5)
    _alive(raw)
