"""Every place machine-lsp depends on pygls 2.1.1 internals, in one module. Nothing else touches a private name.

Each override says what it mends and when it can go. When pygls is upgraded, re-read this file first:
`tests/lsp/test_protocol.py` (raw JSON-RPC over the real server's stdio) fails if one of these stops working.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import RPCRequest
from pygls.protocol.language_server import lsp_method
from pygls.workspace import TextDocument, Workspace

from machine_lsp.lsp.documents import LineDocument

logger = logging.getLogger(__name__)

#: The `workDoneToken` of the `workspace/executeCommand` request being handled is passed to the command here.
CommandRunner = Callable[[types.ExecuteCommandParams], Awaitable[Any]]


class MachineProtocol(LanguageServerProtocol):
    """pygls's protocol with four mended behaviours (see each method)."""

    #: Set by the server: runs a `workspace/executeCommand` (looks the command up, passes the token).
    command_runner: CommandRunner | None = None

    def structure_message(self, data: dict[str, Any]) -> Any:
        """pygls 2.1.1 drops a request whose params do not match the method's type without replying, so the client
        waits forever. Answer it with InvalidParams. Drop when pygls replies itself (it does not in 2.1.1)."""
        try:
            return super().structure_message(data)
        except JsonRpcException:
            if isinstance(data, dict) and "id" in data and "method" in data:
                error = JsonRpcInvalidParams(message=f"invalid params for {data['method']}")
                self._send_response(data["id"], None, error.to_response_error())
            raise

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    async def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams) -> Any:
        """pygls 2.1.1 runs executeCommand handlers as a sub-task of a generator, so `$/cancelRequest` never reaches
        them and the handler never sees the work-done token. As an `async def` the command *is* the request's task:
        cancelling the request cancels the command (and the job it awaits). Drop when pygls runs commands as the
        request's own task and passes `work_done_token`."""
        if self.command_runner is None:
            raise JsonRpcInvalidParams(message=f"unknown command {params.command!r}")
        return await self.command_runner(params)

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):  # type: ignore[no-untyped-def]
        """pygls 2.1.1 stores a future in `_request_futures` for every notification handled by a generator or a
        coroutine (didOpen, didChange, didClose...) and never removes it: one entry per edit, forever. Remove each
        entry when its future is done. Requests are unchanged (pygls pops them when it replies). Drop when pygls
        stops keeping notification futures."""
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        future = self._request_futures.get(msg_id)
        if future is not None:
            futures = self._request_futures

            def forget(done: Any) -> None:
                if futures.get(msg_id) is done:
                    del futures[msg_id]

            future.add_done_callback(forget)

    def handle_message(self, message: Any) -> None:
        """pygls 2.1.1 silently drops every request after `shutdown`; the LSP spec says to answer InvalidRequest.
        Drop when pygls replies itself."""
        if self._shutdown and isinstance(message, RPCRequest) and message.method != types.EXIT:
            error = JsonRpcInvalidRequest(message=f"{message.method}: the server is shutting down")
            self._send_response(message.id, None, error.to_response_error())
            return
        super().handle_message(message)

    def reply_error(self, msg_id: Any, error: JsonRpcException) -> None:
        """Send an error response (the frame reader uses it for a request it could not read)."""
        self._send_response(msg_id, None, error.to_response_error())

    @property
    def shut_down(self) -> bool:
        return self._shutdown

    def current_command_handler(self, command: str) -> Callable[..., Any] | None:
        """The handler registered with `@server.command(command)` (pygls keeps them in `fm.commands`)."""
        return self.fm.commands.get(command)


class LineWorkspace(Workspace):
    """A pygls Workspace that makes line-indexed documents (`LineDocument`). pygls 2.1.1 has no public hook for the
    document class, so this overrides `_create_text_document`. Drop when pygls takes a document factory."""

    def __init__(self, base: Workspace, sync_kind: types.TextDocumentSyncKind) -> None:
        super().__init__(base.root_uri, sync_kind, list(base.folders.values()), base.position_encoding)
        self.sync_kind = sync_kind

    def _create_text_document(
        self,
        doc_uri: str,
        source: str | None = None,
        version: int | None = None,
        language_id: str | None = None,
    ) -> TextDocument:
        return LineDocument(
            doc_uri,
            source=source,
            version=version,
            language_id=language_id,
            sync_kind=self.sync_kind,
            position_codec=self.position_codec,
        )


