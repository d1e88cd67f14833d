"""`machine capture proxy --upstream URL [--port P]`: record what any agent sends its model, and what comes back.

Point the agent's base URL at the proxy (it listens on 127.0.0.1 only); each request goes on to the upstream
unchanged, keys included, and each model exchange is appended to `.machine/captured/<start>-<id>.jsonl`, a session
log `machine sessions`, `--from last`, `machine good/bad --from FILE:LINE` and the editor read like any other. Keys and
`authorization` / `x-api-key` headers are passed on, never stored or printed.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rich.console import Console
from rich.markup import escape

from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.exit_codes import EXIT_OK, EXIT_STORE, EXIT_USAGE
from machine_lsp.core.safe_files import NotRegularFile
from machine_lsp.core.store import find_machine_dir

if TYPE_CHECKING:
    from machine_lsp.serve.proxy import ProxySettings

DEFAULT_PORT = 8788

EPILOG = """\
Base URLs to give an agent (P: the proxy's port; the path after it is the one the agent would use after the
upstream's base URL):
  OpenAI-compatible (Aider, Continue, Cline, Goose, Crush, Pi, OpenCode, Codex):  http://127.0.0.1:P/v1
  Anthropic (Claude Code: ANTHROPIC_BASE_URL):                                    http://127.0.0.1:P
Examples:
  machine capture proxy --upstream https://api.openai.com
  machine capture proxy --upstream https://api.anthropic.com --port 8789
  machine capture proxy --upstream https://openrouter.ai/api
"""


def _err() -> Console:
    return Console(stderr=True, soft_wrap=True)


def register(verbs: VerbParsers) -> None:
    proxy = verbs.parser(
        "capture proxy",
        _proxy,
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    proxy.add_argument(
        "--upstream", required=True, metavar="URL", help="the real API's base URL (http/https)"
    )
    proxy.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="P", help="0: any free port")


def _upstream_problem(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The URL itself is not echoed: it may carry a key.
        return f"--upstream must be an http(s) URL such as https://api.openai.com (scheme {parts.scheme or 'none'!r})"
    if parts.query or parts.fragment:
        return "--upstream takes a base URL without a query or fragment"
    return None


def _proxy(args: argparse.Namespace) -> int:
    from machine_lsp.serve import proxy, server
    from machine_lsp.serve.captured_log import CapturedLog
    from machine_lsp.serve.ports import HOST, bind_error

    err = _err()
    problem = _upstream_problem(args.upstream) or (
        None if 0 <= args.port < 65536 else f"--port must be 0-65535, got {args.port}"
    )
    if problem is not None:
        err.print(f"machine capture proxy: {escape(problem)}")
        return EXIT_USAGE
    log = CapturedLog(find_machine_dir(), datetime.now(UTC))
    try:
        log.open()
    except (NotRegularFile, OSError) as exc:
        err.print(f"machine capture proxy: cannot write the captured log: {escape(str(exc))}")
        return EXIT_STORE
    try:
        sock = server.bind(HOST, args.port)
    except OSError as exc:
        log.close()
        err.print(f"machine capture proxy: {escape(bind_error(exc, HOST, args.port))} (--port)")
        return EXIT_USAGE
    settings = proxy.ProxySettings(
        upstream=args.upstream, log=log, bound_port=sock.getsockname()[1], on_exchange=_printed
    )

    def ready(url: str) -> None:
        upstream = escape(proxy.shown_url(args.upstream))
        print(f"recording proxy at {url} -> {upstream}; exchanges -> {log.path}", flush=True)

    try:
        asyncio.run(_until_signalled(sock, settings, ready))
    finally:
        log.close()
    err.print("machine capture proxy: stopped")
    return EXIT_OK


def _printed(row: Any, line: int) -> None:
    """One plain line per exchange (rich's rendering would hold the GIL the proxy's event loop needs)."""
    note = f" ({row.problem})" if row.problem else ""
    sys.stderr.write(f"{row.api} {row.status}{' stream' if row.stream else ''} -> line {line}{note}\n")


async def _until_signalled(
    sock: socket.socket, settings: ProxySettings, ready: Callable[[str], None]
) -> None:
    from machine_lsp.serve import proxy

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await proxy.run(sock, settings, stop=stop, on_ready=ready)
