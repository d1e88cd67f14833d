"""A scripted model endpoint on 127.0.0.1 that real coding agents can talk to (stdlib only).

It speaks the APIs the agents use: OpenAI Chat Completions (`/v1/chat/completions`, streamed or not), OpenAI
Responses (`/v1/responses`, streamed as server-sent events, as Codex needs), Anthropic Messages (`/v1/messages`,
also `?beta=true`, streamed or not, plus `count_tokens`) and Google's Gemini API (`.../models/M:generateContent`,
`:streamGenerateContent?alt=sse`, as Gemini CLI needs; `gemini_api`).

The script: when the newest user turn asks for `echo hi` and a shell-like tool is offered, the answer is exactly one
call of that tool running `echo hi` (Anthropic: a short text block and the tool_use block, one message); when the
conversation ends in a tool result, a final text that says what the tool printed; otherwise a text reply naming
the prompt. Every request is recorded (body, path, the reply sent) so a test can compare the session log the agent
wrote with what the agent really sent.

Not a fake of the part under test: the agents and the logs they write are what the tests check; this only stands
in for the remote model.
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import gemini_api

SUBAGENT_PROMPT_MARKER = "use a subagent"
SUBAGENT_TOOL_NAMES = ("Agent", "Task")
SHELL_TOOL_NAMES = ("bash", "shell", "shell_command", "exec_command", "local_shell", "run_shell_command")
TOOL_PROMPT_MARKER = "echo hi"
TOOL_TEXT = "I'll run it."
PARALLEL_MARKER = "echo hi twice"
# A call the test kills the agent during (the session then ends on a call nothing answered).
SLOW_TOOL_MARKER = "sleep 30"
REASONING_SUMMARY = "Thinking about the request."
ENCRYPTED_REASONING = "gAAAAABencrypted-reasoning-blob=="


@dataclass
class Reply:
    """What the endpoint answered: a text, or shell tool call(s) (with an optional text before them).

    `parallel` > 1: that many calls of the same tool in one reply (when the prompt says `echo hi twice`)."""

    kind: str  # "text" | "tool_call"
    text: str = ""
    tool_name: str = ""
    tool_call_id: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    response_id: str = ""
    parallel: int = 1

    def calls(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(call id, tool name, arguments) for each call in this reply."""
        if self.kind != "tool_call":
            return []
        ids = [self.tool_call_id] + [
            f"{self.tool_call_id}{chr(ord('a') + i)}" for i in range(1, self.parallel)
        ]
        return [(call_id, self.tool_name, self.arguments) for call_id in ids]


@dataclass
class Recorded:
    api: str  # "chat" | "responses" | "anthropic" | "gemini" | "other"
    path: str
    body: Any
    reply: Reply | None
    headers: dict[str, str]
    credential: str = ""  # the `authorization` / `x-api-key` value (kept out of `headers`)
    raw: bytes = b""  # the body's bytes as received (unpacked when gzip-encoded)


class ModelEndpoint:
    """`with ModelEndpoint() as endpoint:` serves on `endpoint.base_url` (http://127.0.0.1:PORT) until exit."""

    def __init__(self, model: str = "m") -> None:
        self.model = model
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="model-endpoint", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ModelEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def record(self, item: Recorded) -> None:
        with self._lock:
            self.requests.append(item)

    def model_requests(self, api: str | None = None) -> list[Recorded]:
        """Requests that got a model reply (not token counts or model lists), oldest first."""
        return [r for r in self.requests if r.reply is not None and (api is None or r.api == api)]

    def replies(self) -> list[Reply]:
        return [r.reply for r in self.model_requests() if r.reply is not None]


# -- the script --------------------------------------------------------------------------------------------------


def choose_reply(
    endpoint: ModelEndpoint,
    *,
    newest_user_text: str,
    ends_in_tool_result: bool,
    tool_output: str,
    tools: list[tuple[str, dict[str, Any]]],
) -> Reply:
    """The scripted answer. `tools` is (name, JSON schema of the arguments) for every function tool offered."""
    n = endpoint.next_id()
    if ends_in_tool_result:
        said = "hi" if "hi" in tool_output else tool_output.strip()[:60]
        return Reply("text", text=f"The command printed: {said}", response_id=f"resp_{n}")
    if SUBAGENT_PROMPT_MARKER in newest_user_text:
        agent = next((name for name, _ in tools if name in SUBAGENT_TOOL_NAMES), None)
        if agent is not None:
            return Reply(
                "tool_call",
                text="I'll ask a subagent.",
                tool_name=agent,
                tool_call_id=f"call_{n:04d}",
                arguments={
                    "description": "Greet from a subagent",
                    "prompt": "Say hi from the subagent.",
                    "subagent_type": "claude",
                },
                response_id=f"resp_{n}",
            )
    if TOOL_PROMPT_MARKER in newest_user_text or SLOW_TOOL_MARKER in newest_user_text:
        command = SLOW_TOOL_MARKER if SLOW_TOOL_MARKER in newest_user_text else TOOL_PROMPT_MARKER
        shell = next(((name, schema) for name, schema in tools if name.lower() in SHELL_TOOL_NAMES), None)
        if shell is not None:
            name, schema = shell
            return Reply(
                "tool_call",
                text=TOOL_TEXT,
                tool_name=name,
                tool_call_id=f"call_{n:04d}",
                arguments=_shell_arguments(schema, command),
                response_id=f"resp_{n}",
                parallel=2 if PARALLEL_MARKER in newest_user_text else 1,
            )
    prompt = " ".join(newest_user_text.split())[:80]
    return Reply("text", text=f"Scripted reply {n} to: {prompt}", response_id=f"resp_{n}")