def install_line_workspace(server: LanguageServer, sync_kind: types.TextDocumentSyncKind) -> None:
    """Replace the workspace pygls made in `initialize` by a LineWorkspace (called from the initialize handler,
    before any document is opened). pygls 2.1.1 builds `Workspace` itself in `lsp_initialize`; drop when it takes
    a workspace class."""
    server.protocol._workspace = LineWorkspace(server.workspace, sync_kind)  # type: ignore[attr-defined]


def has_workspace(server: LanguageServer) -> bool:
    """Whether `initialize` has made the workspace (pygls raises on `server.workspace` before it)."""
    return server.protocol._workspace is not None  # type: ignore[attr-defined]


def open_request_count(server: LanguageServer) -> int:
    """How many futures pygls holds for requests in flight (bounded with the leak fix; machine.server.info)."""
    return len(server.protocol._request_futures)


def unregister_feature(server: LanguageServer, method: str) -> None:
    """Withdraw a feature before the capabilities are computed (a push-only client gets no diagnosticProvider).
    pygls 2.1.1 has no unregister; drop when it has one."""
    server.protocol.fm.features.pop(method, None)
    server.protocol.fm.feature_options.pop(method, None)


# -- the frame reader --------------------------------------------------------------------------------------------
#: A message larger than this is refused (the biggest document the server checks is 32 MB by default).
MAX_FRAME_BYTES = 512 * 1024 * 1024
MAX_HEADER_LINE = 8192
#: A body that stops arriving for this long is given up on (a Content-Length larger than the message).
STALL_SECONDS = float(os.environ.get("MACHINE_LSP_FRAME_STALL_S", "5"))
_CHUNK = 1 << 20
_LENGTH_NAME = re.compile(rb"content-length:", re.IGNORECASE)
_LENGTH = re.compile(rb"^content-length:[ \t]*(\S*)[ \t]*$", re.IGNORECASE)
# A header can never occur inside a JSON body: raw line breaks are not allowed in JSON strings, and the name is not
# JSON outside one. So a match marks where the next message starts.
_NEXT_HEADER = re.compile(rb"content-length:[ \t]*\d+[ \t]*\r?\n", re.IGNORECASE)
_REQUEST_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')


