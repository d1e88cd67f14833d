"""Hostile input against one real `machine serve base` (SmolLM2): sampling values that cannot be decoded, what a web
page can forge, huge bodies, a client that goes away, the request log line; and SIGTERM with streams open (its own server,
since it is stopped)."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_helpers import ServeProcess

pytestmark = pytest.mark.slow

JSON_HEADERS = {"Content-Type": "application/json"}
BODY_CAP_MB = 2


@pytest.fixture(scope="module")
def hostile_project(tmp_path_factory: pytest.TempPathFactory, smollm2_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("serve-hostile")
    (root / ".machine").mkdir()
    return root


@pytest.fixture(scope="module")
def server(hostile_project: Path) -> Iterator[ServeProcess]:
    process = ServeProcess(hostile_project, "base", "--max-tokens", "64", "--max-body-mb", str(BODY_CAP_MB))
    yield process
    process.stop()


def chat(content: str = "Say hi.", **extra: object) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 4, **extra}


def post(server: ServeProcess, path: str, body: object, timeout: float = 300) -> httpx.Response:
    return httpx.post(server.root + path, content=json.dumps(body), headers=JSON_HEADERS, timeout=timeout)


def health(server: ServeProcess) -> dict:
    return httpx.get(server.root + "/health", timeout=60).json()


# -- 1. sampling values: checked per request, sampled per row ---------------------------------------------------


def _together(server: ServeProcess, bodies: list[tuple[str, dict]]) -> list[httpx.Response]:
    """Send every body at the same moment (one wave)."""
    barrier = threading.Barrier(len(bodies))

    def send(item: tuple[str, dict]) -> httpx.Response:
        barrier.wait(timeout=60)
        return post(server, *item)

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, bodies))


@pytest.mark.parametrize("bad", [{"temperature": 1e-40}, {"temperature": 1e-40, "top_p": 1e-30}])
def test_a_degenerate_sampling_row_does_not_break_its_wave(server: ServeProcess, bad: dict) -> None:
    good = [
        ("/v1/chat/completions", chat(f"Name a colour {i}.", temperature=0.8, top_p=0.9)) for i in range(3)
    ]
    responses = _together(server, [("/v1/chat/completions", chat("Say hi.", **bad)), *good])
    assert [r.status_code for r in responses] == [200] * 4, [r.text[:300] for r in responses]
    assert all(r.json()["choices"][0]["message"]["content"] is not None for r in responses)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", chat(top_p=0), "top_p"),
        ("/v1/chat/completions", chat(temperature="NaN"), "temperature"),
        ("/v1/chat/completions", chat(temperature="Infinity"), "temperature"),
        ("/v1/chat/completions", chat(temperature=2.5), "temperature"),
        ("/v1/chat/completions", chat(temperature=-0.1), "temperature"),
        ("/v1/chat/completions", chat(max_tokens=0), "max_tokens"),
        ("/v1/chat/completions", chat(max_tokens="5"), "max_tokens"),
        ("/v1/responses", {"model": "m", "input": "hi", "top_p": 1.5}, "top_p"),
        ("/v1/messages", chat(temperature=1.5), "temperature"),
        ("/v1/messages", chat(top_k=-1), "top_k"),
    ],
)
def test_an_undecodable_sampling_value_fails_alone_with_a_400_in_its_api_shape(
    server: ServeProcess, path: str, body: dict, param: str
) -> None:
    good = [("/v1/chat/completions", chat(f"Count to {i}.")) for i in range(3)]
    bad, *rest = _together(server, [(path, body), *good])
    assert bad.status_code == 400, bad.text[:300]
    error = bad.json()["error"]
    assert param in error["message"]
    if path == "/v1/messages":
        assert bad.json()["type"] == "error" and error["type"] == "invalid_request_error"
    else:
        assert error["param"] == param
    assert [r.status_code for r in rest] == [200] * 3


# -- 2. what a browser can forge --------------------------------------------------------------------------------


def test_what_a_web_page_can_send_is_refused_and_not_served(server: ServeProcess) -> None:
    before = len(server.served_rows())
    body = json.dumps(chat())
    url = server.root + "/v1/chat/completions"
    simple_post = httpx.post(url, content=body, headers={"Content-Type": "text/plain"}, timeout=60)
    assert simple_post.status_code == 415 and "application/json" in simple_post.json()["error"]["message"]
    untyped = httpx.post(url, content=body, timeout=60)  # fetch() with a Blob body sends no Content-Type
    assert untyped.status_code == 415
    rebinding = httpx.post(url, content=body, headers={**JSON_HEADERS, "Host": "evil.example"}, timeout=60)
    assert rebinding.status_code == 403 and "evil.example" in rebinding.json()["error"]["message"]
    rebinding_port = httpx.post(
        url, content=body, headers={**JSON_HEADERS, "Host": f"evil.example:{server.port}"}, timeout=60
    )
    assert rebinding_port.status_code == 403
    cross_site = httpx.post(
        url, content=body, headers={**JSON_HEADERS, "Origin": "https://evil.example"}, timeout=60
    )
    assert cross_site.status_code == 403
    messages = httpx.post(
        server.root + "/v1/messages", content=body, headers={"Content-Type": "text/plain"}, timeout=60
    )
    assert messages.status_code == 415 and messages.json()["type"] == "error"
    assert len(server.served_rows()) == before
    for host in ("127.0.0.1", f"127.0.0.1:{server.port}", f"localhost:{server.port}"):
        allowed = httpx.post(url, content=body, headers={**JSON_HEADERS, "Host": host}, timeout=300)
        assert allowed.status_code == 200, (host, allowed.text[:300])


# -- 3. big bodies: capped, and handled off the event loop -------------------------------------------------------


def test_a_body_over_the_cap_is_a_413_in_the_api_shape(server: ServeProcess) -> None:
    huge = chat("apple " * (BODY_CAP_MB * 1024 * 1024 // 6 + 1000))
    for path in ("/v1/chat/completions", "/v1/messages"):
        response = post(server, path, huge)
        assert response.status_code == 413, response.text[:300]
        assert "--max-body-mb" in response.json()["error"]["message"]
    assert server.alive()


def test_a_big_body_being_rendered_does_not_stall_other_clients(server: ServeProcess) -> None:
    big = json.dumps(chat("apple pie " * (BODY_CAP_MB * 1024 * 1024 // 10 - 1000))).encode()
    done: list[str] = []
    big_status: dict[str, int] = {}

    def send_big() -> None:
        response = httpx.post(
            server.root + "/v1/chat/completions", content=big, headers=JSON_HEADERS, timeout=600
        )
        big_status["status"] = response.status_code
        done.append("big")

    sender = threading.Thread(target=send_big)
    sender.start()
    time.sleep(0.5)  # the body is sent and being decoded, validated and rendered (seconds of work)
    assert health(server)["status"] == "ok"
    done.append("health")
    sender.join(timeout=600)
    assert big_status.get("status") == 400  # ~400k tokens: over the context length
    assert done == ["health", "big"]


# -- 5. a client that goes away ---------------------------------------------------------------------------------


def test_a_whole_request_whose_client_leaves_stops_decoding_and_is_not_logged(server: ServeProcess) -> None:
    before_rows = len(server.served_rows())
    before = health(server)
    body = json.dumps(chat("Write a long story about a dragon and a knight.", max_tokens=64)).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=300)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    deadline = time.monotonic() + 300
    while health(server)["decoding"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    sock.close()  # gone before the reply
    while health(server)["decoding"] > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    after = health(server)
    assert after["decoding"] == 0
    assert after["finished"].get("cancelled", 0) == before["finished"].get("cancelled", 0) + 1, after
    time.sleep(1)  # a log append would have happened by now
    assert len(server.served_rows()) == before_rows


# -- 6. one line per request -------------------------------------------------------------------------------------


def test_each_request_is_one_log_line_with_its_tokens_and_checkpoint(server: ServeProcess) -> None:
    response = post(server, "/v1/chat/completions", chat("Say ok."))
    assert response.status_code == 200
    usage = response.json()["usage"]
    expected = (
        f"POST /v1/chat/completions 200 · {usage['prompt_tokens']} + {usage['completion_tokens']} tokens"
    )
    deadline = time.monotonic() + 60
    while not any(expected in line for line in server.stderr) and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [line for line in server.stderr if expected in line]
    assert lines and lines[-1].rstrip().endswith("· base"), list(server.stderr)[-10:]


# -- 4. SIGTERM with streams open -------------------------------------------------------------------------------


def _long_stream(process: ServeProcess, i: int, ended: list[str]) -> None:
    """Open a long stream and note how it ended: the server's shutdown error event, or the connection closed."""
    body = chat(f"Write a very long story number {i} about the sea.", max_tokens=4000, stream=True)
    try:
        with httpx.stream("POST", process.url + "/chat/completions", json=body, timeout=300) as response:
            rest = list(response.iter_lines())
        ended.append("error event" if any("shutting down" in line for line in rest) else "closed")
    except httpx.HTTPError:
        ended.append("closed")


