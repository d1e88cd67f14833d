"""The checks every local HTTP server here makes before it reads a request: Host, Origin and content type.

A page in the user's browser can send requests to 127.0.0.1 (DNS rebinding names the attacker's host; a cross-site
form posts with any Origin). So: the Host must name the loopback address the server is bound to, a request that
carries an Origin must come from a loopback origin, and a POST must say it is JSON (a browser cannot send
`application/json` cross-site without a preflight this server never answers).

Minimal version written for the recording proxy (branch h-proxy); the hardening branch (h-servehard) owns the
full rules and replaces this module with the same signature.
"""

from __future__ import annotations

from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def _host_name(value: str) -> tuple[str, int | None] | None:
    """(host, port) of a Host header value, or None when it cannot be read."""
    try:
        parts = urlsplit(f"//{value}")
        return (parts.hostname or "").lower(), parts.port
    except ValueError:
        return None


def _is_loopback(host: str) -> bool:
    return host in LOOPBACK_NAMES or host.startswith("127.")


def request_problem(
    host: str | None, origin: str | None, content_type: str | None, method: str, *, bound_port: int
) -> tuple[int, str] | None:
    """(HTTP status, reason) when the request must be refused, else None."""
    parsed = _host_name(host or "")
    if parsed is None or not _is_loopback(parsed[0]):
        return 403, f"Host {host!r} is not this loopback server"
    if parsed[1] is not None and parsed[1] != bound_port:
        return 403, f"Host {host!r} names another port than this server's ({bound_port})"
    if origin and origin != "null":
        origin_host = _host_name(urlsplit(origin).netloc) if "://" in origin else None
        if origin_host is None or not _is_loopback(origin_host[0]):
            return 403, f"cross-origin request from {origin!r} refused"
    elif origin == "null":
        return 403, "cross-origin request from an opaque origin refused"
    if method.upper() == "POST":
        kind = (content_type or "").split(";", 1)[0].strip().lower()
        if kind != "application/json" and not kind.endswith("+json"):
            return 415, f"content type {content_type or 'none'!r} refused: send application/json"
    return None