class FrameError(Exception):
    """The byte stream does not follow the base protocol here. `data`: the bytes of the broken message, if any."""

    def __init__(self, message: str, data: bytes = b"") -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class FrameReader:
    """Reads LSP base-protocol frames from a byte stream, never trusting it: lowercase header names and LF-only
    lines are accepted; a missing, negative, non-numeric or huge Content-Length, or a body shorter or longer than
    announced, is reported on stderr and skipped up to the next header, so one bad frame costs one message."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.eof = False
        self._pending: asyncio.Future[bytes] | None = None
        # Its own thread: pygls's pool also runs `@server.thread()` handlers, which must not delay reading.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="machine-lsp-stdin")

    async def _fill(self, timeout: float | None = None) -> bool:
        if self.eof:
            return False
        if self._pending is None:
            read = getattr(self.stream, "read1", self.stream.read)
            self._pending = asyncio.get_running_loop().run_in_executor(self.executor, read, _CHUNK)
        # Shielded: a read that outlives the timeout stays pending, and its bytes are taken by the next call.
        data = await asyncio.wait_for(asyncio.shield(self._pending), timeout)
        self._pending = None
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    async def _line(self) -> bytes | None:
        while (end := self.buffer.find(b"\n")) < 0:
            if len(self.buffer) > MAX_HEADER_LINE:
                raise FrameError("header line too long")
            if not await self._fill():
                return None
        line = bytes(self.buffer[: end + 1])
        del self.buffer[: end + 1]
        return line.rstrip(b"\r\n")

    async def _headers(self) -> int | None:
        """The Content-Length of the next frame, or None at the end of the stream."""
        length: int | None = None
        started = False
        while True:
            line = await self._line()
            if line is None:
                if started:
                    raise FrameError("the stream ended inside a header")
                return None
            if not line.strip():
                if not started:
                    continue  # stray blank lines between frames
                if length is None:
                    raise FrameError("a header without Content-Length")
                return length
            started = True
            stray = _LENGTH_NAME.search(line)
            if stray is not None and stray.start() > 0:
                # The end of a body longer than its Content-Length said, then the next header: keep the header.
                print(f"machine-lsp: skipped {stray.start()} stray bytes before a header", file=sys.stderr)
                line = line[stray.start() :]
            match = _LENGTH.match(line)
            if match is not None:
                value = match.group(1)
                if not value.isdigit():
                    raise FrameError(f"Content-Length is not a byte count: {value[:40]!r}")
                length = int(value)
                if length > MAX_FRAME_BYTES:
                    raise FrameError(f"Content-Length {length} is larger than {MAX_FRAME_BYTES} bytes")
            elif b":" not in line:
                raise FrameError(f"not a header: {line[:60]!r}")

    async def _body(self, length: int) -> bytes:
        """`length` bytes; fewer when the next header shows up first or the stream stalls (a wrong length)."""
        scanned = 0
        while len(self.buffer) < length:
            if _NEXT_HEADER.search(self.buffer, max(0, scanned - 64)) is not None:
                break
            scanned = len(self.buffer)
            try:
                if not await self._fill(timeout=STALL_SECONDS):
                    break
            except TimeoutError:
                break
        match = _NEXT_HEADER.search(self.buffer, max(0, scanned - 64), length + 64)
        end = length if match is None or match.start() >= length else match.start()
        end = min(end, len(self.buffer))
        body = bytes(self.buffer[:end])
        del self.buffer[:end]
        if end < length:
            raise FrameError(f"Content-Length {length} but the message is {end} bytes", body)
        return body

    def _take_until_header(self) -> bytes:
        """Remove and return what is buffered before the next header (without waiting for more)."""
        match = _NEXT_HEADER.search(self.buffer)
        end = match.start() if match is not None else len(self.buffer)
        taken = bytes(self.buffer[:end])
        del self.buffer[:end]
        return taken

    async def _resync(self) -> None:
        """Skip bytes up to the next header (waiting for them)."""
        while _NEXT_HEADER.search(self.buffer) is None:
            del self.buffer[: max(0, len(self.buffer) - 64)]  # a header may be split across reads
            if not await self._fill():
                self.buffer.clear()
                return
        self._take_until_header()

    async def frames(self):
        """Yield message bodies; bad frames become `FrameError` values (with the bytes of the broken message)."""
        while True:
            try:
                length = await self._headers()
                if length is None:
                    return
                yield await self._body(length)
            except FrameError as exc:
                exc.data += self._take_until_header()
                yield exc
                await self._resync()
                if self.eof and not self.buffer:
                    return


def _answer_broken_request(protocol: MachineProtocol, exc: FrameError) -> None:
    """A request whose frame was broken still gets an error reply when its id can be read, so no client waits."""
    data = exc.data[:65536]
    match = _REQUEST_ID.search(data) if data else None
    if match is None or b'"method"' not in data:
        return
    try:
        msg_id = json.loads(match.group(1))
    except ValueError:
        return
    error = JsonRpcException(message=f"malformed message frame: {exc.message}")
    error.code = -32700  # ParseError
    protocol.reply_error(msg_id, error)


async def serve_frames(server: LanguageServer, stream: BinaryIO) -> int:
    """The message loop for stdio: pygls's `run_async` with a reader that survives bad frames. Returns the exit
    code the `exit` notification asked for (0 after `shutdown`, 1 without), or 0 at the end of the stream."""
    protocol = server.protocol
    assert isinstance(protocol, MachineProtocol)
    reader = FrameReader(stream)
    try:
        async for frame in reader.frames():
            if isinstance(frame, FrameError):
                print(f"machine-lsp: malformed message frame skipped: {frame.message}", file=sys.stderr)
                _answer_broken_request(protocol, frame)
                continue
            try:
                message = json.loads(frame, object_hook=protocol.structure_message)
            except (ValueError, RecursionError) as exc:
                print(f"machine-lsp: unreadable message skipped: {exc}", file=sys.stderr)
                _answer_broken_request(protocol, FrameError(f"not JSON: {exc}", frame))
                continue
            except JsonRpcException:
                continue  # structure_message has answered it
            try:
                protocol.handle_message(message)
            except SystemExit as exit_:
                return int(exit_.code or 0)
            except Exception as exc:
                logger.exception("Unable to handle message")
                server.report_server_error(exc, JsonRpcException)
    finally:
        reader.executor.shutdown(wait=False, cancel_futures=True)
    return 0


def start_io(server: LanguageServer) -> int:
    """pygls's `start_io` with the guarded reader and the `exit` code kept. pygls 2.1.1 reads frames with a loop
    that a bad Content-Length leaves deaf (or kills with MemoryError) and swallows `exit`'s code; drop when its
    reader resynchronises and `start_io` returns the code."""
    from pygls.io_ import StdoutWriter

    server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
    try:
        return asyncio.run(serve_frames(server, sys.stdin.buffer))
    except BrokenPipeError:
        logger.error("Connection to the client is lost! Shutting down the server.")
        return 1
    finally:
        server.shutdown()
