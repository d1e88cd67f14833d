"""A streamed answer of one of the three APIs, reassembled into the body the same request would get unstreamed.

The recording proxy passes the upstream's server-sent events through untouched and feeds a copy here: `SseParser`
splits the byte stream into events, and `reassemble(api, events)` rebuilds the answer: a Chat Completions
`chat.completion` from its chunks, the Responses `response` object of the final `response.completed` (or
`.incomplete` / `.failed`) event, an Anthropic `message` from its content-block events.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec


class SseParser:
    """Incremental server-sent-events parser: `feed(bytes)` returns the complete events as (event, data)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        events: list[tuple[str, str]] = []
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            event = _event(block.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        return events


def _event(block: str) -> tuple[str, str] | None:
    name, data = "", []
    for line in block.split("\n"):
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return (name, "\n".join(data)) if data else None


def decoded(events: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The events' JSON data objects (the `[DONE]` sentinel and anything unreadable left out)."""
    out = []
    for _, data in events:
        try:
            obj = msgspec.json.decode(data)
        except (msgspec.DecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def reassemble(api: str, events: list[tuple[str, str]]) -> dict[str, Any] | None:
    """The unstreamed body equivalent to these events, or None when they hold no answer."""
    objects = decoded(events)
    if api == "chat.completions":
        return _chat(objects)
    if api == "responses":
        return _responses(objects)
    return _messages(objects)


def _chat(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not chunks:
        return None
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, usage, role = None, None, "assistant"
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue  # n > 1 is not what agents ask for; the first choice is the answer
            delta = choice.get("delta") or {}
            role = delta.get("role") or role
            text.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                _chat_call_delta(calls.setdefault(call.get("index", 0), {}), call)
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"role": role, "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    first = chunks[0]
    body = {
        "id": first.get("id"),
        "object": "chat.completion",
        "created": first.get("created"),
        "model": first.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage:
        body["usage"] = usage
    return body


def _chat_call_delta(call: dict[str, Any], delta: dict[str, Any]) -> None:
    if delta.get("id"):
        call["id"] = delta["id"]
    call["type"] = delta.get("type") or call.get("type") or "function"
    function = call.setdefault("function", {"name": "", "arguments": ""})
    part = delta.get("function") or {}
    function["name"] += part.get("name") or ""
    function["arguments"] += part.get("arguments") or ""


_RESPONSE_DONE = ("response.completed", "response.incomplete", "response.failed")


def _responses(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    for event in reversed(events):
        if event.get("type") in _RESPONSE_DONE and isinstance(event.get("response"), dict):
            response = dict(event["response"])
            if not response.get("output"):  # some servers send the items only as output_item.done events
                response["output"] = _done_items(events)
            return response
    items = _done_items(events)
    if not items:
        return None
    created = next((e["response"] for e in events if isinstance(e.get("response"), dict)), {})
    return {**created, "status": "incomplete", "output": items}


def _done_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = [
        e for e in events if e.get("type") == "response.output_item.done" and isinstance(e.get("item"), dict)
    ]
    return [e["item"] for e in sorted(done, key=lambda e: e.get("output_index", 0))]


def _messages(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    start = next((e for e in events if e.get("type") == "message_start"), None)
    if start is None or not isinstance(start.get("message"), dict):
        return None
    message = dict(start["message"])
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    for event in events:
        kind = event.get("type")
        index = event.get("index", 0)
        if kind == "content_block_start":
            blocks[index] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta" and index in blocks:
            _block_delta(blocks[index], event.get("delta") or {}, partial_json, index)
        elif kind == "message_delta":
            message.update(event.get("delta") or {})
            message["usage"] = {**(message.get("usage") or {}), **(event.get("usage") or {})}
    for index, text in partial_json.items():
        try:
            blocks[index]["input"] = json.loads(text) if text else {}
        except ValueError:
            blocks[index]["input"] = text  # a cut-off stream: keep what came, unparsed
    message["content"] = [blocks[index] for index in sorted(blocks)]
    return message


def _block_delta(
    block: dict[str, Any], delta: dict[str, Any], partial_json: dict[int, str], index: int
) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + delta.get("signature", "")
    elif kind == "input_json_delta":
        partial_json[index] = partial_json.get(index, "") + delta.get("partial_json", "")
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))