def test_sigterm_with_streams_open_exits_within_seconds(hostile_project: Path) -> None:
    process = ServeProcess(hostile_project, "base", "--max-tokens", "4000", "--no-log")
    ended: list[str] = []
    threads = [threading.Thread(target=_long_stream, args=(process, i, ended)) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 300
        while health(process)["decoding"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert health(process)["decoding"] == 3 and not ended  # three streams in flight
        time.sleep(1)
        process.proc.send_signal(signal.SIGTERM)
        # The outcome, not a stopwatch: each stream ends with the shutdown's error event (its 4000-token reply
        # cut short, not awaited), and the process exits cleanly; the bound is only generous.
        process.proc.wait(timeout=240)
        for thread in threads:
            thread.join(timeout=60)
    finally:
        process.stop()
    assert process.proc.returncode == 0
    assert len(ended) == 3 and not any(thread.is_alive() for thread in threads), ended


# -- 7. fuzz: random JSON, headers and sampling values --------------------------------------------------------

FUZZ_EXAMPLES = 300  # a count, not a time: the verdict never depends on how fast the machine is
FUZZ_STATUSES: Counter[int] = Counter()  # what the fuzz got back, checked after it
PATHS = ("/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/messages/count_tokens", "/v1/models")
_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# What the sampling fields get: every JSON type, the numbers at and past their ranges, and what msgspec cannot decode.
_sampling = (
    _json_scalars
    | st.sampled_from([0, 1e-40, -1, 2.0000001, 1e308, 0.0, 1, 2**63, -(2**63)])
    | st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999"]).map(lambda raw: ("raw", raw))
)
_messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "tool", "User", ""]) | st.text(max_size=5)},
        optional={"content": st.text(max_size=40) | _json},
    ),
    max_size=3,
)
_request = st.fixed_dictionaries(
    {"model": st.just("m"), "messages": _messages},
    optional={
        "max_tokens": _sampling,
        "temperature": _sampling,
        "top_p": _sampling,
        "stream": st.booleans() | _json_scalars,
        "input": st.text(max_size=20) | _json,
        "stop": _json,
    },
)
# Printable ASCII without the surrounding spaces (what an HTTP client can put on the wire at all).
_header_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(
    str.strip
)
_headers = st.fixed_dictionaries(
    {},
    optional={
        "Host": st.sampled_from(["127.0.0.1", "localhost", "evil.example", "[::1]", "127.0.0.1:1"])
        | _header_text,
        "Origin": st.sampled_from(["http://localhost", "null", "https://evil.example", "file://"])
        | _header_text,
        "Content-Type": st.sampled_from(["application/json", "text/plain", "application/x+json", ""])
        | _header_text,
        "Authorization": _header_text,
        "Accept": _header_text,
    },
)


