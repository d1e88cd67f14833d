"""The HTTP face of `machine serve` (aiohttp): OpenAI Chat Completions and Responses, Anthropic Messages, models.

Each request is validated (`protocol`), rendered with the model's cookbook renderer, checked against the context
length, decoded by the shared `BatchGenerator` and answered in the API's own shape (`shapes`), streamed
(`streaming`) or whole. An answered exchange is appended to `.machine/served/<date>.jsonl`. Errors are answered in
the API's own error shape: 400 for bad input (malformed JSON, a request the SDK types reject, a prompt over the
context length, a sampling value out of its range), 401 for a missing or wrong key when the server was started
with one, 403/415 for what a web page can forge (`http_guard`), 413 for a body over `max_body_mb`, 503 while
shutting down. Decoding JSON, validating and rendering run in worker threads (a 10 MB body never stalls the event
loop); the shutdown ends every in-flight generation at its next step; a client that goes away cancels its handler,
so its row leaves the batch and nothing is logged. Each request is one log line (`machine.serve`) naming the
checkpoint that answered it; `swap` replaces that checkpoint between requests when the server follows a name.
"""

from __future__ import annotations

import asyncio
import copy
import ctypes
import ctypes.util
import hmac
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from machine_lsp.core.schema import Message
from machine_lsp.engines import render
from machine_lsp.serve import llama_backend, swap
from machine_lsp.serve import protocol as P
from machine_lsp.serve import shapes as S
from machine_lsp.serve.exchange import USAGE_KEY, Exchange, error_response
from machine_lsp.serve.generation import BatchGenerator, Generation, Loaded
from machine_lsp.serve.http_guard import guard_middleware
from machine_lsp.serve.ports import bind  # noqa: F401 - `server.bind` is what the CLI and jobs call
from machine_lsp.serve.served_log import ServedLog
from machine_lsp.serve.streaming import stream

DEFAULT_MAX_TOKENS = 1024
DEFAULT_MAX_BODY_MB = 8.0
SHUTDOWN_GRACE_S = 2.0  # handlers still running this long after the generations ended are cancelled
BIG_BODY = 1 << 20  # after a body this large, free memory back to the system (glibc keeps it otherwise)
LOG = logging.getLogger("machine.serve")
ANSWERED_BY = web.RequestKey("machine.checkpoint", str)  # the checkpoint a request was submitted to


@dataclass
class ServeSettings:
    model_name: str
    checkpoint: str
    api_key: str | None = None
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    default_temperature: float = 0.0
    max_body_mb: float = DEFAULT_MAX_BODY_MB
    log: ServedLog | None = None

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)


