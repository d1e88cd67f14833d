"""Can a server listen on this port? One wording for `machine serve`, the `serve` job and the language server.

Light on purpose (stdlib only): the language server imports it to refuse a taken port before starting a job.
"""

from __future__ import annotations

import errno
import socket

HOST = "127.0.0.1"


def bind_error(exc: OSError, host: str, port: int) -> str:
    """The one-line reason `port` cannot be listened on."""
    reason = (
        "is in use (another server?)"
        if exc.errno in (errno.EADDRINUSE, 48)
        else f"cannot be opened: {exc.strerror}"
    )
    return f"port {port} on {host} {reason}; choose another port"


def port_problem(port: int, host: str = HOST) -> str | None:
    """Why `port` cannot be served on, or None (a quick bind and close: the server binds it again for real)."""
    if not 0 <= port < 65536:
        return f"port must be 0-65535 (0: any free port), got {port}"
    if port == 0:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return bind_error(exc, host, port)
    return None


def bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket before the model loads, so a taken port fails at once (OSError)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