def _body_bytes(request: dict) -> bytes:
    """The request as JSON, with any ("raw", token) value written as that bare token (invalid JSON numbers)."""
    raw: dict[str, str] = {}

    def encode(value: object) -> object:
        if isinstance(value, tuple):
            marker = f"@@raw{len(raw)}@@"
            raw[marker] = value[1]
            return marker
        return value

    text = json.dumps({key: encode(value) for key, value in request.items()})
    for marker, token in raw.items():
        text = text.replace(f'"{marker}"', token)
    return text.encode()


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,  # the same cases every run: a failure reproduces
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
@given(
    path=st.sampled_from(PATHS),
    request=_request | _json,
    headers=_headers,
    garbage=st.none() | st.binary(max_size=64),
)
def test_fuzzed_requests_get_no_5xx_and_no_hang(
    server: ServeProcess, path: str, request: object, headers: dict[str, str], garbage: bytes | None
) -> None:
    if isinstance(request, dict) and isinstance(request.get("max_tokens"), int) and request["max_tokens"] > 8:
        request["max_tokens"] = 8  # keep each decode short; the server's own cap is tested above
    body = (
        garbage
        if garbage is not None
        else _body_bytes(request if isinstance(request, dict) else {"x": request})
    )
    method = "GET" if path == "/v1/models" else "POST"
    # A hang fails as httpx's timeout (generous: a loaded machine decodes slowly, a hang never answers).
    response = httpx.request(
        method, server.root + path, content=body, headers={**JSON_HEADERS, **headers}, timeout=300
    )
    response.read()  # a stream is read to its end
    FUZZ_STATUSES[response.status_code] += 1
    assert response.status_code < 500, (path, body[:300], headers, response.status_code, response.text[:300])


def test_the_server_still_answers_after_the_fuzz(server: ServeProcess) -> None:
    # The fuzz reached the decoder, not only the guards: some of its requests were answered, others refused.
    answered = sum(n for status, n in FUZZ_STATUSES.items() if status == 200)
    refused = sum(n for status, n in FUZZ_STATUSES.items() if 400 <= status < 500)
    print(f"fuzz statuses: {dict(FUZZ_STATUSES)}")
    assert answered >= 5 and refused >= 50, FUZZ_STATUSES
    assert health(server)["status"] == "ok"
    assert post(server, "/v1/chat/completions", chat("Say hi.")).status_code == 200
    assert server.alive()
