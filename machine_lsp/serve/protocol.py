"""Requests of the three APIs the agents speak -> one `Conversation`; the model's tokens -> a parsed `Reply`.

Requests are validated against the SDKs' own parameter types (`openai`'s `CompletionCreateParamsBase` and
`ResponseCreateParamsBase`, `anthropic`'s `MessageCreateParamsBase`) with pydantic. The reply's wire shapes (bodies,
chunks, errors) are built in `shapes`, the stream events in `streaming`.

The conversation is kept as core `Message`s, exactly as the model sees it: when tools are offered, the system
message carries the renderer's tool block (`create_conversation_prefix_with_tools`), so a served row tagged and
trained on renders to the same tokens the server was sent.
"""

from __future__ import annotations

import functools
import json
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import pydantic

from machine_lsp.core.schema import Message, ToolCall, ToolFunction

Api = Literal["chat.completions", "responses", "messages"]


class RequestError(Exception):
    """A request the server refuses with HTTP 400 (or `status`), in the API's own error shape."""

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.status = status


@dataclass
class Conversation:
    """What one request asks for, independent of the API it came through."""

    api: Api
    model: str
    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    stop: list[str] = field(default_factory=list)
    include_usage: bool = False


@dataclass
class Reply:
    """The model's answer, parsed by the renderer."""

    text: str
    tool_calls: list[ToolCall]
    finish: Literal["stop", "length", "tool_calls"]
    prompt_tokens: int
    completion_tokens: int


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


# ---------------------------------------------------------------------------------------------------------------
# Validation against the SDK types


@functools.cache
def _adapter(api: Api) -> pydantic.TypeAdapter[Any]:
    if api == "chat.completions":
        from openai.types.chat.completion_create_params import CompletionCreateParamsBase

        return pydantic.TypeAdapter(CompletionCreateParamsBase)
    if api == "responses":
        from openai.types.responses.response_create_params import ResponseCreateParamsBase

        return pydantic.TypeAdapter(ResponseCreateParamsBase)
    from anthropic.types.message_create_params import MessageCreateParamsBase

    return pydantic.TypeAdapter(MessageCreateParamsBase)


def warm_validators() -> None:
    """Build every API's validator now. The first use imports the SDK's types and compiles them (measured: 0.6 s
    for chat.completions, 1.8 s for messages), which would otherwise land on an agent's first request; `server.run`
    runs this before the port answers."""
    for api in get_args(Api):
        _adapter(api)


def _materialize(value: Any) -> Any:
    """pydantic validates `Iterable[...]` fields lazily; walk them so every error surfaces now."""
    if isinstance(value, pydantic.BaseModel):  # anthropic's content unions also admit response blocks
        return _materialize(value.model_dump(exclude_none=True))
    if isinstance(value, dict):
        return {key: _materialize(item) for key, item in value.items()}
    if isinstance(value, list | tuple | Iterator):  # pydantic's lazy ValidatorIterator is an Iterator
        return [_materialize(item) for item in value]
    return value


