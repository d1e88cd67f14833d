"""The recording proxy's log: `.machine/captured/<started>-<session id>.jsonl`, one line per model exchange of one run.

A line holds the exchange exactly as it went: the request body as the agent sent it (embedded verbatim when it is
one line of JSON, which is what agents send), the answer as received (a stream reassembled into the unstreamed body,
`sse_reassembly`), the API, path, status and times, plus `messages`: the conversation as chat messages, made by the
same converters `machine serve` reads requests with (`protocol.PARSERS`) from the request with the answer appended.
The transcript adapter (`core.transcripts.captured`) reads those. Headers are never stored except a few that name
the client and API version; keys never.

Appends follow the store's rules: the directories and the file are opened without following a symlink
(`safe_files`), each line goes out in one `write` under an exclusive `flock`, then `fsync`.
"""

from __future__ import annotations

import fcntl
import gzip
import os
import threading
import uuid
import zlib
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.safe_files import check_real_dir, open_store_dir, open_store_file
from machine_lsp.core.schema import Message
from machine_lsp.serve import protocol as P

CAPTURED_DIR = "captured"
#: Request headers worth keeping with an exchange (which client, which API version). Nothing else is stored.
KEPT_HEADERS = ("user-agent", "anthropic-version", "anthropic-beta", "openai-beta")


class CapturedRow(msgspec.Struct, omit_defaults=True):
    capture: str  # "proxy": what the adapter sniffs (the first key of every line)
    session: str
    time: str  # the request arrived
    done: str  # the answer ended
    api: str
    method: str
    path: str
    status: int
    stream: bool = False
    model: str | None = None
    incomplete: bool = False  # the answer was cut off (upstream or client went away mid-answer)
    request: msgspec.Raw | None = None
    response: Any = None
    messages: list[Message] | None = None
    tools: list[dict[str, Any]] | None = None
    problem: str | None = None  # why there is no conversation (an upstream error, a request not understood)
    headers: dict[str, str] = msgspec.field(default_factory=dict)


def decoded_body(body: bytes, encoding: str) -> bytes:
    """The body as the upstream reads it: a gzip- or deflate-encoded request unpacked (others as they are)."""
    encoding = encoding.strip().lower()
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


def raw_request(body: bytes) -> tuple[msgspec.Raw | None, Any, str | None]:
    """(verbatim JSON for the log, the decoded body, why it cannot be logged as JSON)."""
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        return None, None, f"the request body is not JSON ({exc})"
    if b"\n" in body or b"\r" in body:  # pretty-printed: one line in the log, same values
        return msgspec.Raw(msgspec.json.encode(decoded)), decoded, None
    return msgspec.Raw(body), decoded, None


def _with_answer(api: str, request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any] | None:
    """The request with the answer appended as the next turn, in the request's own API (None: no answer)."""
    if api == "chat.completions":
        choices = response.get("choices") or []
        message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            return None
        turn = {
            key: message[key] for key in ("role", "content", "tool_calls") if message.get(key) is not None
        }
        return {**request, "messages": [*request.get("messages", []), {"role": "assistant", **turn}]}
    if api == "responses":
        items = request.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        output = [item for item in response.get("output") or [] if isinstance(item, dict)]
        return {**request, "input": [*(items or []), *output]} if output else None
    content = response.get("content")
    if not isinstance(content, list):
        return None
    return {**request, "messages": [*request.get("messages", []), {"role": "assistant", "content": content}]}


def _without_nulls(value: Any) -> Any:
    """A JSON value with its null object members left out: agents send `"content": null` for "absent" (Codex on
    reasoning items, which the real APIs accept) where the SDK parameter types only allow leaving the key out."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def conversation(
    api: str, request: Any, response: Any
) -> tuple[list[Message] | None, list[dict[str, Any]] | None, str | None]:
    """(messages ending in the answer, the tools offered in OpenAI's shape, why there are none)."""
    if not isinstance(request, dict) or not isinstance(response, dict):
        return None, None, "no JSON request and answer to read a conversation from"
    body = _with_answer(api, _without_nulls(request), _without_nulls(response))
    if body is None:
        return None, None, "the answer holds no assistant turn"
    try:
        conv = P.PARSERS[api](body)  # type: ignore[index]
    except P.RequestError as exc:
        return None, None, f"cannot read the exchange as a conversation: {exc.message}"
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return None, None, f"cannot read the exchange as a conversation: {type(exc).__name__}: {exc}"
    tools = [{"type": "function", "function": tool} for tool in conv.tools] or None
    return conv.messages, tools, None


class CapturedLog:
    """One proxy run's log file. `open()` before serving, so a store that cannot be written fails at start."""

    def __init__(self, machine_dir: Path, started: datetime) -> None:
        self.machine_dir = machine_dir
        self.directory = machine_dir / CAPTURED_DIR
        # The id leads with what tells runs apart (a session id is typed as a unique prefix); the file name sorts by
        # start time.
        self.session = uuid.uuid4().hex[:12]
        self.path = self.directory / f"{started.strftime('%Y-%m-%dT%H-%M-%S')}-{self.session}.jsonl"
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._lines = 0

    def open(self) -> None:
        """Create (never through a symlink) `.machine/captured/` and this run's file. Raises OSError/NotRegularFile."""
        for directory in (self.machine_dir, self.directory):
            check_real_dir(directory)
            directory.mkdir(mode=0o755, exist_ok=True)
            check_real_dir(directory)  # a symlink put there between the check and mkdir
        dir_fd = open_store_dir(self.directory)
        try:
            self._fd = open_store_file(
                dir_fd, self.path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, self.path
            )
        finally:
            os.close(dir_fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def append(self, row: CapturedRow) -> int:
        """Append one row; returns its 1-based line number."""
        line = msgspec.json.encode(row) + b"\n"
        with self._lock:
            if self._fd is None:
                raise OSError(f"{self.path}: the captured log is not open")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                written = os.write(self._fd, line)
                while written < len(line):
                    written += os.write(self._fd, line[written:])
                os.fsync(self._fd)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._lines += 1
            return self._lines
