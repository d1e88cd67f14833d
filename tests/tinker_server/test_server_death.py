"""A Tinker call in flight when its server dies: `wait_future` ends the wait within seconds, naming the server.

The SDK retries a refused connection for minutes; these tests use real sockets (a server that stops accepting,
one that accepts but never answers) and the SDK future's own interface (`result(timeout=)`). The real server dying
mid-run is in test_server_e2e.py.
"""

from __future__ import annotations

import concurrent.futures
import socket
import time

import pytest

from machine_lsp.engines.tinker import tinker_service
from machine_lsp.engines.tinker.tinker_engine import TinkerUnavailable, wait_future
from machine_lsp.tinker_server import process


@pytest.fixture(autouse=True)
def fast_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tinker_service, "LIVENESS_CHECK_S", 0.2)  # wait_future reads it there


def test_a_finished_call_returns_its_result() -> None:
    future: concurrent.futures.Future[str] = concurrent.futures.Future()
    future.set_result("ok")
    assert wait_future(future, 5.0, "optim_step", "http://127.0.0.1:9") == "ok"


def test_a_server_that_stops_accepting_ends_the_wait_naming_it() -> None:
    listener = socket.socket()
    listener.bind((process.HOST, 0))
    listener.listen()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    future: concurrent.futures.Future[str] = concurrent.futures.Future()  # the call never completes
    started = time.monotonic()
    listener.close()  # the server is gone
    with pytest.raises(TinkerUnavailable) as info:
        wait_future(future, 600.0, "forward_backward", url)
    assert time.monotonic() - started < 5
    assert info.value.reason == "refused"
    message = str(info.value)
    assert message.startswith(f"lost the Tinker server at {url} during forward_backward: connection refused")
    assert "\n" not in message


def test_a_busy_server_that_still_accepts_is_waited_for_until_the_bound() -> None:
    with socket.socket() as listener:  # accepts connections (the kernel's backlog) but never answers
        listener.bind((process.HOST, 0))
        listener.listen(64)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        started = time.monotonic()
        with pytest.raises(TinkerUnavailable, match="did not finish forward_backward within 2 s") as info:
            wait_future(future, 2.0, "forward_backward", url)
    assert info.value.reason == "timeout"
    assert 1.8 < time.monotonic() - started < 4
