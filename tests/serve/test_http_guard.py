"""The rule for what a browser can forge against a local server (`serve.http_guard.request_problem`)."""

from __future__ import annotations

import pytest

from machine_lsp.serve.http_guard import request_problem

PORT = 8765
JSON = "application/json"


@pytest.mark.parametrize(
    "host",
    [
        None,
        "127.0.0.1",
        f"127.0.0.1:{PORT}",
        "localhost",
        f"LOCALHOST:{PORT}",
        "[::1]",
        f"[::1]:{PORT}",
        "127.0.0.2",
    ],
)
def test_agents_loopback_host_passes(host: str | None) -> None:
    assert request_problem(host, None, JSON, "POST", bound_port=PORT) is None
    assert request_problem(host, None, None, "GET", bound_port=PORT) is None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        f"evil.example:{PORT}",
        "127.0.0.1.evil.example",
        "127.0.0.1:1",
        "localhost:99999",
        "a@b",
        "x/y",
    ],
)
def test_rebinding_or_foreign_host_is_403(host: str) -> None:
    problem = request_problem(host, None, JSON, "POST", bound_port=PORT)
    assert problem is not None and problem[0] == 403 and "\n" not in problem[1]


def test_bound_address_is_accepted() -> None:
    assert (
        request_problem(f"192.168.1.5:{PORT}", None, JSON, "POST", bound_port=PORT, bound_host="192.168.1.5")
        is None
    )
    assert request_problem("10.0.0.9", None, JSON, "POST", bound_port=PORT, bound_host="0.0.0.0") is None
    assert (
        request_problem("evil.example", None, JSON, "POST", bound_port=PORT, bound_host="0.0.0.0") is not None
    )


@pytest.mark.parametrize("origin", ["http://127.0.0.1:3000", "http://localhost", "https://[::1]:9"])
def test_loopback_origin_passes(origin: str) -> None:
    assert request_problem("127.0.0.1", origin, JSON, "POST", bound_port=PORT) is None


@pytest.mark.parametrize(
    "origin",
    ["https://evil.example", "null", "chrome-extension://abc", "http://localhost.evil.example", "file://"],
)
def test_foreign_origin_is_403(origin: str) -> None:
    problem = request_problem("127.0.0.1", origin, JSON, "POST", bound_port=PORT)
    assert problem is not None and problem[0] == 403


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ],
)
def test_simple_cross_site_body_is_415(content_type: str | None) -> None:
    problem = request_problem("127.0.0.1", None, content_type, "POST", bound_port=PORT)
    assert problem is not None and problem[0] == 415


def test_json_with_charset_passes() -> None:
    assert (
        request_problem("127.0.0.1", None, "Application/JSON; charset=utf-8", "POST", bound_port=PORT) is None
    )
