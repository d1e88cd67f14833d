"""The recording proxy at the HTTP level, in process against small aiohttp upstreams on 127.0.0.1.

Streaming passes through as it arrives (the upstream holds its second event until the client has read the first
through the proxy), upstream errors come back as the upstream sent them, an upstream that is down is a 502 in each
API's own error shape, keys are passed on and never stored, and the Host/Origin/content-type/size checks refuse in
the API's shape. No agent here: these are the proxy's own contracts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from machine_lsp.cli.main import main
from machine_lsp.core.transcripts import load_turns, turn_at
from machine_lsp.serve import server
from machine_lsp.serve.captured_log import CapturedLog
from machine_lsp.serve.proxy import Proxy, ProxySettings

KEY = "sk-http-test-key-0b7f3a"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = server.bind("127.0.0.1", 0)
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


def upstream_app(handler: Handler) -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


@contextlib.asynccontextmanager
async def proxy_to(
    upstream: str, machine_dir: Path, max_body: int = 1 << 20
) -> AsyncIterator[tuple[str, Proxy]]:
    log = CapturedLog(machine_dir, datetime.now(UTC))
    log.open()
    sock = server.bind("127.0.0.1", 0)
    proxy = Proxy(
        ProxySettings(upstream=upstream, log=log, bound_port=sock.getsockname()[1], max_body=max_body)
    )
    runner = web.AppRunner(proxy.app(), access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", proxy
    finally:
        await runner.cleanup()  # waits for the recorder: every ended exchange is in the log
        log.close()


def rows(machine_dir: Path) -> list[dict[str, Any]]:
    (path,) = (machine_dir / "captured").glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


CHAT_REQUEST = {
    "model": "m",
    "stream": True,
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "run echo hi"}],
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
}


async def test_a_stream_passes_through_as_it_arrives_and_is_recorded_whole(tmp_path: Path) -> None:
    first_read = asyncio.Event()

    async def upstream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chat_chunk({"role": "assistant", "content": "I'll "}))
        await asyncio.wait_for(first_read.wait(), 60)  # only once the client has it through the proxy
        await response.write(chat_chunk({"content": "run it."}))
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "bash", "arguments": ""}}
        await response.write(chat_chunk({"tool_calls": [call]}))
        part = {"index": 0, "function": {"arguments": '{"command": "echo hi"}'}}
        await response.write(chat_chunk({"tool_calls": [part]}, "tool_calls"))
        await response.write(b"data: [DONE]\n\n")
        return response

    machine_dir = tmp_path / ".machine"
    async with serving(upstream_app(upstream)) as up, proxy_to(up, machine_dir) as (url, _):
        async with aiohttp.ClientSession() as client:
            async with client.post(f"{url}/v1/chat/completions", json=CHAT_REQUEST) as response:
                assert response.status == 200
                first = await response.content.readuntil(b"\n\n")
                assert b"I'll " in first
                first_read.set()
                rest = await response.content.read()
    assert b"[DONE]" in rest
    (row,) = rows(machine_dir)
    assert row["stream"] is True and row["request"] == CHAT_REQUEST
    message = row["response"]["choices"][0]["message"]
    assert message["content"] == "I'll run it."
    assert message["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "echo hi"}'}
    assert row["messages"][-1]["tool_calls"][0]["function"]["name"] == "bash"
    assert row["tools"][0]["function"]["name"] == "bash"
    turn = turn_at(load_turns(Path(rows_path(machine_dir)), trace=True), None)
    assert turn.messages[1].content == "run echo hi" and turn.source.harness == "proxy"


def rows_path(machine_dir: Path) -> Path:
    (path,) = (machine_dir / "captured").glob("*.jsonl")
    return path


async def test_keys_are_passed_on_and_never_stored(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []

    async def upstream(request: web.Request) -> web.StreamResponse:
        seen.append({k.lower(): v for k, v in request.headers.items()})
        assert await request.read() == raw
        message = {"role": "assistant", "content": "hello"}
        return web.json_response(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    raw = b'{"model": "m",\n "messages": [{"role": "user", "content": "hi \\u00e9"}]}'
    headers = {"Authorization": f"Bearer {KEY}", "X-Api-Key": KEY, "Content-Type": "application/json"}
    machine_dir = tmp_path / ".machine"
    async with serving(upstream_app(upstream)) as up, proxy_to(up, machine_dir) as (url, _):
        async with aiohttp.ClientSession() as client:
            async with client.post(f"{url}/v1/chat/completions?x=1", data=raw, headers=headers) as response:
                assert (await response.json())["choices"][0]["message"]["content"] == "hello"
    assert seen[0]["authorization"] == f"Bearer {KEY}" and seen[0]["x-api-key"] == KEY
    (row,) = rows(machine_dir)
    assert row["messages"][-1] == {"role": "assistant", "content": "hello"}
    assert row["messages"][0]["content"] == "hi é"
    for path in machine_dir.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes()


ANTHROPIC_ERROR = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}


async def test_an_upstream_error_comes_back_as_sent_and_is_no_turn(tmp_path: Path) -> None:
    async def upstream(request: web.Request) -> web.StreamResponse:
        return web.json_response(ANTHROPIC_ERROR, status=429, headers={"retry-after": "7"})

    machine_dir = tmp_path / ".machine"
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    async with serving(upstream_app(upstream)) as up, proxy_to(up, machine_dir) as (url, _):
        async with aiohttp.ClientSession() as client:
            async with client.post(f"{url}/v1/messages", json=body) as response:
                assert response.status == 429 and response.headers["retry-after"] == "7"
                assert await response.json() == ANTHROPIC_ERROR
    (row,) = rows(machine_dir)
    assert row["status"] == 429 and row["response"] == ANTHROPIC_ERROR
    turns = load_turns(rows_path(machine_dir))
    assert list(turns) == [] and not turns.problems


@pytest.mark.parametrize(
    ("path", "shape"),
    [("/v1/chat/completions", "openai"), ("/v1/responses", "openai"), ("/v1/messages", "anthropic")],
)
async def test_an_upstream_that_is_down_is_a_502_in_the_apis_shape(
    tmp_path: Path, path: str, shape: str
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed when the block ends: nothing listens
    machine_dir = tmp_path / ".machine"
    async with proxy_to(dead, machine_dir) as (url, _):
        async with aiohttp.ClientSession() as client:
            async with client.post(url + path, json={"model": "m"}, headers={"x-api-key": KEY}) as response:
                assert response.status == 502
                error = await response.json()
    if shape == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "api_error"
    else:
        assert error["error"]["type"] == "api_error"
    message = error["error"]["message"]
    assert "cannot be reached" in message and KEY not in message
    (row,) = rows(machine_dir)
    assert row["status"] == 502 and "cannot be reached" in row["problem"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "evil.example:80"}, 403),
        ({"Origin": "http://evil.example"}, 403),
        ({"Content-Type": "text/plain"}, 415),
    ],
)
async def test_foreign_hosts_origins_and_content_types_are_refused(
    tmp_path: Path, headers: dict[str, str], status: int
) -> None:
    called: list[str] = []

    async def upstream(request: web.Request) -> web.StreamResponse:
        called.append(request.path)
        return web.json_response({})

    async with serving(upstream_app(upstream)) as up, proxy_to(up, tmp_path / ".machine") as (url, _):
        async with aiohttp.ClientSession() as client:
            sent = {"Content-Type": "application/json", **headers}
            async with client.post(f"{url}/v1/messages", data=b"{}", headers=sent) as response:
                assert response.status == status
                assert (await response.json())["type"] == "error"
    assert called == []


async def test_a_body_over_the_limit_is_a_413_in_the_apis_shape(tmp_path: Path) -> None:
    async def upstream(request: web.Request) -> web.StreamResponse:
        raise AssertionError("not forwarded")

    async with (
        serving(upstream_app(upstream)) as up,
        proxy_to(up, tmp_path / ".machine", max_body=1000) as (url, _),
    ):
        async with aiohttp.ClientSession() as client:
            big = {"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}
            async with client.post(f"{url}/v1/chat/completions", json=big) as response:
                assert response.status == 413
                assert "limit of 1000 bytes" in (await response.json())["error"]["message"]


def test_a_symlinked_captured_dir_is_refused_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine_dir = tmp_path / ".machine"
    machine_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, machine_dir / "captured")
    monkeypatch.setenv("MACHINE_HOME", str(machine_dir))
    code = main(["capture", "proxy", "--upstream", "http://127.0.0.1:9", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 3 and "captured" in err and "symbolic link" in err, err
    assert list(elsewhere.iterdir()) == []


async def test_an_answer_cut_off_mid_stream_is_recorded_incomplete_and_cannot_be_tagged_good(
    tmp_path: Path,
) -> None:
    async def upstream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chat_chunk({"role": "assistant", "content": "Half an ans"}))
        assert request.transport is not None
        request.transport.abort()  # the upstream dies mid-answer
        return response

    machine_dir = tmp_path / ".machine"
    async with serving(upstream_app(upstream)) as up, proxy_to(up, machine_dir) as (url, _):
        async with aiohttp.ClientSession() as client:
            async with client.post(f"{url}/v1/chat/completions", json=CHAT_REQUEST) as response:
                with pytest.raises(aiohttp.ClientPayloadError):
                    await response.read()  # the agent sees the answer end early, not a clean end
    (row,) = rows(machine_dir)
    assert row["incomplete"] is True and "cut off" in row["problem"]
    turns = load_turns(rows_path(machine_dir))
    assert not list(turns) and "cut off" in turns.problems[0].message


async def test_an_exchange_it_cannot_read_is_reported_at_its_line_and_the_others_stay_taggable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def upstream(request: web.Request) -> web.StreamResponse:
        message = {"role": "assistant", "content": "A cat."}
        return web.json_response(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    pictured = {"model": "m", "messages": [{"role": "user", "content": [image]}]}
    plain = {"model": "m", "messages": [{"role": "user", "content": "what is this?"}]}
    machine_dir = tmp_path / ".machine"
    async with serving(upstream_app(upstream)) as up, proxy_to(up, machine_dir) as (url, _):
        async with aiohttp.ClientSession() as client:
            for body in (pictured, plain):
                async with client.post(f"{url}/v1/chat/completions", json=body) as response:
                    assert response.status == 200
    path = rows_path(machine_dir)
    monkeypatch.setenv("MACHINE_HOME", str(machine_dir))
    assert main(["good", "--from", f"{path}:1"]) != 0
    err = capsys.readouterr().err
    assert f"{path}:1:1: exchange not taggable" in err and "image_url" in err, err
    assert main(["good", "--from", f"{path}:2"]) == 0, capsys.readouterr().err
    record = json.loads((machine_dir / "tagged.jsonl").read_text())
    assert record["messages"] == [
        {"role": "user", "content": "what is this?"},
        {"role": "assistant", "content": "A cat."},
    ]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--upstream", "ftp://example.com"], "--upstream must be an http(s) URL"),
        (["--upstream", "https://api.example.com/?key=sk-x"], "without a query"),
        (["--upstream", "http://127.0.0.1:9", "--port", "70000"], "--port must be 0-65535"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    argv: list[str],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    assert main(["capture", "proxy", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1 and "sk-x" not in err, err
    assert not (tmp_path / ".machine").exists()