def _shell_arguments(schema: dict[str, Any], command: str) -> dict[str, Any]:
    """Arguments running `command`, shaped by the tool's own schema (a string, or an argv list, or `cmd`)."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    arguments: dict[str, Any] = {}
    key = "command" if "command" in properties or "cmd" not in properties else "cmd"
    if (properties.get(key) or {}).get("type") == "array":
        arguments[key] = ["bash", "-lc", command]
    else:
        arguments[key] = command
    if "description" in properties:
        arguments["description"] = "Print hi"
    for name in required - arguments.keys():
        kind = (properties.get(name) or {}).get("type")
        arguments[name] = {"integer": 10000, "number": 10000, "boolean": False, "array": []}.get(kind, "")
    return arguments


def _text_of(content: Any, text_types: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        str(part.get("text", ""))
        for part in content
        if isinstance(part, dict) and part.get("type") in text_types
    )


# -- per API -------------------------------------------------------------------------------------------------


def _chat_reply(endpoint: ModelEndpoint, body: dict[str, Any]) -> Reply:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    newest_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    tools = [
        (t["function"]["name"], t["function"].get("parameters") or {})
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    content = newest_user.get("content")
    if isinstance(content, list):  # Qwen Code puts <system-reminder> parts before the prompt: look past them
        content = [p for p in content if not str(p.get("text", "")).lstrip().startswith("<system-reminder>")]
    return choose_reply(
        endpoint,
        newest_user_text=_text_of(content),
        ends_in_tool_result=last.get("role") == "tool",
        tool_output=_text_of(last.get("content")),
        tools=tools,
    )


def _responses_reply(endpoint: ModelEndpoint, body: dict[str, Any]) -> Reply:
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    last = items[-1] if items else {}
    newest_user = next(
        (i for i in reversed(items) if i.get("type", "message") == "message" and i.get("role") == "user"), {}
    )
    tools = []
    for tool in body.get("tools") or []:
        if tool.get("type") == "function":
            tools.append((tool.get("name", ""), tool.get("parameters") or {}))
        elif tool.get("type") == "local_shell":
            tools.append(("local_shell", {"properties": {"command": {"type": "array"}}}))
    output = last.get("output", "")
    if isinstance(output, dict):
        output = output.get("content", "")
    reply = choose_reply(
        endpoint,
        newest_user_text=_text_of(newest_user.get("content")),
        ends_in_tool_result=str(last.get("type", "")).endswith("_output"),
        tool_output=output if isinstance(output, str) else _text_of(output),
        tools=tools,
    )
    reply.parallel = 1  # one call per Responses answer here
    return reply


def _anthropic_reply(endpoint: ModelEndpoint, body: dict[str, Any]) -> Reply:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    last_content = last.get("content")
    results = (
        [p for p in last_content if isinstance(p, dict) and p.get("type") == "tool_result"]
        if isinstance(last_content, list)
        else []
    )
    newest_user = next(
        (
            m
            for m in reversed(messages)
            if m.get("role") == "user"
            and not (
                isinstance(m.get("content"), list)
                and any(isinstance(p, dict) and p.get("type") == "tool_result" for p in m["content"])
            )
        ),
        {},
    )
    content = newest_user.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    # Claude Code puts <system-reminder> blocks in the same user message as the prompt: look past them.
    user_text = "\n".join(
        str(part.get("text", ""))
        for part in parts
        if isinstance(part, dict)
        and part.get("type") == "text"
        and not str(part.get("text", "")).lstrip().startswith("<system-reminder>")
    )
    tools = [
        (t.get("name", ""), t.get("input_schema") or {})
        for t in body.get("tools") or []
        if isinstance(t, dict) and "input_schema" in t
    ]
    tool_output = "\n".join(_text_of(r.get("content")) for r in results)
    return choose_reply(
        endpoint,
        newest_user_text=user_text,
        ends_in_tool_result=bool(results) and last.get("role") == "user",
        tool_output=tool_output,
        tools=tools,
    )


def _make_handler(endpoint: ModelEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass  # quiet: the tests read `endpoint.requests`

        # -- plumbing ----------------------------------------------------------------------------------------

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.headers.get("Content-Encoding") == "gzip":
                raw = gzip.decompress(raw)
            self.raw_body = raw
            try:
                return json.loads(raw) if raw else None
            except ValueError:
                return raw.decode("utf-8", "replace")

        def _credential(self) -> str:
            headers = self.headers
            return (
                headers.get("Authorization")
                or headers.get("X-Api-Key")
                or headers.get("X-Goog-Api-Key")
                or ""
            )

        def _headers(self) -> dict[str, str]:
            hidden = {"authorization", "x-api-key", "api-key", "x-goog-api-key"}
            return {k.lower(): v for k, v in self.headers.items() if k.lower() not in hidden}

        def _json(self, status: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, events: list[tuple[str | None, Any]]) -> None:
            chunks = []
            for event, data in events:
                text = data if isinstance(data, str) else json.dumps(data)
                chunks.append((f"event: {event}\n" if event else "") + f"data: {text}\n\n")
            payload = "".join(chunks).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        # -- routes ------------------------------------------------------------------------------------------

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = urlsplit(self.path).path
            endpoint.record(Recorded("other", self.path, None, None, self._headers()))
            if path.rstrip("/").endswith("/models"):
                model = {"id": endpoint.model, "object": "model", "created": 0, "owned_by": "local"}
                self._json(200, {"object": "list", "data": [model], "models": []})
            else:
                self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

        def do_POST(self) -> None:  # noqa: N802
            path = urlsplit(self.path).path.rstrip("/")
            body = self._body()
            credential = self._credential()
            if not isinstance(body, dict):
                endpoint.record(Recorded("other", self.path, body, None, self._headers()))
                self._json(400, {"error": {"message": "expected a JSON object", "type": "invalid_request"}})
                return
            if gemini_api.is_gemini_path(path):
                reply = choose_reply(endpoint, **gemini_api.reply_inputs(body))
                endpoint.record(
                    Recorded("gemini", self.path, body, reply, self._headers(), credential, self.raw_body)
                )
                self._gemini(path, reply)
            elif path.endswith("/chat/completions"):
                reply = _chat_reply(endpoint, body)
                endpoint.record(
                    Recorded("chat", self.path, body, reply, self._headers(), credential, self.raw_body)
                )
                self._chat(body, reply)
            elif path.endswith("/responses"):
                reply = _responses_reply(endpoint, body)
                endpoint.record(
                    Recorded("responses", self.path, body, reply, self._headers(), credential, self.raw_body)
                )
                self._responses(body, reply)
            elif path.endswith("/messages/count_tokens"):
                endpoint.record(Recorded("other", self.path, body, None, self._headers()))
                self._json(200, {"input_tokens": len(json.dumps(body)) // 4})
            elif path.endswith("/messages"):
                reply = _anthropic_reply(endpoint, body)
                endpoint.record(
                    Recorded("anthropic", self.path, body, reply, self._headers(), credential, self.raw_body)
                )
                self._anthropic(body, reply)
            else:
                endpoint.record(Recorded("other", self.path, body, None, self._headers()))
                self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

        # -- Google Gemini -------------------------------------------------------------------------------------

        def _gemini(self, path: str, reply: Reply) -> None:
            model = gemini_api.model_of(path)
            if path.endswith(":streamGenerateContent"):
                self._sse([(None, chunk) for chunk in gemini_api.stream_chunks(reply, model)])
            else:
                self._json(200, gemini_api.whole_answer(reply, model))

        # -- OpenAI Chat Completions --------------------------------------------------------------------------

        def _chat(self, body: dict[str, Any], reply: Reply) -> None:
            created = int(time.time())
            chat_id = f"chatcmpl-{reply.response_id}"
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            tool_calls = []
            tool_calls = [
                {
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for index, (call_id, name, arguments) in enumerate(reply.calls())
            ]
            finish = "tool_calls" if tool_calls else "stop"
            text = "" if tool_calls else reply.text
            if not body.get("stream"):
                message: dict[str, Any] = {"role": "assistant", "content": text or None}
                if tool_calls:
                    message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in tool_calls]
                self._json(
                    200,
                    {
                        "id": chat_id,
                        "object": "chat.completion",
                        "created": created,
                        "model": body.get("model", endpoint.model),
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": usage,
                    },
                )
                return

            def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
                return {
                    "id": chat_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": body.get("model", endpoint.model),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                }

            events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
            if text:
                events.append((None, chunk({"content": text})))
            if tool_calls:
                events.append((None, chunk({"tool_calls": tool_calls})))
            events.append((None, chunk({}, finish)))
            if (body.get("stream_options") or {}).get("include_usage"):
                final = chunk({})
                final["choices"] = []
                final["usage"] = usage
                events.append((None, final))
            events.append((None, "[DONE]"))
            self._sse(events)

        # -- OpenAI Responses ---------------------------------------------------------------------------------

        def _responses(self, body: dict[str, Any], reply: Reply) -> None:
            response_id = reply.response_id
            model = body.get("model", endpoint.model)
            if reply.kind == "tool_call" and reply.tool_name == "local_shell":
                item: dict[str, Any] = {
                    "type": "local_shell_call",
                    "id": f"lsh_{response_id}",
                    "call_id": reply.tool_call_id,
                    "status": "completed",
                    "action": {"type": "exec", "command": reply.arguments.get("command"), "env": {}},
                }
            elif reply.kind == "tool_call":
                item = {
                    "type": "function_call",
                    "id": f"fc_{response_id}",
                    "call_id": reply.tool_call_id,
                    "name": reply.tool_name,
                    "arguments": json.dumps(reply.arguments),
                    "status": "completed",
                }
            else:
                item = {
                    "type": "message",
                    "id": f"msg_{response_id}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            usage = {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15,
            }
            # A reasoning item first, as reasoning models send it: a readable summary and an encrypted blob.
            reasoning = {
                "type": "reasoning",
                "id": f"rs_{response_id}",
                "summary": [{"type": "summary_text", "text": REASONING_SUMMARY}],
                "encrypted_content": ENCRYPTED_REASONING,
            }
            base = {"id": response_id, "object": "response", "created_at": int(time.time()), "model": model}
            completed = {**base, "status": "completed", "output": [reasoning, item], "usage": usage}
            if not body.get("stream"):
                self._json(200, completed)
                return
            events: list[tuple[str | None, Any]] = [
                (
                    "response.created",
                    {"type": "response.created", "response": {**base, "status": "in_progress"}},
                ),
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
                ),
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": 1, "item": item},
                ),
            ]
            if item["type"] == "message":
                events.append(
                    (
                        "response.output_text.delta",
                        {
                            "type": "response.output_text.delta",
                            "item_id": item["id"],
                            "output_index": 1,
                            "content_index": 0,
                            "delta": reply.text,
                        },
                    )
                )
            events.append(
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": 1, "item": item},
                )
            )
            events.append(("response.completed", {"type": "response.completed", "response": completed}))
            self._sse(events)

        # -- Anthropic Messages -------------------------------------------------------------------------------

        def _anthropic(self, body: dict[str, Any], reply: Reply) -> None:
            message_id = f"msg_{reply.response_id}"
            model = body.get("model", endpoint.model)
            # A thinking block first, as extended-thinking models send it (text plus an opaque signature).
            blocks: list[dict[str, Any]] = [
                {"type": "thinking", "thinking": REASONING_SUMMARY, "signature": ENCRYPTED_REASONING}
            ]
            if reply.text:
                blocks.append({"type": "text", "text": reply.text})
            for call_id, name, arguments in reply.calls():
                blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
            stop = "tool_use" if reply.kind == "tool_call" else "end_turn"
            usage = {"input_tokens": 10, "output_tokens": 5}
            if not body.get("stream"):
                self._json(
                    200,
                    {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": blocks,
                        "stop_reason": stop,
                        "stop_sequence": None,
                        "usage": usage,
                    },
                )
                return
            events: list[tuple[str | None, Any]] = [
                (
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {
                            "id": message_id,
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": [],
                            "stop_reason": None,
                            "stop_sequence": None,
                            "usage": {"input_tokens": 10, "output_tokens": 1},
                        },
                    },
                )
            ]
            for index, block in enumerate(blocks):
                if block["type"] == "text":
                    start = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": block["text"]}
                elif block["type"] == "thinking":
                    start = {"type": "thinking", "thinking": "", "signature": ""}
                    delta = {"type": "thinking_delta", "thinking": block["thinking"]}
                    events.append(
                        (
                            "content_block_start",
                            {"type": "content_block_start", "index": index, "content_block": start},
                        )
                    )
                    events.append(
                        (
                            "content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": delta},
                        )
                    )
                    signature = {"type": "signature_delta", "signature": block["signature"]}
                    events.append(
                        (
                            "content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": signature},
                        )
                    )
                    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
                    continue
                else:
                    start = {**block, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                events.append(
                    (
                        "content_block_start",
                        {"type": "content_block_start", "index": index, "content_block": start},
                    )
                )
                events.append(
                    ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
                )
                events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
            events.append(
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": 5},
                    },
                )
            )
            events.append(("message_stop", {"type": "message_stop"}))
            self._sse(events)

    return Handler