class Server:
    def __init__(self, loaded: Loaded, generator: BatchGenerator, settings: ServeSettings) -> None:
        # The current checkpoint; `swap.install` replaces it between requests (renderer and tokenizer stay: a swap
        # keeps the base model).
        self.slot = swap.Slot(loaded, generator, settings.checkpoint)
        self.state = swap.SwapState()
        self.settings = settings
        self.renderer = loaded.renderer
        self.tokenizer = loaded.tokenizer
        self.end_token = min(loaded.stop_ids) if loaded.stop_ids else None
        self.served = 0
        self.closing = False
        # One prepare thread with its own copy of the renderer: a fast tokenizer used by two threads at once fails
        # ("Already borrowed"); the event loop decodes replies with `self.renderer`, the prepare thread renders
        # prompts with `prepare_renderer`, one at a time (several copies in several threads still collided).
        self._prepare_pool = ThreadPoolExecutor(1, thread_name_prefix="machine-serve-prepare")
        self.prepare_renderer = copy.deepcopy(self.renderer)

    async def warm(self) -> None:
        """Ready means fast: the request validators are built (in the prepare thread that uses them) before the
        port answers, not on an agent's first request."""
        await asyncio.get_running_loop().run_in_executor(self._prepare_pool, P.warm_validators)

    @property
    def loaded(self) -> Loaded:
        return self.slot.loaded

    @property
    def generator(self) -> BatchGenerator:
        return self.slot.generator

    # -- app ------------------------------------------------------------------------------------------------

    def app(self, bound_port: int, bound_host: str = "127.0.0.1") -> web.Application:
        guard = guard_middleware(bound_port, bound_host=bound_host, refuse=self._refusal)
        app = web.Application(
            client_max_size=self.settings.max_body_bytes, middlewares=[self._log_line, guard, self._auth]
        )
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self._route("chat.completions"))
        app.router.add_post("/v1/responses", self._route("responses"))
        app.router.add_post("/v1/messages", self._route("messages"))
        app.router.add_post("/v1/messages/count_tokens", self.count_tokens)
        return app

    @staticmethod
    def _api_of(path: str) -> P.Api:
        if path.startswith("/v1/messages"):
            return "messages"
        if path.startswith("/v1/responses"):
            return "responses"
        return "chat.completions"

    def _refusal(self, request: web.Request, status: int, message: str) -> web.Response:
        kind = "permission_error" if status == 403 else "invalid_request_error"
        return error_response(self._api_of(request.path), P.RequestError(message, status=status), kind)

    @web.middleware
    async def _log_line(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        """One line per request: method, path, status, tokens, time, the checkpoint that answered."""
        started = time.perf_counter()
        status: int | str = "-"
        try:
            response = await handler(request)
            status = response.status
            return response
        except asyncio.CancelledError:
            status = "client gone"
            raise
        finally:
            prompt, completion = request.get(USAGE_KEY, (None, None))
            tokens = f"{prompt} + {completion} tokens" if prompt is not None else "no tokens"
            elapsed = time.perf_counter() - started
            LOG.info(
                "%s %s %s · %s · %.2f s · %s",
                request.method,
                request.path,
                status,
                tokens,
                elapsed,
                request.get(ANSWERED_BY, self.slot.checkpoint),
            )

    @web.middleware
    async def _auth(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        key = self.settings.api_key
        if key and request.path != "/health":
            given = request.headers.get("x-api-key") or ""
            bearer = request.headers.get("Authorization", "")
            if bearer.lower().startswith("bearer "):
                given = given or bearer[7:].strip()
            if not hmac.compare_digest(given.encode(), key.encode()):
                error = P.RequestError("missing or wrong API key", status=401)
                return error_response(self._api_of(request.path), error, "authentication_error")
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status >= 400:
                error = P.RequestError(f"{request.method} {request.path}: {exc.reason}", status=exc.status)
                kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
                return error_response(self._api_of(request.path), error, kind)
            raise
        except Exception as exc:  # a bug answers 500 in the API's shape; the server keeps serving
            LOG.exception("request to %s failed", request.path)
            error = P.RequestError(f"internal error: {type(exc).__name__}: {exc}", status=500)
            return error_response(self._api_of(request.path), error, "api_error")

    async def health(self, request: web.Request) -> web.Response:
        state, slots = self.state, [self.slot, *self.state.draining]
        return web.json_response(
            {
                "status": "closing" if self.closing else "ok",
                "model": self.settings.model_name,
                "checkpoint": self.slot.checkpoint,
                "loading": state.loading,
                "swaps": state.swaps,
                "swap_error": state.last_error,
                "decoding": sum(slot.generator.in_flight for slot in slots),
                "finished": dict(sum((s.generator.finished for s in slots), Counter(state.finished_before))),
            }
        )

    async def models(self, request: web.Request) -> web.Response:
        from openai.types import Model

        model = Model(id=self.settings.model_name, created=0, object="model", owned_by="machine")
        # The served checkpoint rides along as an extra field (the SDKs' Model keeps unknown fields).
        body = b'{"object":"list","data":[' + S.dump(model)[:-1] + b',"checkpoint":'
        body += msgspec.json.encode(self.slot.checkpoint) + b"}]}"
        return web.Response(body=body, content_type="application/json")

    async def count_tokens(self, request: web.Request) -> web.Response:
        from anthropic.types import MessageTokensCount

        def prepare(raw: bytes) -> list[int]:
            body = self._decode(raw)
            conv = P.from_messages({"max_tokens": 1, **body} if isinstance(body, dict) else body)
            return self._prompt(conv)[1]

        try:
            tokens = await self._in_worker(prepare, await self._read(request))
        except P.RequestError as exc:
            return error_response("messages", exc)
        return web.Response(
            body=S.dump(MessageTokensCount(input_tokens=len(tokens))), content_type="application/json"
        )

    # -- one request ----------------------------------------------------------------------------------------

    async def _read(self, request: web.Request) -> bytes:
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            limit = self.settings.max_body_mb
            raise P.RequestError(
                f"the request body is over this server's {limit:g} MB limit (machine serve --max-body-mb)",
                status=413,
            ) from None

    @staticmethod
    def _decode(raw: bytes) -> Any:
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise P.RequestError(f"malformed JSON in the request body: {exc}") from None

    async def _in_worker(self, work: Callable[[bytes], Any], raw: bytes) -> Any:
        """Run `work(raw)` (decode, validate, render: CPU-bound on big bodies) off the event loop."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._prepare_pool, work, raw)
        finally:
            if len(raw) >= BIG_BODY:
                del raw
                await asyncio.get_running_loop().run_in_executor(self._prepare_pool, release_memory)

    def _prepared(self, api: P.Api) -> Callable[[bytes], tuple[P.Conversation, list[Message], list[int]]]:
        def prepare(raw: bytes) -> tuple[P.Conversation, list[Message], list[int]]:
            conv = P.PARSERS[api](self._decode(raw))
            messages, tokens = self._prompt(conv)
            self._check_context(api, len(tokens))
            return conv, messages, tokens

        return prepare

    def _prompt(self, conv: P.Conversation) -> tuple[list[Message], list[int]]:
        """Render (in the prepare thread)."""
        renderer = self.prepare_renderer
        messages = P.with_tools(conv.messages, conv.tools, renderer)
        if not messages:
            raise P.RequestError("the request has no messages", param="messages")
        try:
            tokens = render.prompt_tokens(messages, renderer)
        except Exception as exc:  # the renderer refuses a conversation it cannot render
            raise P.RequestError(f"cannot render the conversation: {exc}") from None
        return messages, tokens

    def _check_context(self, api: P.Api, prompt_tokens: int) -> None:
        limit = self.loaded.context_length
        if prompt_tokens < limit:
            return
        if api == "messages":
            message = f"prompt is too long: {prompt_tokens} tokens > {limit - 1} maximum"
        else:
            message = (
                f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
                f"{prompt_tokens} tokens. Please reduce the length of the messages."
            )
        raise P.RequestError(message, code="context_length_exceeded", param="messages")

    def _route(self, api: P.Api) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                conv, messages, tokens = await self._in_worker(self._prepared(api), await self._read(request))
            except P.RequestError as exc:
                return error_response(api, exc)
            room = self.loaded.context_length - len(tokens)
            cap = self.settings.default_max_tokens  # --max-tokens caps every reply, asked-for or not
            generation = Generation(
                prompt=tokens,
                max_tokens=max(1, min(conv.max_tokens or cap, cap, room)),
                temperature=float(
                    conv.temperature if conv.temperature is not None else self.settings.default_temperature
                ),
                top_p=float(conv.top_p if conv.top_p is not None else 1.0),
            )
            slot = self.slot  # taken and submitted to with no await between: a swap cannot split the two
            try:
                slot.generator.submit(generation)
            except RuntimeError:
                return error_response(
                    api, P.RequestError("the server is shutting down", status=503), "api_error"
                )
            swap.hold(slot)
            request[ANSWERED_BY] = slot.checkpoint
            exchange = Exchange(self, conv, messages, generation, slot.checkpoint)
            try:
                if conv.stream:
                    return await stream(exchange, request)
                return await exchange.whole(request)
            finally:
                if generation.finish_reason is None:
                    generation.cancel()
                slot.holders -= 1
                swap.release(self, slot)

        return handle


# ---------------------------------------------------------------------------------------------------------------
# Running


async def run(
    sock: Any,  # a bound, listening socket (`bind`)
    loaded: Loaded,
    settings: ServeSettings,
    *,
    max_batch: int = 32,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    follow: swap.Follower | None = None,
    load: swap.Loader | None = None,
    on_swap: Callable[[str | None, str], None] | None = None,
) -> None:
    """Serve on `sock` until `stop` is set (or the task is cancelled). With `follow` (and the `load` it swaps in
    with), the checkpoint its name means is followed and swapped in between requests (`swap`)."""
    stop = stop or asyncio.Event()
    generator = llama_backend.generator_for(loaded, max_batch=max_batch)  # torch waves or llama.cpp contexts
    generator.start()
    server = Server(loaded, generator, settings)
    await server.warm()
    host, port = sock.getsockname()[:2]
    runner = web.AppRunner(
        server.app(port, host),
        access_log=None,
        handle_signals=False,
        handler_cancellation=True,  # a client that goes away cancels its handler: its generation leaves the batch
        shutdown_timeout=SHUTDOWN_GRACE_S,
    )
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    if on_ready is not None:
        on_ready(f"http://{host}:{port}")
    following = (
        follow
        and load
        and asyncio.ensure_future(
            swap.follow(server, follow, load, max_batch=max_batch, stop=stop, on_swap=on_swap)
        )
    )
    try:
        await stop.wait()
    finally:
        server.closing = True
        if following:
            following.cancel()
        # End every generation first (streams get their error event, whole requests a 503), then the handlers.
        await swap.close_all(server, SHUTDOWN_GRACE_S)
        await runner.cleanup()
        server._prepare_pool.shutdown(wait=False, cancel_futures=True)


def release_memory() -> None:
    """Hand freed heap back to the system after a big body (glibc keeps it in its arenas otherwise)."""
    import gc

    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        libc = ctypes.CDLL(name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
