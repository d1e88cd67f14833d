"""What a web page can forge against a local HTTP server, refused in one place.

A page in the user's browser can reach 127.0.0.1: a "simple" cross-site POST (`text/plain`, form encodings, or a
`Blob` with no type) needs no CORS preflight, and DNS rebinding lets a page on `evil.example` talk to the local port
under its own name. Agents and SDKs send a loopback `Host`, no `Origin` and `Content-Type: application/json`, so the
rule below lets them through and refuses what only a browser sends:

* `Host` must name a loopback address (`localhost`, `127.0.0.0/8`, `[::1]`) or the bound address, with no port or
  the bound port (a rebinding page's requests carry the attacker's name);
* an `Origin` header, when present, must be an http(s) loopback origin (`null`, other schemes and other names are
  refused: a browser sends Origin on every cross-site POST);
* a request with a body (POST, PUT, PATCH) must say `Content-Type: application/json` (a page cannot send that
  cross-site without a preflight this server never answers).

`request_problem` is the rule (also imported by the recording proxy); `guard_middleware` wraps it for aiohttp.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None


def _is_loopback_name(name: str) -> bool:
    if name.lower() in LOOPBACK_NAMES:
        return True
    address = _ip(name)
    return address is not None and address.is_loopback


def _split_host(value: str) -> tuple[str, int | None] | None:
    """`name[:port]` or `[v6][:port]` -> (name, port); None when it is not a well-formed Host value."""
    try:
        parts = urlsplit(f"//{value}")
        port = parts.port
    except ValueError:
        return None
    name = parts.hostname
    if not name or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return name, port


def _host_problem(host: str, bound_port: int, bound_host: str) -> str | None:
    split = _split_host(host.strip())
    if split is None:
        return f"malformed Host header {host[:80]!r}"
    name, port = split
    if port is not None and port != bound_port:
        return f"Host {host[:80]!r} names port {port}, this server listens on {bound_port}"
    if _is_loopback_name(name):
        return None
    bound = bound_host.strip("[]").lower()
    if name.lower() == bound:
        return None
    if bound in WILDCARD_HOSTS and _ip(name) is not None:  # an address literal cannot be rebound to a page
        return None
    return f"Host {host[:80]!r} is not this server's address (a DNS-rebinding page sends its own name)"


def _origin_problem(origin: str) -> str | None:
    try:
        parts = urlsplit(origin.strip())
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        return f"malformed Origin {origin[:80]!r}"
    if parts.scheme in ("http", "https") and parts.hostname and _is_loopback_name(parts.hostname):
        return None
    return f"requests from web pages are refused (Origin {origin[:80]!r} is not loopback)"


def _content_type_problem(content_type: str | None) -> str | None:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return None
    shown = repr(content_type[:80]) if content_type else "none"
    return f"the request body must be JSON (Content-Type: application/json), got {shown}"


def request_problem(
    host: str | None,
    origin: str | None,
    content_type: str | None,
    method: str,
    *,
    bound_port: int,
    bound_host: str = "127.0.0.1",
) -> tuple[int, str] | None:
    """None when the request may be served; else (HTTP status, one-line reason).

    A missing Host is allowed: browsers always send one, so its absence is not something a page can forge.
    """
    if host is not None:
        problem = _host_problem(host, bound_port, bound_host)
        if problem is not None:
            return 403, problem
    if origin is not None:
        problem = _origin_problem(origin)
        if problem is not None:
            return 403, problem
    if method.upper() in BODY_METHODS:
        problem = _content_type_problem(content_type)
        if problem is not None:
            return 415, problem
    return None


Refusal = Callable[[web.Request, int, str], web.StreamResponse]
Handler = Callable[[web.Request], Awaitable[Any]]


def _plain_refusal(request: web.Request, status: int, message: str) -> web.StreamResponse:
    return web.json_response({"error": {"message": message}}, status=status)


def guard_middleware(
    bound_port: int, *, bound_host: str = "127.0.0.1", refuse: Refusal = _plain_refusal
) -> Any:
    """An aiohttp middleware that answers `refuse(request, status, message)` for what `request_problem` refuses."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> Any:
        headers = request.headers
        problem = request_problem(
            headers.get("Host"),
            headers.get("Origin"),
            headers.get("Content-Type"),
            request.method,
            bound_port=bound_port,
            bound_host=bound_host,
        )
        if problem is not None:
            return refuse(request, *problem)
        return await handler(request)

    return guard