def validate(api: Api, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, not {type(body).__name__}")
    check_sampling(api, body)
    try:
        return _materialize(_adapter(api).validate_python(body))
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RequestError(
            f"invalid request: {where}: {first['msg']} ({exc.error_count()} error(s))", param=where
        ) from None


# ---------------------------------------------------------------------------------------------------------------
# Requests -> Conversation


def _text(content: Any, where: str, allowed: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    """Plain text of a content value: a string or a list of text parts; other parts are refused."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    pieces = []
    for part in content:
        kind = part.get("type")
        if kind in allowed:
            pieces.append(part.get("text", ""))
        elif kind in {"thinking", "redacted_thinking", "reasoning"}:
            continue  # earlier reasoning is not shown to the model again
        else:
            raise RequestError(
                f"{where}: content part type {kind!r} is not supported by this server (text only)"
            )
    return "".join(pieces)


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


# Each API's documented range for the sampling values it takes (low, high, whether low itself is allowed); a value
# outside it, not a finite JSON number, or a string ("NaN", "0.5") is a 400 for that request alone.
SAMPLING_RANGES: dict[Api, dict[str, tuple[float, float, bool]]] = {
    "chat.completions": {
        "temperature": (0.0, 2.0, True),
        "top_p": (0.0, 1.0, False),
        "frequency_penalty": (-2.0, 2.0, True),
        "presence_penalty": (-2.0, 2.0, True),
    },
    "responses": {"temperature": (0.0, 2.0, True), "top_p": (0.0, 1.0, False)},
    "messages": {"temperature": (0.0, 1.0, True), "top_p": (0.0, 1.0, False), "top_k": (0.0, 1e9, True)},
}
TOKEN_LIMITS: dict[Api, tuple[str, ...]] = {
    "chat.completions": ("max_tokens", "max_completion_tokens"),
    "responses": ("max_output_tokens",),
    "messages": ("max_tokens",),
}
MAX_TOKEN_LIMIT = 1 << 31


def check_sampling(api: Api, body: dict[str, Any]) -> None:
    """The one rule for sampling values: JSON numbers, finite, in the API's documented range; token limits are
    integers >= 1. Checked on the raw body, before pydantic's lax mode turns "NaN" into a float."""
    for name, (low, high, low_ok) in SAMPLING_RANGES[api].items():
        value = body.get(name)
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if (
            not number
            or not math.isfinite(value)
            or not (low <= value <= high)
            or (value == low and not low_ok)
        ):
            shown = json.dumps(value)[:40] if number or isinstance(value, str) else type(value).__name__
            bound = "[" if low_ok else "("
            raise RequestError(
                f"{name} must be a number in {bound}{low:g}, {high:g}], got {shown}", param=name
            )
    for name in TOKEN_LIMITS[api]:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TOKEN_LIMIT:
            raise RequestError(f"{name} must be an integer >= 1, got {json.dumps(value)[:40]}", param=name)


def _tool(name: str, description: str | None, parameters: dict[str, Any] | None) -> dict[str, Any]:
    """A declared tool as the renderer takes it, whichever API declared it (no parameters: an empty object)."""
    return {
        "name": name,
        "description": description or "",
        "parameters": parameters or {"type": "object", "properties": {}},
    }


def _common(conv: Conversation, params: dict[str, Any], body: dict[str, Any]) -> Conversation:
    conv.temperature = params.get("temperature")
    conv.top_p = params.get("top_p")
    conv.stream = body.get("stream") is True  # `stream` lives in the SDKs' Streaming/NonStreaming subtypes
    return conv


def from_chat_completions(body: Any) -> Conversation:
    params = validate("chat.completions", body)
    messages = [_chat_message(item, f"messages.{index}") for index, item in enumerate(params["messages"])]
    tools = [
        _tool(
            tool["function"]["name"], tool["function"].get("description"), tool["function"].get("parameters")
        )
        for tool in params.get("tools") or []
        if tool.get("type") == "function"
    ]
    stop = params.get("stop")
    conv = Conversation(
        api="chat.completions",
        model=params["model"],
        messages=messages,
        tools=tools if params.get("tool_choice") != "none" else [],
        max_tokens=params.get("max_completion_tokens") or params.get("max_tokens"),
        stop=[stop] if isinstance(stop, str) else list(stop or []),
        include_usage=bool((params.get("stream_options") or {}).get("include_usage")),
    )
    if params.get("n") not in (None, 1):
        raise RequestError("only n=1 is supported", param="n")
    return _common(conv, params, body)


def _chat_message(item: dict[str, Any], where: str) -> Message:
    """One Chat Completions message as ours (`where`: its path in the request, for the error line)."""
    role = item["role"]
    if role in {"system", "developer"}:
        return Message(role="system", content=_text(item["content"], where))
    if role == "user":
        return Message(role="user", content=_text(item["content"], where))
    if role == "assistant":
        calls = [
            ToolCall(
                id=call["id"],
                function=ToolFunction(name=call["function"]["name"], arguments=call["function"]["arguments"]),
            )
            for call in item.get("tool_calls") or []
            if call.get("type", "function") == "function"
        ]
        return Message(role="assistant", content=_text(item.get("content"), where), tool_calls=calls or None)
    if role == "tool":
        return Message(role="tool", content=_text(item["content"], where), tool_call_id=item["tool_call_id"])
    raise RequestError(f"{where}: role {role!r} is not supported", param=f"{where}.role")


def _responses_item(item: dict[str, Any], where: str, messages: list[Message]) -> None:
    """Append one Responses input item to `messages` (a function call joins the assistant turn before it)."""
    kind = item.get("type", "message")
    if kind == "message":
        role = item["role"]
        text = _text(item["content"], where)
        if role in {"system", "developer"}:
            messages.append(Message(role="system", content=text))
        elif role in {"user", "assistant"}:
            messages.append(Message(role=role, content=text))
        else:
            raise RequestError(f"{where}: role {role!r} is not supported", param=f"{where}.role")
    elif kind == "function_call":
        call = ToolCall(
            id=item["call_id"], function=ToolFunction(name=item["name"], arguments=item["arguments"])
        )
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant" and (last.tool_calls or not last.content):
            last.tool_calls = [*(last.tool_calls or []), call]
        else:
            messages.append(Message(role="assistant", content="", tool_calls=[call]))
    elif kind == "function_call_output":
        output = item["output"]
        messages.append(
            Message(
                role="tool",
                content=_text(output, where, ("input_text", "text")),
                tool_call_id=item["call_id"],
            )
        )
    elif kind != "reasoning":
        raise RequestError(f"{where}: input item type {kind!r} is not supported by this server")


def from_responses(body: Any) -> Conversation:
    params = validate("responses", body)
    if params.get("previous_response_id"):
        raise RequestError(
            "previous_response_id is not supported: this server keeps no state; send the whole input",
            param="previous_response_id",
        )
    messages: list[Message] = []
    if params.get("instructions"):
        messages.append(Message(role="system", content=params["instructions"]))
    items = params.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for index, item in enumerate(items or []):
        _responses_item(item, f"input.{index}", messages)
    tools = [
        _tool(tool["name"], tool.get("description"), tool.get("parameters"))
        for tool in params.get("tools") or []
        if tool.get("type") == "function"
    ]
    conv = Conversation(
        api="responses",
        model=params.get("model") or "",
        messages=messages,
        tools=tools if params.get("tool_choice") != "none" else [],
        max_tokens=params.get("max_output_tokens"),
    )
    return _common(conv, params, body)


def _anthropic_assistant(content: list[dict[str, Any]], where: str) -> Message:
    """An assistant turn of content blocks: its text and its `tool_use` blocks (earlier thinking is dropped)."""
    text, calls = [], []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            text.append(block["text"])
        elif kind == "tool_use":
            calls.append(
                ToolCall(
                    id=block["id"],
                    function=ToolFunction(name=block["name"], arguments=_arguments_text(block["input"])),
                )
            )
        elif kind not in {"thinking", "redacted_thinking"}:
            raise RequestError(f"{where}: content block type {kind!r} is not supported by this server")
    return Message(role="assistant", content="".join(text), tool_calls=calls or None)


def _anthropic_user(content: list[dict[str, Any]], where: str) -> list[Message]:
    """A user turn of content blocks: one tool message per `tool_result`, then the text as one user message."""
    messages: list[Message] = []
    pending: list[str] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            pending.append(block["text"])
        elif kind == "tool_result":
            result = block.get("content")
            messages.append(
                Message(role="tool", content=_text(result, where), tool_call_id=block["tool_use_id"])
            )
        else:
            raise RequestError(f"{where}: content block type {kind!r} is not supported by this server")
    if pending:
        messages.append(Message(role="user", content="".join(pending)))
    return messages


def from_messages(body: Any) -> Conversation:
    params = validate("messages", body)
    messages: list[Message] = []
    system = params.get("system")
    if system:
        messages.append(Message(role="system", content=_text(system, "system")))
    for index, item in enumerate(params["messages"]):
        where = f"messages.{index}"
        content = item["content"]
        if isinstance(content, str):
            messages.append(Message(role=item["role"], content=content))
        elif item["role"] == "assistant":
            messages.append(_anthropic_assistant(content, where))
        else:
            messages.extend(_anthropic_user(content, where))
    tools = [
        _tool(tool["name"], tool.get("description"), tool.get("input_schema"))
        for tool in params.get("tools") or []
        if "input_schema" in tool
    ]
    choice = params.get("tool_choice") or {}
    stop = params.get("stop_sequences")
    conv = Conversation(
        api="messages",
        model=params["model"],
        messages=messages,
        tools=tools if choice.get("type") != "none" else [],
        max_tokens=params["max_tokens"],
        stop=list(stop or []),
    )
    return _common(conv, params, body)


PARSERS = {"chat.completions": from_chat_completions, "responses": from_responses, "messages": from_messages}


# ---------------------------------------------------------------------------------------------------------------
# Rendering and parsing with the cookbook renderer


def with_tools(messages: list[Message], tools: list[dict[str, Any]], renderer: Any) -> list[Message]:
    """The conversation as the model sees it: system messages + the renderer's tool block in one system message."""
    if not tools:
        return messages
    system = "\n\n".join(m.content for m in messages if m.role == "system" and isinstance(m.content, str))
    prefix = renderer.create_conversation_prefix_with_tools(tools, system)
    head = [Message(role="system", content=str(m["content"])) for m in prefix]
    return head + [m for m in messages if m.role != "system"]


def parse_reply(
    tokens: list[int], renderer: Any, end_token: int | None, finished: bool
) -> tuple[str, list[ToolCall]]:
    """The reply's text and tool calls (`renderer.parse_response`); a cut-off reply stays plain text."""
    if not finished or end_token is None:
        return renderer.tokenizer.decode(tokens, skip_special_tokens=False), []
    message, _ = renderer.parse_response([*tokens, end_token])
    content = message["content"]
    if isinstance(content, str):
        text = content
    else:
        text = "".join(part["text"] for part in content if part.get("type") == "text")
    calls = []
    for call in message.get("tool_calls") or []:
        calls.append(
            ToolCall(
                id=call.id or new_id("call_"),
                function=ToolFunction(name=call.function.name, arguments=call.function.arguments),
            )
        )
    if calls:
        text = text.strip()
    return text, calls


TOOL_OPEN = "<tool_call>"


def streamable_prefix(text: str) -> int:
    """How much of `text` can be streamed as plain text now: everything before a tool-call block, holding back a
    tail that may be the start of one, and an incomplete UTF-8 character."""
    cut = text.find(TOOL_OPEN)
    if cut >= 0:
        return cut
    end = len(text)
    while end and text[end - 1] == "\ufffd":
        end -= 1
    for size in range(min(len(TOOL_OPEN) - 1, end), 0, -1):
        if text[:end].endswith(TOOL_OPEN[:size]):
            return end - size
    return end
