"""Bad input against the real server: over-long prompts, malformed JSON, requests the SDK types reject, a client
that disconnects mid-stream, 32 concurrent requests; and the CLI's own refusals (no model loaded for those)."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from serve_helpers import API_KEY, ServeProcess, free_port, machine

HEADERS = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
LONG = "apple " * 9000  # ~9k tokens: over SmolLM2's 8192


@pytest.mark.slow
def test_a_prompt_over_the_context_length_is_a_400_in_each_api_shape(base_server: ServeProcess) -> None:
    client = openai.OpenAI(base_url=base_server.url, api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as chat_error:
        client.chat.completions.create(
            model="machine", messages=[{"role": "user", "content": LONG}], stream=True
        )
    assert chat_error.value.code == "context_length_exceeded"
    assert "maximum context length is 8192 tokens" in chat_error.value.message
    with pytest.raises(openai.BadRequestError) as responses_error:
        client.responses.create(model="machine", input=LONG)
    assert responses_error.value.code == "context_length_exceeded"
    claude = anthropic.Anthropic(base_url=base_server.root, api_key=API_KEY, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as messages_error:
        claude.messages.create(model="machine", max_tokens=10, messages=[{"role": "user", "content": LONG}])
    body = messages_error.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("prompt is too long:")
    assert base_server.alive()


@pytest.mark.slow
def test_malformed_json_and_invalid_requests_are_400s(base_server: ServeProcess) -> None:
    for path in ("/v1/chat/completions", "/v1/responses"):
        response = httpx.post(
            base_server.root + path, content=b'{"model": "m", "messages": [', headers=HEADERS
        )
        assert response.status_code == 400
        assert response.json()["error"]["message"].startswith("malformed JSON")
    response = httpx.post(base_server.root + "/v1/messages", content=b"not json", headers=HEADERS)
    assert response.status_code == 400 and response.json()["type"] == "error"
    assert response.json()["error"]["message"].startswith("malformed JSON")
    # Valid JSON the SDK's request type rejects: the field is named.
    response = httpx.post(base_server.url + "/chat/completions", json={"model": "m"}, headers=HEADERS)
    assert response.status_code == 400 and "messages" in response.json()["error"]["message"]
    response = httpx.post(
        base_server.url + "/messages",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers=HEADERS,
    )
    assert response.status_code == 400 and "max_tokens" in response.json()["error"]["message"]
    response = httpx.post(base_server.url + "/chat/completions", json=[1, 2], headers=HEADERS)
    assert response.status_code == 400
    assert base_server.alive()


@pytest.mark.slow
def test_a_client_that_disconnects_mid_stream_does_not_stop_the_batch(base_server: ServeProcess) -> None:
    leaver_prompt = "Write a long story about a lighthouse keeper."
    stayer_prompt = "Write a long story about a baker."
    started = threading.Barrier(2)
    result: dict[str, object] = {}

    def stayer() -> None:
        client = openai.OpenAI(base_url=base_server.url, api_key=API_KEY, max_retries=0, timeout=300)
        started.wait()
        chunks = list(
            client.chat.completions.create(
                model="machine",
                messages=[{"role": "user", "content": stayer_prompt}],
                max_tokens=40,
                stream=True,
            )
        )
        result["finish"] = chunks[-1].choices[0].finish_reason
        result["text"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    thread = threading.Thread(target=stayer)
    thread.start()
    body = json.dumps(
        {
            "model": "machine",
            "messages": [{"role": "user", "content": leaver_prompt}],
            "max_tokens": 400,
            "stream": True,
        }
    ).encode()
    sock = socket.create_connection(("127.0.0.1", base_server.port), timeout=300)
    started.wait()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    received = b""
    while received.count(b"data: ") < 3:  # the role chunk and two deltas: it is streaming
        received += sock.recv(4096)
    sock.close()  # gone mid-stream
    thread.join(timeout=300)
    assert result.get("finish") == "length" and result.get("text")
    assert base_server.alive()
    prompts = [row["messages"][0]["content"] for _, _, row in base_server.served_rows()]
    assert stayer_prompt in prompts and leaver_prompt not in prompts  # only answered exchanges are logged


@pytest.mark.slow
def test_32_concurrent_requests_are_all_answered(base_server: ServeProcess) -> None:
    before = len(base_server.served_rows())

    def ask(i: int) -> httpx.Response:
        return httpx.post(
            base_server.url + "/chat/completions",
            json={
                "model": "machine",
                "messages": [{"role": "user", "content": f"What is {i} plus 1?"}],
                "max_tokens": 6,
            },
            headers=HEADERS,
            timeout=600,
        )

    with ThreadPoolExecutor(max_workers=32) as pool:
        responses = list(pool.map(ask, range(32)))
    assert [r.status_code for r in responses] == [200] * 32
    assert all(r.json()["choices"][0]["message"]["content"] for r in responses)
    rows = base_server.served_rows()[before:]
    assert sorted(row["messages"][0]["content"] for _, _, row in rows) == sorted(
        f"What is {i} plus 1?" for i in range(32)
    )


# ---------------------------------------------------------------------------------------------------------------
# CLI refusals: each fails before any model loads


def test_unknown_checkpoint_is_a_clear_cli_error(tmp_path: Path) -> None:
    (tmp_path / ".machine").mkdir()
    done = machine(tmp_path, "serve", "local://nope/step-1", "--port", str(free_port()))
    assert done.returncode == 2 and "no run 'nope'" in done.stderr
    done = machine(tmp_path, "serve", "latest", "--port", str(free_port()))
    assert done.returncode == 2 and "no training run with a checkpoint" in done.stderr
    done = machine(tmp_path, "serve", "s3://bucket/x", "--port", str(free_port()))
    assert done.returncode == 2 and "unknown checkpoint" in done.stderr
    done = machine(tmp_path, "serve", "tinker://run-1/sampler_weights/final")
    assert done.returncode == 2 and "served by Tinker itself" in done.stderr


def test_port_in_use_and_an_open_host_without_a_key_are_refused(tmp_path: Path) -> None:
    (tmp_path / ".machine").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = machine(tmp_path, "serve", "base", "--port", str(port))
    assert done.returncode == 2 and f"port {port} on 127.0.0.1 is in use" in done.stderr
    assert "loading" not in done.stderr  # refused before the model loads
    done = machine(tmp_path, "serve", "base", "--host", "0.0.0.0", "--port", str(free_port()))
    assert done.returncode == 2 and "without a key" in done.stderr
