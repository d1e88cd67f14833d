"""The fast path: msgspec typed decodes whose types and constraints encode most rules, plus a few cheap checks.

A line the fast path accepts has no findings; anything it rejects goes to the slow path (rules.py), which
defines the rules. tests/core/test_validate.py checks the structs stay in step with machine_lsp.core.schema."""

from __future__ import annotations

import functools
import re
from typing import Annotated, Generic, Literal, TypeVar

import msgspec

from machine_lsp.core.validate.findings import _CLEAN, Kind, LineResult

ROLES = ("system", "developer", "user", "assistant", "tool")


MATCHES = ("exact", "contains", "regex")


_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class _Text(msgspec.Struct, tag="text", tag_field="type", gc=False):
    text: str


class _Thinking(msgspec.Struct, tag="thinking", tag_field="type", gc=False):
    thinking: str


class _Function(msgspec.Struct, gc=False):
    name: str
    arguments: str


class _ToolCall(msgspec.Struct, gc=False):
    id: str
    function: _Function
    type: str = "function"


M = TypeVar("M")


class _Message(msgspec.Struct, gc=False):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: _NonEmpty | Annotated[list[_Text | _Thinking], msgspec.Meta(min_length=1)]
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    weight: Literal[0, 1] | None = None
    trainable: bool | None = None
    function_call: None = None  # the legacy key: any value sends the row to the slow path's message


class _ToolSpec(msgspec.Struct, gc=False):
    name: _NonEmpty
    description: str = ""
    parameters: dict = {}


class _Tool(msgspec.Struct, gc=False):
    """An OpenAI tool definition, as the cookbook's `openai_tools_to_tinker` reads it."""

    type: Literal["function"]
    function: _ToolSpec


# Row keys other trainers use that the fast path checks (the slow path has the messages): `tools` must be tool
# definitions, and the legacy `functions` sends the row to the slow path.
_Tools = list[_Tool] | None


class _LooseMessage(_Message, gc=False):
    """_Message without the non-empty rule: an assistant message that makes tool calls may have no text."""

    content: str | list[_Text | _Thinking] | None = None  # missing or null: only with tool calls (checked)


class _RowOf(msgspec.Struct, Generic[M], gc=False):
    """A chat row whose messages are `M`s (`_Message`; `_LooseMessage` for a row that makes tool calls;
    `_PlainMessage`, the common row the file loop tries first)."""

    messages: Annotated[list[M], msgspec.Meta(min_length=1)]
    expected: _NonEmpty | None = None
    match: Literal["exact", "contains", "regex"] = "exact"
    id: str | None = None
    tools: _Tools = None
    functions: None = None


_Row = _RowOf[_Message]
_LooseRow = _RowOf[_LooseMessage]


class _PlainText(msgspec.Struct, tag="text", tag_field="type", gc=False):
    text: _NonEmpty


class _PlainThinking(msgspec.Struct, tag="thinking", tag_field="type", gc=False):
    thinking: _NonEmpty


