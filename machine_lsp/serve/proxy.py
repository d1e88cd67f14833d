"""`machine capture proxy`: a recording proxy between any coding agent and its real model API (aiohttp).

Every request is forwarded to the upstream unchanged (method, path, query, body bytes and the headers that matter,
keys included: they are passed on, never stored or printed), and the upstream's answer is streamed back as it
arrives, server-sent events chunk by chunk. The model exchanges (`POST .../chat/completions`, `.../responses`,
`.../messages`) are recorded afterwards, off the event loop, into `.machine/captured/` (`captured_log`). An
upstream error goes back to the agent as the upstream sent it (already in the API's own shape); an upstream that
cannot be reached is a 502 in the API's error shape. Host, Origin and content type are checked (`http_guard`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import msgspec
from aiohttp import web

from machine_lsp.serve import protocol as P
from machine_lsp.serve import shapes as S
from machine_lsp.serve.captured_log import (
    KEPT_HEADERS,
    CapturedLog,
    CapturedRow,
    conversation,
    decoded_body,
    raw_request,
)
from machine_lsp.serve.http_guard import request_problem
from machine_lsp.serve.served_log import now_iso
from machine_lsp.serve.sse_reassembly import SseParser, reassemble

MAX_BODY = 64 * 1024 * 1024
# Per-hop headers (RFC 9110 7.6.1) and those the proxy itself sets; everything else is passed on as it came.
_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
    }
    | {"upgrade", "host", "content-length", "accept-encoding", "content-encoding"}
)

# The request body goes on as it came, so its Content-Encoding goes with it; the answer comes back unpacked.
_REQUEST_DROPPED = _HOP_HEADERS - {"content-encoding"}

log = logging.getLogger(__name__)


def api_of(method: str, path: str) -> P.Api | None:
    """Which model API a request is, by its path (None: not a model exchange; forwarded, not recorded)."""
    if method != "POST":
        return None
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat.completions"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "messages"
    return None


def shown_url(url: str) -> str:
    """A URL fit to print or store: no user:password, no query (either can hold a key)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass
class ProxySettings:
    upstream: str  # base URL the request path is appended to
    log: CapturedLog | None
    bound_port: int = 0
    max_body: int = MAX_BODY
    on_exchange: Callable[[CapturedRow, int], None] | None = None  # after each recorded line


@dataclass
class _Exchange:
    """One model exchange on its way through, collected for the log."""

    api: P.Api
    method: str
    path: str
    body: bytes
    headers: dict[str, str]
    encoding: str = ""  # the request's Content-Encoding
    started: str = field(default_factory=now_iso)
    status: int = 0
    stream: bool = False
    answer: bytearray = field(default_factory=bytearray)
    incomplete: bool = False
    problem: str | None = None


