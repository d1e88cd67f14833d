"""A raw JSON-RPC client over the real server's stdio: sends any bytes (malformed frames too) and reads replies.

pytest-lsp cannot send malformed traffic; this can. Replies are read by a thread into a queue; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

SERVER = [sys.executable, "-m", "machine_lsp.lsp"]
WAIT = 20.0


def frame(payload: Any) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawClient:
    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.proc = subprocess.Popen(
            SERVER,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.notifications: list[dict[str, Any]] = []
        self.responses: dict[Any, dict[str, Any]] = {}
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if not line.strip():
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None
            self.messages.put(json.loads(stream.read(length)))

    # -- sending ------------------------------------------------------------------------------------------------
    def send_bytes(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def notify(self, method: str, params: Any = None) -> None:
        self.send_bytes(frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def request(self, method: str, params: Any = None) -> int:
        self.next_id += 1
        self.send_bytes(frame({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}))
        return self.next_id

    def reply(self, msg_id: int, timeout: float = WAIT) -> dict[str, Any]:
        """The response to request `msg_id` (answering the server's own requests with null meanwhile)."""
        if msg_id in self.responses:
            return self.responses.pop(msg_id)
        while True:
            message = self.messages.get(timeout=timeout)
            if message.get("id") == msg_id and "method" not in message:
                return message
            if "method" not in message:
                self.responses[message.get("id")] = message
            elif (
                "method" in message and "id" in message
            ):  # a server request (progress token, message request)
                self.send_bytes(frame({"jsonrpc": "2.0", "id": message["id"], "result": None}))
            else:
                self.notifications.append(message)

    def call(self, method: str, params: Any = None, timeout: float = WAIT) -> dict[str, Any]:
        return self.reply(self.request(method, params), timeout)

    def initialize(self, options: dict[str, Any] | None = None, encoding: str = "utf-16") -> dict[str, Any]:
        capabilities = {"general": {"positionEncodings": [encoding]}, "textDocument": {"hover": {}}}
        answer = self.call(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": self.root.as_uri(),
                "capabilities": capabilities,
                "initializationOptions": options or {"machine": {"debounceMs": 10}},
            },
        )
        self.notify("initialized", {})
        return answer

    def open(self, path: Path, text: str, version: int = 1) -> str:
        uri = path.as_uri()
        item = {"uri": uri, "languageId": "jsonl", "version": version, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": item})
        return uri

    def wait_notification(self, method: str, predicate=lambda params: True, timeout: float = WAIT) -> Any:
        for seen in self.notifications:
            if seen["method"] == method and predicate(seen.get("params")):
                self.notifications.remove(seen)
                return seen.get("params")
        while True:
            message = self.messages.get(timeout=timeout)
            if message.get("method") == method and "id" not in message and predicate(message.get("params")):
                return message.get("params")
            if "method" in message and "id" in message:
                self.send_bytes(frame({"jsonrpc": "2.0", "id": message["id"], "result": None}))
            elif "method" in message:
                self.notifications.append(message)

    def close(self) -> int:
        if self.proc.poll() is None:
            try:
                self.call("shutdown", None, timeout=10)
                self.notify("exit")
            except (queue.Empty, BrokenPipeError, OSError):
                pass
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode("utf-8", "replace")