class _PlainMessage(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """The common message: no tools, string content or parts that all have text. A row of these needs no check
    beyond its last role, so the file loop tries it first; anything else (tool calls, a part with empty text,
    unknown keys) takes the full fast path."""

    role: Literal["system", "developer", "user", "assistant"]
    content: _NonEmpty | Annotated[list[_PlainText | _PlainThinking], msgspec.Meta(min_length=1)]
    name: str | None = None


_PlainRow = _RowOf[_PlainMessage]


_plain_row_decoder = msgspec.json.Decoder(_PlainRow)


_row_decoder = msgspec.json.Decoder(_Row)


_loose_row_decoder = msgspec.json.Decoder(_LooseRow)


_any_decoder = msgspec.json.Decoder()


@functools.lru_cache(maxsize=4096)
def _regex_error(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return str(exc)
    return None


def _json_ok(text: str) -> bool:
    try:
        _any_decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return False
    return True


def _arguments_ok(arguments: str) -> bool:
    """JSON text, and not JSON text of a string that itself holds JSON (double-encoded arguments)."""
    try:
        value = _any_decoder.decode(arguments)
    except (msgspec.DecodeError, RecursionError):
        return False
    return type(value) is not str or not _double_encoded(value)


def _double_encoded(value: str) -> bool:
    """A string that is itself the JSON text of an object or list (arguments encoded twice)."""
    text = value.strip()
    if not text.startswith(("{", "[")):
        return False
    return _json_ok(text)


def _fast_tools_ok(messages: list[_Message] | list[_LooseMessage]) -> bool:
    seen: set[str] = set()
    any_call = False
    open_calls = False  # the last assistant message made calls and only tool messages followed it
    for message in messages:
        if open_calls and message.role not in ("tool", "assistant"):
            return (
                False  # something between calls and results: the rules judge whether they were all answered
            )
        if message.role != "tool":
            open_calls = bool(message.tool_calls)
        if message.tool_calls:
            if message.role != "assistant":
                return False
            for call in message.tool_calls:
                if not _arguments_ok(call.function.arguments):
                    return False
                seen.add(call.id)
            any_call = True
        if message.role == "tool":
            if message.tool_call_id is None:
                if not any_call:
                    return False
            elif message.tool_call_id not in seen:
                return False
    return True


def _fast_parts_ok(messages: list[_Message] | list[_LooseMessage]) -> bool:
    for message in messages:
        content = message.content
        if message.weight is not None and message.role != "assistant":
            return False  # a warning: weight is read on assistant messages only
        if type(content) is list and not any(
            (part.text if type(part) is _Text else part.thinking) for part in content
        ):
            return False
    return True


def _fast_prompt_key(messages: list[_Message] | list[_LooseMessage] | list[_PlainMessage]) -> str | None:
    for message in reversed(messages):
        if message.role == "user":
            content = message.content
            if type(content) is str:
                return content.strip()
            return "".join(part.text for part in content if type(part) in _TEXT_PARTS).strip()
    return None


_TEXT_PARTS = (_Text, _PlainText)


def _loose_tool_row(text: str | bytes) -> _LooseRow | None:
    """Rows with tool calls often carry `"content": ""` on the calling assistant message: decode them leniently
    and allow empty content exactly there."""
    try:
        row = _loose_row_decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    for message in row.messages:
        if (
            not message.content
            and not (message.role == "assistant" and message.tool_calls)
            and not (message.role == "tool" and message.content == "")  # a command that printed nothing
        ):
            return None
    return row


def _trained_has_prompt(messages: list[_Message] | list[_LooseMessage]) -> bool:
    """Whether a user message comes before the last assistant message that is trained (not `weight` 0 or
    `trainable` false): a trained answer that nothing asked for is an error of the slow path."""
    prompted = False
    ok = True
    for message in messages:
        role = message.role
        if role == "user":
            prompted = True
        elif role == "assistant" and message.weight != 0 and message.trainable is not False:
            ok = prompted
    return ok


def _plain_check(text: str | bytes, kind: Kind, want_prompt: bool) -> LineResult | None:
    """The file loop's plain-row shortcut (see _check_lines) as a LineResult, for check_line."""
    try:
        row = _plain_row_decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    messages = row.messages
    if kind == "eval" or (kind == "auto" and row.expected is not None):
        if not _fast_eval_ok(row):
            return None
        row_kind: Literal["train", "eval"] = "eval"
    elif messages[-1].role == "assistant" and has_user(messages):
        row_kind = "train"
    else:
        return None
    prompt_key = _fast_prompt_key(messages) if want_prompt else None
    return LineResult(_CLEAN, hash(text), prompt_key, len(text), row_kind, len(messages))


def has_user(messages: list[_PlainMessage]) -> bool:
    """A plain row (no weights: every assistant message is trained) that ends with an assistant message needs a
    user message before it; most rows start with one, so the loop runs only for the others."""
    return messages[0].role == "user" or any(message.role == "user" for message in messages)


def _fast_check(text: str | bytes, kind: Kind, want_prompt: bool = True) -> LineResult | None:
    """A clean LineResult, or None when the line needs the precise slow path.

    `text` may be the line's UTF-8 bytes (msgspec validates the encoding); then `width` is a byte count, which
    the file pass never uses (it measures lines with _Pass.width_of).
    """
    row: _Row | _LooseRow | None
    if ('"tool_calls"' if type(text) is str else b'"tool_calls"') in text:
        # The lenient decode accepts every row the strict one does (and checks the rest), so it alone decides.
        row = _loose_tool_row(text)
    else:
        try:
            row = _row_decoder.decode(text)
        except (msgspec.DecodeError, RecursionError):
            row = None
    if row is None:
        return None
    messages = row.messages
    if kind == "eval" or (kind == "auto" and row.expected is not None):
        if row.expected is None or messages[-1].role != "user":
            return None
        if row.match == "regex" and _regex_error(row.expected) is not None:
            return None
        row_kind: Literal["train", "eval"] = "eval"
    else:
        if messages[-1].role != "assistant":
            return None
        row_kind = "train"
    # Structural checks, not substring guards: keys and roles may be written with JSON escapes ("\u0074ool").
    if not _fast_tools_ok(messages) or not _fast_parts_ok(messages):
        return None
    if row_kind == "train" and not _trained_has_prompt(messages):
        return None
    prompt_key = _fast_prompt_key(messages) if want_prompt else None
    return LineResult(_CLEAN, hash(text), prompt_key, len(text), row_kind, len(messages))


def _fast_eval_ok(row: _Row | _PlainRow) -> bool:
    expected = row.expected
    return (
        expected is not None
        and row.messages[-1].role == "user"
        and (row.match != "regex" or _regex_error(expected) is None)
    )