class Proxy:
    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.upstream = settings.upstream.rstrip("/")
        self.client: aiohttp.ClientSession | None = None
        # One worker: lines are written in the order the answers ended, and the event loop never waits on disk.
        self.recorder = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="capture")

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body, middlewares=[self._guard])
        app.router.add_route("*", "/{tail:.*}", self.forward)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=None)
        self.client = aiohttp.ClientSession(timeout=timeout, auto_decompress=True, trust_env=False)

    async def _stop(self, app: web.Application) -> None:
        if self.client is not None:
            await self.client.close()
        await asyncio.get_running_loop().run_in_executor(None, self.recorder.shutdown, True)

    # -- errors in the API's own shape ----------------------------------------------------------------------

    @staticmethod
    def error(api: P.Api | None, status: int, message: str, kind: str) -> web.Response:
        problem = P.RequestError(message, status=status)
        body = S.anthropic_error(problem, kind) if api == "messages" else S.openai_error(problem, kind)
        return web.Response(body=body, status=status, content_type="application/json")

    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        refused = request_problem(
            request.headers.get("Host"),
            request.headers.get("Origin"),
            request.headers.get("Content-Type"),
            request.method,
            bound_port=self.settings.bound_port,
        )
        if refused is not None:
            kind = "invalid_request_error" if refused[0] == 415 else "permission_error"
            return self.error(api_of(request.method, request.path), refused[0], refused[1], kind)
        return await handler(request)

    # -- forwarding -----------------------------------------------------------------------------------------

    async def forward(self, request: web.Request) -> web.StreamResponse:
        api = api_of(request.method, request.path)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            limit = self.settings.max_body
            return self.error(
                api, 413, f"request body over the proxy's limit of {limit} bytes", "request_too_large"
            )
        exchange = None
        if api is not None and self.settings.log is not None:
            kept = {name: request.headers[name] for name in KEPT_HEADERS if name in request.headers}
            encoding = request.headers.get("Content-Encoding", "")
            exchange = _Exchange(api, request.method, request.path, body, kept, encoding)
        try:
            return await self._relay(request, api, body, exchange)
        finally:
            if exchange is not None:
                self.recorder.submit(self._record, exchange)

    async def _relay(
        self, request: web.Request, api: P.Api | None, body: bytes, exchange: _Exchange | None
    ) -> web.StreamResponse:
        assert self.client is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _REQUEST_DROPPED}
        url = self.upstream + request.rel_url.raw_path_qs
        try:
            upstream = await self.client.request(
                request.method, url, data=body, headers=headers, allow_redirects=False
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            reason = f"upstream {shown_url(self.upstream)} cannot be reached: {type(exc).__name__}: {exc}"
            if exchange is not None:
                exchange.status, exchange.problem = 502, reason
            return self.error(api, 502, reason.replace(url, shown_url(url)), "api_error")
        async with upstream:
            return await self._stream_back(request, upstream, exchange)

    async def _stream_back(
        self, request: web.Request, upstream: aiohttp.ClientResponse, exchange: _Exchange | None
    ) -> web.StreamResponse:
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        is_sse = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
        if exchange is not None:
            exchange.status, exchange.stream = upstream.status, is_sse
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
                if exchange is not None:
                    _collect(exchange, chunk, self.settings.max_body)
            await response.write_eof()
        except (TimeoutError, aiohttp.ClientError) as exc:  # the upstream died mid-answer
            if exchange is not None:
                exchange.incomplete, exchange.problem = True, f"the upstream's answer was cut off: {exc}"
            if request.transport is not None:
                request.transport.close()  # the agent must see the answer end early, not a clean end
        except ConnectionResetError:  # the agent went away: record what came
            if exchange is not None:
                exchange.incomplete, exchange.problem = True, "the agent closed the connection mid-answer"
        return response

    # -- recording ------------------------------------------------------------------------------------------

    def _record(self, exchange: _Exchange) -> None:
        log_file = self.settings.log
        assert log_file is not None
        try:
            row = _row(exchange, log_file.session)
        except Exception as exc:  # noqa: BLE001 - an exchange this cannot read is still kept, as it came
            exchange.problem = f"the exchange could not be read: {type(exc).__name__}: {exc}"
            exchange.stream, exchange.answer = False, bytearray()
            row = _row(exchange, log_file.session)
        try:
            line = log_file.append(row)
        except OSError as exc:
            log.error("machine capture proxy: cannot write %s: %s", log_file.path, exc)
            return
        if self.settings.on_exchange is not None:
            self.settings.on_exchange(row, line)


def _collect(exchange: _Exchange, chunk: bytes, limit: int) -> None:
    """Keep a copy of the answer for the log; events are parsed later, on the recorder's thread."""
    if len(exchange.answer) + len(chunk) <= limit:
        exchange.answer += chunk
    else:
        exchange.incomplete, exchange.problem = True, f"the answer is over {limit} bytes: not kept"


def _row(exchange: _Exchange, session: str) -> CapturedRow:
    try:
        raw, request, problem = raw_request(decoded_body(exchange.body, exchange.encoding))
    except (OSError, EOFError, zlib.error) as exc:
        raw, request, problem = (
            None,
            None,
            f"the request body cannot be unpacked ({exchange.encoding}): {exc}",
        )
    response: Any = None
    if exchange.stream:
        response = reassemble(exchange.api, SseParser().feed(bytes(exchange.answer) + b"\n\n"))
    elif exchange.answer:
        try:
            response = msgspec.json.decode(exchange.answer)
        except (msgspec.DecodeError, RecursionError):
            response = exchange.answer.decode("utf-8", "replace")
    messages = tools = None
    if problem is None and exchange.problem is None and 200 <= exchange.status < 300:
        messages, tools, problem = conversation(exchange.api, request, response)
    elif exchange.problem is None and problem is None:
        problem = f"the upstream answered {exchange.status}"
    model = request.get("model") if isinstance(request, dict) else None
    return CapturedRow(
        capture="proxy",
        session=session,
        time=exchange.started,
        done=now_iso(),
        api=exchange.api,
        method=exchange.method,
        path=exchange.path,
        status=exchange.status,
        stream=exchange.stream,
        model=model if isinstance(model, str) else None,
        incomplete=exchange.incomplete,
        request=raw,
        response=response,
        messages=messages,
        tools=tools,
        problem=exchange.problem or problem,
        headers=exchange.headers,
    )


async def run(
    sock: Any, settings: ProxySettings, *, stop: asyncio.Event, on_ready: Callable[[str], None] | None = None
) -> None:
    """Serve on the bound socket until `stop` is set; every ended exchange is in the log when this returns."""
    proxy = Proxy(settings)
    runner = web.AppRunner(proxy.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    host, port = sock.getsockname()[:2]
    if on_ready is not None:
        on_ready(f"http://{host}:{port}")
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
