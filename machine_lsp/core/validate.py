"""Chat JSONL validator: a pure function from text to findings with exact positions and mechanical fixes.

Design (why it is fast): every line first goes through a *fast path*, a msgspec typed decode into private structs
that encode most rules as types and constraints (roles, non-empty content, `match` values), followed by a few cheap
Python checks. A line the fast path accepts has no findings and no position is ever computed for it. Anything the
fast path rejects goes to the *slow path*, which decodes generically, locates every key and value in the line with
a small span parser, and reports precise findings. The slow path defines the rules; the fast path is only allowed
to accept lines the slow path finds clean (a test checks this).

Conventions: lines and columns are 1-based; columns count Unicode code points of the line (the LSP layer converts to
utf-16 or utf-8). Lines end at "\\n", "\\r\\n" or a lone "\\r" (as editors count them). Blank lines are a warning
(`blank-line`, with a fix that removes them): most JSONL loaders reject them, but they lose no data.
Kind "auto": a row with a non-null `expected` is an eval row, any other row a training row.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

Kind = Literal["train", "eval", "auto"]
Severity = Literal["error", "warning"]

ROLES = ("system", "user", "assistant", "tool")
MATCHES = ("exact", "contains", "regex")
# Roles that other chat formats use, mapped to ours (ShareGPT, Gemini, ...); offered as fixes.
ROLE_SYNONYMS = {
    "human": "user",
    "gpt": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "ai": "assistant",
}

# Beyond this many JSON tokens in one line the span parser gives up and findings cover the whole line, so that a
# pathological 50 MB line of tiny tokens costs seconds, not minutes.
MAX_SPAN_TOKENS = 1_000_000
MAX_JSON_RELOCATE_CHARS = 4_000_000
MAX_UTF8_FINDINGS = 1_000
BINARY_SNIFF_BYTES = 8192


class TextEdit(msgspec.Struct):
    line: int
    column: int
    end_line: int
    end_column: int
    new_text: str


class Fix(msgspec.Struct):
    title: str
    edits: list[TextEdit]


class Finding(msgspec.Struct, omit_defaults=True):
    line: int
    column: int
    end_line: int
    end_column: int
    severity: Severity
    code: str
    message: str
    fix: Fix | None = None


class LineResult(msgspec.Struct, gc=False):
    """What one line contributes: its findings plus what the dataset-level checks need.

    `findings` is a list, or the shared empty tuple for clean lines (no allocation on the hot path). The struct
    never forms reference cycles, hence gc=False: 100k results otherwise trigger costly collections.
    """

    findings: Sequence[Finding]
    fingerprint: int | None = None  # hash of the line text for exact-duplicate detection (same process only)
    prompt_key: str | None = None  # text of the last user message, for train/eval leakage
    width: int = 0  # code points in the line, for whole-line ranges
    row_kind: Literal["train", "eval"] | None = None  # None: blank or not a JSON object
    messages: int = 0

    def at_line(self, line_no: int) -> LineResult:
        """The same result moved to another line (for callers that cache results by line text)."""
        if not self.findings or self.findings[0].line == line_no:
            return self
        return msgspec.structs.replace(self, findings=[_move(f, line_no) for f in self.findings])


class Report(msgspec.Struct):
    file: str
    rows: int
    ok: bool
    findings: list[Finding]
    stats: dict[str, Any]
    eval_report: Report | None = None  # the --eval file's report, when one was given

    @property
    def all_ok(self) -> bool:
        return self.ok and (self.eval_report is None or self.eval_report.ok)


class UnreadableFile(Exception):
    """The input cannot be validated at all (missing, a directory, binary); callers exit 2."""


# ---------------------------------------------------------------------------------------------------------------
# Fast path: types that mirror schema.Message and friends, with the validator's rules as constraints.
# tests/core/test_validate.py checks the field names stay in step with machine_lsp.core.schema.

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


class _Message(msgspec.Struct, gc=False):
    role: Literal["system", "user", "assistant", "tool"]
    content: _NonEmpty | Annotated[list[_Text | _Thinking], msgspec.Meta(min_length=1)]
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class _Row(msgspec.Struct, gc=False):
    messages: Annotated[list[_Message], msgspec.Meta(min_length=1)]
    expected: _NonEmpty | None = None
    match: Literal["exact", "contains", "regex"] = "exact"
    id: str | None = None


class _LooseMessage(msgspec.Struct, gc=False):
    """_Message without the non-empty rule: an assistant message that makes tool calls may have no text."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[_Text | _Thinking]
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class _LooseRow(msgspec.Struct, gc=False):
    messages: Annotated[list[_LooseMessage], msgspec.Meta(min_length=1)]
    expected: _NonEmpty | None = None
    match: Literal["exact", "contains", "regex"] = "exact"
    id: str | None = None


class _PlainText(msgspec.Struct, tag="text", tag_field="type", gc=False):
    text: _NonEmpty


class _PlainThinking(msgspec.Struct, tag="thinking", tag_field="type", gc=False):
    thinking: _NonEmpty


class _PlainMessage(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """The common message: no tools, string content or parts that all have text. A row of these needs no check
    beyond its last role, so the file loop tries it first; anything else (tool calls, a part with empty text,
    unknown keys) takes the full fast path."""

    role: Literal["system", "user", "assistant"]
    content: _NonEmpty | Annotated[list[_PlainText | _PlainThinking], msgspec.Meta(min_length=1)]
    name: str | None = None


class _PlainRow(msgspec.Struct, gc=False):
    messages: Annotated[list[_PlainMessage], msgspec.Meta(min_length=1)]
    expected: _NonEmpty | None = None
    match: Literal["exact", "contains", "regex"] = "exact"
    id: str | None = None


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


def _fast_tools_ok(messages: list[_Message] | list[_LooseMessage]) -> bool:
    seen: set[str] = set()
    any_call = False
    for message in messages:
        if message.tool_calls:
            if message.role != "assistant":
                return False
            for call in message.tool_calls:
                if not _json_ok(call.function.arguments):
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
_CLEAN: tuple[Finding, ...] = ()


def _loose_tool_row(text: str | bytes) -> _LooseRow | None:
    """Rows with tool calls often carry `"content": ""` on the calling assistant message: decode them leniently
    and allow empty content exactly there."""
    try:
        row = _loose_row_decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    for message in row.messages:
        if not message.content and not (message.role == "assistant" and message.tool_calls):
            return None
    return row


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
    elif messages[-1].role == "assistant":
        row_kind = "train"
    else:
        return None
    prompt_key = _fast_prompt_key(messages) if want_prompt else None
    return LineResult(_CLEAN, hash(text), prompt_key, len(text), row_kind, len(messages))


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
    prompt_key = _fast_prompt_key(messages) if want_prompt else None
    return LineResult(_CLEAN, hash(text), prompt_key, len(text), row_kind, len(messages))


# ---------------------------------------------------------------------------------------------------------------
# Slow path: spans of keys and values in one line.


class _Span:
    """A JSON value's [start, end) code-point offsets in the line, with its members' spans."""

    __slots__ = ("start", "end", "keys", "items")

    def __init__(self, start: int) -> None:
        self.start = start
        self.end = start
        self.keys: dict[str, tuple[int, int, _Span]] | None = (
            None  # object: key -> (key start, key end, value)
        )
        self.items: list[_Span] | None = None  # array


_TOKEN = re.compile(
    r'[ \t\r\n]*(?:("[^"\\]*(?:\\.[^"\\]*)*")|([{}\[\]:,])|(-?[0-9][0-9.eE+-]*|true|false|null|-?Infinity|NaN))'
)


class _TooManyTokens(Exception):
    pass


def _spans(text: str) -> _Span | None:
    """Spans of a line already known to be valid JSON; None if it is too big to be worth it."""
    try:
        return _parse_spans(text)
    except (_TooManyTokens, ValueError, IndexError):
        return None


def _parse_spans(text: str) -> _Span:
    # Iterative, so deeply nested input cannot exhaust the Python stack.
    match = _TOKEN.match
    pos = 0
    stack: list[_Span] = []
    pending_key: tuple[int, int, str] | None = None
    root: _Span | None = None
    tokens = 0
    while True:
        tokens += 1
        if tokens > MAX_SPAN_TOKENS:
            raise _TooManyTokens
        m = match(text, pos)
        if m is None:
            raise ValueError("unexpected token")
        string, punct, scalar = m.groups()
        start = m.start(m.lastindex or 0)
        pos = m.end()
        parent = stack[-1] if stack else None
        if punct in (":", ","):
            continue
        if punct in ("}", "]"):
            node = stack.pop()
            node.end = pos
            if not stack:
                return node
            continue
        if parent is not None and parent.keys is not None and pending_key is None:
            # An object member's key.
            assert string is not None
            key = string[1:-1] if "\\" not in string else json.loads(string)
            pending_key = (start, pos, key)
            continue
        node = _Span(start)
        if punct == "{":
            node.keys = {}
        elif punct == "[":
            node.items = []
        else:
            node.end = pos
        if parent is None:
            root = node
        elif parent.keys is not None:
            assert pending_key is not None
            parent.keys[pending_key[2]] = (pending_key[0], pending_key[1], node)
            pending_key = None
        else:
            assert parent.items is not None
            parent.items.append(node)
        if punct in ("{", "["):
            stack.append(node)
        elif not stack:
            assert root is not None
            return root


# ---------------------------------------------------------------------------------------------------------------
# Slow path: the rules, with positions.


class _LineChecker:
    def __init__(self, text: str, line_no: int) -> None:
        self.text = text
        self.line_no = line_no
        self.findings: list[Finding] = []
        body = text.rstrip()
        self.value_start = len(body) - len(body.lstrip())
        self.value_end = len(body)

    def add(
        self,
        code: str,
        message: str,
        start: int,
        end: int,
        severity: Severity = "error",
        fix: Fix | None = None,
    ) -> None:
        end = max(end, start)
        self.findings.append(
            Finding(self.line_no, start + 1, self.line_no, end + 1, severity, code, message, fix)
        )

    def edit(self, start: int, end: int, new_text: str) -> TextEdit:
        return TextEdit(self.line_no, start + 1, self.line_no, end + 1, new_text)

    def whole(self) -> tuple[int, int]:
        return self.value_start, self.value_end


def _span_of(span: _Span | None, default: tuple[int, int]) -> tuple[int, int]:
    return (span.start, span.end) if span is not None else default


def _value_span(span: _Span | None, key: str) -> _Span | None:
    if span is None or span.keys is None:
        return None
    entry = span.keys.get(key)
    return entry[2] if entry else None


def _item_span(span: _Span | None, index: int) -> _Span | None:
    if span is None or span.items is None or index >= len(span.items):
        return None
    return span.items[index]


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _text_of_content(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return None


def _looks_like_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(item, dict) and "role" in item for item in value)
    )


def _slow_check(text: str, line_no: int, kind: Kind) -> LineResult:
    ck = _LineChecker(text, line_no)
    width = len(text)
    try:
        obj = _any_decoder.decode(text)
    except RecursionError:
        ck.add("json-too-deep", "JSON is nested too deeply to be a chat row", *ck.whole())
        return LineResult(ck.findings, None, None, width)
    except msgspec.DecodeError as exc:
        _json_error(ck, exc)
        return LineResult(ck.findings, None, None, width)

    if not isinstance(obj, dict):
        if _looks_like_messages(obj):
            start, end = ck.whole()
            fix = Fix(
                'Wrap the list into {"messages": ...}',
                [ck.edit(end, end, "}"), ck.edit(start, start, '{"messages": ')],
            )
            ck.add(
                "bare-messages",
                'line is a bare list of messages; a row is an object: {"messages": [...]}',
                start,
                end,
                fix=fix,
            )
        else:
            ck.add(
                "not-object",
                f'a row must be a JSON object like {{"messages": [...]}}, not {_describe(obj)}',
                *ck.whole(),
            )
        return LineResult(ck.findings, None, None, width)

    root = _spans(text)
    expected = obj.get("expected")
    is_eval = kind == "eval" or (kind == "auto" and expected is not None)
    row_kind: Literal["train", "eval"] = "eval" if is_eval else "train"
    messages = obj.get("messages")
    prompt_key: str | None = None
    n_messages = 0
    messages_span = _value_span(root, "messages")
    if "messages" not in obj:
        hint = (
            " (this looks like ShareGPT: rename `conversations` and use role/content)"
            if "conversations" in obj
            else ""
        )
        ck.add("messages-missing", f"row has no `messages` key{hint}", *ck.whole())
    elif not isinstance(messages, list):
        ck.add(
            "messages-not-list",
            f"`messages` must be a list of messages, not {_describe(messages)}",
            *_span_of(messages_span, ck.whole()),
        )
    elif not messages:
        ck.add("messages-empty", "`messages` is empty", *_span_of(messages_span, ck.whole()))
    else:
        n_messages = len(messages)
        prompt_key = _check_messages(ck, messages, messages_span, is_eval)

    if is_eval:
        _check_eval_keys(ck, obj, root)
    return LineResult(ck.findings, hash(text), prompt_key, width, row_kind, n_messages)


_JSON_ERROR_POS = re.compile(r"\(byte (\d+)\)")


def _json_error(ck: _LineChecker, exc: msgspec.DecodeError) -> None:
    text = ck.text
    # Python's json gives code-point positions and plain messages; msgspec stays the judge of validity. On huge
    # lines json would build the whole (broken) value first, so take msgspec's byte offset there instead.
    pos: int | None = None
    reason: str | None = None
    if len(text) <= MAX_JSON_RELOCATE_CHARS:
        try:
            json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as err:
            pos, reason = err.pos, err.msg.removesuffix(" starting at")
        except (ValueError, RecursionError):
            pass
    if pos is None:
        pos, reason = _msgspec_error_position(text, str(exc))
    assert reason is not None
    body_end = ck.value_end
    if ck.value_start == body_end:
        ck.add("json-invalid", "line is not JSON", 0, len(text))
        return
    if reason == "Extra data":
        rest = text[pos:body_end]
        if rest == ",":
            ck.add(
                "trailing-comma",
                "trailing comma after the row (JSONL has one object per line, no separators)",
                pos,
                body_end,
                fix=Fix("Remove the trailing comma", [ck.edit(pos, body_end, "")]),
            )
            return
        fix = None
        if _json_ok(rest):
            gap_start = len(text[:pos].rstrip())
            fix = Fix("Split into one row per line", [ck.edit(gap_start, pos, "\n")])
        ck.add("json-trailing-data", "unexpected data after the JSON value", pos, body_end, fix=fix)
        return
    if pos >= body_end:
        ck.add(
            "json-invalid",
            "line ends before the JSON value is complete (unclosed string, list or object?)",
            max(body_end - 1, 0),
            body_end,
        )
        return
    if text[pos] in "]}":
        before = text[:pos].rstrip()
        if before.endswith(","):
            comma = len(before) - 1
            ck.add(
                "trailing-comma",
                f"trailing comma before `{text[pos]}`",
                comma,
                comma + 1,
                fix=Fix("Remove the trailing comma", [ck.edit(comma, comma + 1, "")]),
            )
            return
    ck.add("json-invalid", f"not valid JSON: {reason[:1].lower() + reason[1:]}", pos, pos + 1)


def _msgspec_error_position(text: str, message: str) -> tuple[int, str]:
    """Code-point position and reason of a msgspec decode error (its byte offsets differ by error kind)."""
    reason = message.removeprefix("JSON is malformed: ").split(" (byte")[0]
    if "truncated" in message:
        return len(text), "truncated"
    found = _JSON_ERROR_POS.search(message)
    byte = int(found.group(1)) if found else 0
    if reason == "trailing characters":
        byte, reason = byte - 1, "Extra data"  # msgspec points one past the first trailing character
    prefix = text.encode("utf-8", "surrogatepass")[: max(byte, 0)]
    return len(prefix.decode("utf-8", "ignore")), reason


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _check_messages(ck: _LineChecker, messages: list[Any], span: _Span | None, is_eval: bool) -> str | None:
    tool_ids: set[str] = set()
    any_call = False
    roles: list[str | None] = []
    prompt_key: str | None = None
    whole = _span_of(span, ck.whole())
    for index, message in enumerate(messages):
        mspan = _item_span(span, index)
        mrange = _span_of(mspan, whole)
        if not isinstance(message, dict):
            ck.add(
                "message-not-object",
                f"message {index + 1} must be an object, not {_describe(message)}",
                *mrange,
            )
            roles.append(None)
            continue
        role = _check_role(ck, message, mspan, mrange, index)
        roles.append(role)
        calls = message.get("tool_calls")
        has_calls = isinstance(calls, list) and len(calls) > 0
        # Judge the content by the role the writer meant ("Assistant"), so one typo gives one finding.
        intended = role if role is not None else _suggested_role(message.get("role"))
        _check_content(ck, message, mspan, mrange, index, intended == "assistant" and has_calls)
        if calls is not None:
            ids = _check_tool_calls(ck, calls, _value_span(mspan, "tool_calls"), mrange, index, role)
            tool_ids.update(ids)
            any_call = any_call or has_calls
        for key in ("tool_call_id", "name"):
            value = message.get(key)
            if value is not None and not isinstance(value, str):
                ck.add(
                    "field-type",
                    f"`{key}` of message {index + 1} must be a string, not {_describe(value)}",
                    *_span_of(_value_span(mspan, key), mrange),
                )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id is None:
                if not any_call:
                    ck.add(
                        "tool-unmatched",
                        f"tool message {index + 1} answers no tool call (no assistant tool_calls before it)",
                        *mrange,
                    )
            elif isinstance(call_id, str) and call_id not in tool_ids:
                ck.add(
                    "tool-unmatched",
                    f"tool message {index + 1} answers tool call `{call_id}`, which no earlier assistant message made",
                    *_span_of(_value_span(mspan, "tool_call_id"), mrange),
                )
        if role == "user":
            text = _text_of_content(message.get("content"))
            if text is not None:
                prompt_key = text.strip()

    if all(r is not None for r in roles):
        last_range = _span_of(_item_span(span, len(messages) - 1), whole)
        if is_eval:
            if roles[-1] != "user":
                ck.add(
                    "eval-last-not-user",
                    f"an eval row must end with the user turn the model answers; it ends with `{roles[-1]}`",
                    *last_range,
                )
        elif "assistant" not in roles:
            ck.add("no-assistant", "no assistant message: nothing to train on", *whole)
        elif roles[-1] != "assistant":
            ck.add(
                "last-not-assistant",
                f"a training row must end with an assistant message; it ends with `{roles[-1]}`",
                *last_range,
            )
    return prompt_key


def _check_role(
    ck: _LineChecker, message: dict[str, Any], mspan: _Span | None, mrange: tuple[int, int], index: int
) -> str | None:
    if "role" not in message:
        ck.add("role-missing", f"message {index + 1} has no `role`", *mrange)
        return None
    role = message["role"]
    if role in ROLES:
        return role
    rrange = _span_of(_value_span(mspan, "role"), mrange)
    if not isinstance(role, str):
        ck.add("role-unknown", f"`role` must be a string, not {_describe(role)}", *rrange)
        return None
    wanted = _suggested_role(role)
    fix = None
    hint = ""
    if wanted is not None:
        fix = Fix(f'Change role to "{wanted}"', [ck.edit(*rrange, f'"{wanted}"')])
        hint = f'; did you mean "{wanted}"?'
    ck.add(
        "role-unknown",
        f'unknown role "{role}" (expected system, user, assistant or tool){hint}',
        *rrange,
        fix=fix,
    )
    return None


def _suggested_role(role: Any) -> str | None:
    """The role a misspelt one most likely means ("Assistant", " USER", "gpt"), or None."""
    if not isinstance(role, str):
        return None
    wanted = role.strip().lower()
    wanted = ROLE_SYNONYMS.get(wanted, wanted)
    return wanted if wanted in ROLES else None


def _check_content(
    ck: _LineChecker,
    message: dict[str, Any],
    mspan: _Span | None,
    mrange: tuple[int, int],
    index: int,
    may_be_empty: bool,
) -> None:
    where = f"message {index + 1}"
    if "content" not in message:
        ck.add("content-missing", f"{where} has no `content`", *mrange)
        return
    content = message["content"]
    cspan = _value_span(mspan, "content")
    crange = _span_of(cspan, mrange)
    if isinstance(content, str):
        if not content and not may_be_empty:
            ck.add("content-empty", f"{where} has empty content", *crange)
        return
    if isinstance(content, list):
        any_text = False
        valid = True
        for part_index, part in enumerate(content):
            prange = _span_of(_item_span(cspan, part_index), crange)
            kind = part.get("type") if isinstance(part, dict) else None
            field = {"text": "text", "thinking": "thinking"}.get(kind) if isinstance(kind, str) else None
            if field is None or not isinstance(part.get(field), str):
                valid = False
                ck.add(
                    "content-part-invalid",
                    f'part {part_index + 1} of {where} must be {{"type": "text", "text": ...}} or '
                    '{"type": "thinking", "thinking": ...}',
                    *prange,
                )
            elif part[field]:
                any_text = True
        if valid and not any_text and not may_be_empty:
            ck.add("content-empty", f"{where} has empty content", *crange)
        return
    fix = None
    if content is None and may_be_empty:
        fix = Fix('Replace null with ""', [ck.edit(*crange, '""')])
    ck.add(
        "content-type",
        f"`content` of {where} must be a string or a list of parts, not {_describe(content)}",
        *crange,
        fix=fix,
    )


def _check_tool_calls(
    ck: _LineChecker, calls: Any, span: _Span | None, mrange: tuple[int, int], index: int, role: str | None
) -> list[str]:
    where = f"message {index + 1}"
    crange = _span_of(span, mrange)
    if not isinstance(calls, list):
        ck.add(
            "tool-call-invalid", f"`tool_calls` of {where} must be a list, not {_describe(calls)}", *crange
        )
        return []
    if calls and role is not None and role != "assistant":
        ck.add("tool-call-invalid", f"only assistant messages make tool calls ({where} is `{role}`)", *crange)
    ids: list[str] = []
    for call_index, call in enumerate(calls):
        cspan = _item_span(span, call_index)
        one = _span_of(cspan, crange)
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
            or not isinstance(call.get("type", "function"), str)
        ):
            ck.add(
                "tool-call-invalid",
                f'tool call {call_index + 1} of {where} must look like {{"id": "...", "type": "function", '
                '"function": {"name": "...", "arguments": "<JSON text>"}}',
                *one,
            )
            continue
        ids.append(call["id"])
        if not _json_ok(function["arguments"]):
            arange = _span_of(_value_span(_value_span(cspan, "function"), "arguments"), one)
            ck.add(
                "tool-arguments-json",
                f"`arguments` of tool call {call_index + 1} is not JSON text",
                *arange,
                severity="warning",
            )
    return ids


def _check_eval_keys(ck: _LineChecker, obj: dict[str, Any], root: _Span | None) -> None:
    whole = ck.whole()
    expected = obj.get("expected")
    erange = _span_of(_value_span(root, "expected"), whole)
    if expected is None:
        ck.add(
            "expected-missing", 'eval row has no `expected` answer (e.g. "expected": "answer: 62")', *whole
        )
    elif not isinstance(expected, str):
        ck.add("expected-type", f"`expected` must be a string, not {_describe(expected)}", *erange)
    elif not expected:
        ck.add("expected-empty", "`expected` is empty", *erange)
    match = obj.get("match", "exact")
    mrange = _span_of(_value_span(root, "match"), whole)
    if match not in MATCHES:
        fix = None
        if isinstance(match, str) and match.strip().lower() in MATCHES:
            fix = Fix(
                f'Change match to "{match.strip().lower()}"', [ck.edit(*mrange, f'"{match.strip().lower()}"')]
            )
        shown = f'"{match}"' if isinstance(match, str) else _describe(match)
        ck.add(
            "match-unknown", f"unknown match {shown} (expected exact, contains or regex)", *mrange, fix=fix
        )
    elif match == "regex" and isinstance(expected, str) and expected:
        error = _regex_error(expected)
        if error is not None:
            ck.add("regex-invalid", f"`expected` is not a valid regular expression: {error}", *erange)
    row_id = obj.get("id")
    if row_id is not None and not isinstance(row_id, str):
        ck.add(
            "field-type",
            f"`id` must be a string, not {_describe(row_id)}",
            *_span_of(_value_span(root, "id"), whole),
        )


# ---------------------------------------------------------------------------------------------------------------
# Public per-line and dataset API


def _blank(text: str, line_no: int) -> LineResult:
    fix = Fix("Remove the blank line", [TextEdit(line_no, 1, line_no + 1, 1, "")])
    finding = Finding(line_no, 1, line_no, len(text) + 1, "warning", "blank-line", "blank line", fix)
    return LineResult([finding], None, None, len(text))


def check_line(text: str, line_no: int, kind: Kind = "auto") -> LineResult:
    """Findings of one line (no line break in `text`). Pure: the result depends only on the arguments."""
    if line_no == 1 and text.startswith("\ufeff"):
        inner = check_line(text[1:], 1, kind)
        findings = [_shift_bom(f) for f in inner.findings] + [_BOM_FINDING]
        return msgspec.structs.replace(inner, findings=findings, width=inner.width + 1)
    if not text or text.isspace():
        return _blank(text, line_no)
    fast = _plain_check(text, kind, True) or _fast_check(text, kind)
    if fast is not None:
        return fast
    return _slow_check(text, line_no, kind)


def check_lines(
    lines: Sequence[str],
    kind: Kind = "auto",
    start_line: int = 1,
    *,
    fallback: Callable[[str, int, Kind], LineResult] | None = None,
) -> list[LineResult]:
    """check_line for many lines at once: `[check_line(text, start_line + i, kind) for i, text in ...]`, field for
    field, at close to the speed of validate_text. Clean plain rows (most rows) are accepted by the file pass's
    batched decode, driven from C; every other line goes to `fallback(text, line_no, kind)` (default check_line),
    so a caller with its own per-line rule (the language server numbers every cached line 1) can pass it.
    tests/core/test_validate_fuzz.py checks the equivalence."""
    slow = check_line if fallback is None else fallback
    out: list[LineResult] = []
    total = len(lines)
    for start in range(0, total, _BATCH):
        batch = lines if total <= _BATCH else lines[start : start + _BATCH]
        rows, messages, other, clean_eval = _accept_batch(batch, kind)
        if clean_eval:
            force_eval = kind == "eval"
            kinds: Any = ["eval" if force_eval or row.expected is not None else "train" for row in rows]
        else:
            kinds = itertools.repeat("train")
        results = list(
            map(
                LineResult,
                itertools.repeat(_CLEAN),
                map(hash, batch),
                _batch_prompt_keys(messages, clean_eval),
                map(len, batch),
                kinds,
                map(len, messages),
            )
        )
        first = start_line + start
        for index in other:
            results[index] = slow(batch[index], first + index, kind)
        out += results
    return out


def dataset_findings(
    lines: Sequence[LineResult | None],
    other_prompts: set[str] | None = None,
    *,
    other_name: str = "the other file",
) -> list[Finding]:
    """Findings across rows: exact duplicate rows and user prompts also present in the other (train/eval) file.

    `lines[i]` is the result for line i + 1, or None for a line not checked yet.
    """
    first_of: dict[int, int] = {}
    duplicates: list[tuple[int, int]] = []
    leaks: list[int] = []
    for index, result in enumerate(lines):
        if result is None or result.fingerprint is None:
            continue
        first = first_of.setdefault(result.fingerprint, index)
        if first != index:
            duplicates.append((index, first))
        if other_prompts and result.prompt_key and result.prompt_key in other_prompts:
            leaks.append(index)

    def width_of(index: int) -> int:
        result = lines[index]
        return result.width if result is not None else 0

    findings = _dataset_findings_of(duplicates, leaks, width_of, other_name)
    findings.sort(key=lambda f: (f.line, f.code))
    return findings


def _dataset_findings_of(
    duplicates: Sequence[tuple[int, int]],
    leaks: Sequence[int],
    width_of: Callable[[int], int],
    other_name: str,
) -> list[Finding]:
    """Findings for (0-based) duplicate lines with their first occurrence, and leaking lines; whole-line ranges."""
    findings: list[Finding] = []
    for index, first in duplicates:
        line_no = index + 1
        width = width_of(index)
        # Remove "\n<row>" from the end of the previous line: valid whether or not a newline follows.
        edit = TextEdit(line_no - 1, width_of(index - 1) + 1, line_no, width + 1, "")
        findings.append(
            Finding(
                line_no,
                1,
                line_no,
                width + 1,
                "warning",
                "duplicate-row",
                f"exact duplicate of line {first + 1}",
                Fix("Remove the duplicate row", [edit]),
            )
        )
    for index in leaks:
        findings.append(
            Finding(
                index + 1,
                1,
                index + 1,
                width_of(index) + 1,
                "error",
                "train-eval-leak",
                f"the same user prompt is in {other_name}: evaluation would measure memorisation",
            )
        )
    return findings


def _split_lines(text: str) -> list[str]:
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


class _Pass:
    """One pass over a file's lines: findings, stats and what the dataset-level checks need."""

    def __init__(self, file: str, byte_count: int, lines: Sequence[str] | Sequence[bytes], bom: bool) -> None:
        self.file = file
        self.byte_count = byte_count
        self.lines = lines  # str, or UTF-8 bytes (decoded only where a position is needed)
        self.bom = bom
        self.findings: list[Finding] = []
        self.not_rows: set[int] = set()  # indices of lines that are not JSON objects (never duplicates)
        self.prompts: list[tuple[int, str]] = []  # (line index, prompt key), when wanted
        self.train_rows = 0
        self.eval_rows = 0
        self.messages = 0
        self.seconds = 0.0

    def prompt_keys(self) -> set[str]:
        return {key for _, key in self.prompts}

    def width_of(self, index: int) -> int:
        line = self.lines[index]
        return len(line.decode("utf-8", "surrogateescape")) if type(line) is bytes else len(line)

    def duplicates(self) -> list[tuple[int, int]]:
        """(index, index of the first identical line) for rows that repeat an earlier row exactly."""
        lines = self.lines
        if len(set(lines)) == len(lines):  # one pass in C; the common case has no duplicates at all
            return []
        first_of: dict[Any, int] = {}
        found: list[tuple[int, int]] = []
        for index, line in enumerate(lines):
            if index in self.not_rows:
                continue
            first = first_of.setdefault(line, index)
            if first != index:
                found.append((index, first))
        return found


_BOM_FINDING = Finding(
    1,
    1,
    1,
    2,
    "error",
    "bom",
    "file starts with a byte-order mark (BOM); JSON loaders reject it",
    Fix("Remove the byte-order mark", [TextEdit(1, 1, 1, 2, "")]),
)


def _fast_eval_ok(row: _Row | _PlainRow) -> bool:
    expected = row.expected
    return (
        expected is not None
        and row.messages[-1].role == "user"
        and (row.match != "regex" or _regex_error(expected) is None)
    )


# Lines per batch of the file loop: large enough that per-batch costs vanish, small enough that the decoded rows of
# one batch stay in cache and their memory is reused by the next (decoding a whole file at once is ~2x slower).
_BATCH = 200
_PROGRESS_EVERY = 5000  # a multiple of _BATCH
_messages_of = operator.attrgetter("messages")
_expected_of = operator.attrgetter("expected")
_PLACEHOLDER = _PlainRow([_PlainMessage("assistant", "-")])  # stands for a line the batch decode rejected


def _check_lines(
    run: _Pass,
    kind: Kind,
    progress: Callable[[int, int], None] | None,
    want_prompts: bool,
) -> None:
    """Check every line of `run`, a batch at a time (see _check_batch)."""
    lines = run.lines
    total = len(lines)
    for start in range(0, total, _BATCH):
        _check_batch(
            run, lines if total <= _BATCH else lines[start : start + _BATCH], start, kind, want_prompts
        )
        done = min(start + _BATCH, total)
        if progress is not None and (done % _PROGRESS_EVERY == 0 or done == total):
            progress(done, total)
    if progress is not None and total == 0:
        progress(0, 0)


_second_last = operator.itemgetter(-2)
_role_of = operator.attrgetter("role")
_content_of = operator.attrgetter("content")


def _batch_prompt_keys(messages: list[list[_PlainMessage]], clean_eval: int) -> list[str | None]:
    """_fast_prompt_key of each row of a batch of training rows. The common shape, a user message with string
    content right before the final assistant message, is read from C; any other batch goes row by row. Keys of
    rows the batch did not accept are never used."""
    if not clean_eval:
        try:
            before_last = list(map(_second_last, messages))
            if list(map(_role_of, before_last)).count("user") == len(before_last):
                return list(map(str.strip, map(_content_of, before_last)))
        except (IndexError, TypeError):  # a one-message row (or placeholder), or content parts
            pass
    return list(map(_fast_prompt_key, messages))


def _accept_batch(
    lines: Sequence[str] | Sequence[bytes], kind: Kind
) -> tuple[list[_PlainRow], list[list[_PlainMessage]], list[int], int]:
    """The batched plain-row shortcut (see _check_batch): the decoded rows (_PLACEHOLDER where the decode failed),
    their messages, the sorted indices of the lines it does not accept, and how many accepted rows are eval rows.
    A line it accepts is one _plain_check accepts: clean, with no findings."""
    rows: list[_PlainRow] = []
    failed: list[int] = []
    decoded = map(_plain_row_decoder.decode, lines)
    while True:
        try:
            rows.extend(decoded)
            break
        except (msgspec.DecodeError, RecursionError):
            failed.append(len(rows))
            rows.append(_PLACEHOLDER)
    count = len(rows)
    messages = list(map(_messages_of, rows))
    if kind == "train" or (kind == "auto" and not any(map(_expected_of, rows))):
        # Training rows only (`expected` is a non-empty string or None; placeholders have None): each must end
        # with an assistant message.
        lasts = [row_messages[-1].role for row_messages in messages]
        if lasts.count("assistant") == count:
            other = failed  # the placeholder ends with an assistant message
        else:
            other = sorted(failed + [index for index, role in enumerate(lasts) if role != "assistant"])
        clean_eval = 0
    else:
        other = []
        clean_eval = 0
        force_eval = kind == "eval"
        for index, row in enumerate(rows):
            if row is _PLACEHOLDER:
                other.append(index)
            elif force_eval or row.expected is not None:
                if _fast_eval_ok(row):
                    clean_eval += 1
                else:
                    other.append(index)
            elif messages[index][-1].role != "assistant":
                other.append(index)
    return rows, messages, other, clean_eval


def _check_batch(
    run: _Pass, lines: Sequence[str] | Sequence[bytes], start: int, kind: Kind, want_prompts: bool
) -> None:
    """Plain rows (no tools, contents that are non-empty strings or parts with text: most rows) are accepted with
    one typed decode and a last-role check, because this loop is the hot spot of a full validation (see
    bench/validate.py). The decodes run from C, with no Python code per line: `map` decodes every line of the
    batch, and when a line fails to decode `list.extend` keeps the rows before it (CPython appends as it goes), so
    the failing line's index is the length of the list; the loop resumes after it. The `expected` values and last
    roles are then checked for the whole batch at once. Any line not accepted goes through check_line's parts; tests/core/test_validate_fuzz.py
    checks that both give the same findings."""
    rows, messages, other, clean_eval = _accept_batch(lines, kind)
    count = len(rows)
    clean = count - len(other)
    run.train_rows += clean - clean_eval
    run.eval_rows += clean_eval
    run.messages += sum(map(len, messages)) - sum(len(messages[index]) for index in other)
    if want_prompts:
        skip = set(other)
        prompts = run.prompts
        for index, row_messages in enumerate(messages):
            if index not in skip:
                key = _fast_prompt_key(row_messages)
                if key:
                    prompts.append((start + index, key))
    for index in other:
        line = lines[index]
        line_index = start + index
        _record(
            run, line_index, _check_other_line(run, line, line_index + 1, kind, want_prompts), want_prompts
        )


def _record(run: _Pass, index: int, result: LineResult, want_prompts: bool) -> None:
    run.findings.extend(result.findings)
    if result.row_kind == "train":
        run.train_rows += 1
    elif result.row_kind == "eval":
        run.eval_rows += 1
    if result.fingerprint is None:
        run.not_rows.add(index)
    if want_prompts and result.prompt_key:
        run.prompts.append((index, result.prompt_key))
    run.messages += result.messages


def _check_other_line(
    run: _Pass, line: str | bytes, line_no: int, kind: Kind, want_prompts: bool
) -> LineResult:
    """A line the inline fast path did not accept: a lenient tool-call row, a blank line, or the slow path."""
    result = _fast_check(line, kind, want_prompts)
    if result is not None:
        return result
    if type(line) is bytes:
        text, bad_bytes = _decode_line(line, line_no)
        run.findings.extend(bad_bytes)
    else:
        text = line
    if not text or text.isspace():
        return _blank(text, line_no)
    return _slow_check(text, line_no, kind)


def _text_pass(
    text: str,
    kind: Kind,
    file: str,
    progress: Callable[[int, int], None] | None = None,
    want_prompts: bool = True,
) -> _Pass:
    started = time.perf_counter()
    byte_count = len(text.encode("utf-8", "surrogatepass"))
    bom = text.startswith("\ufeff")
    if bom:
        text = text[1:]
    lines = _split_lines(text)
    run = _Pass(file, byte_count, lines, bom)
    _check_lines(run, kind, progress, want_prompts)
    if lines and not text.endswith(("\n", "\r")) and lines[-1].isspace():
        run.findings = [_fix_last_blank(f, run, len(lines)) for f in run.findings]
    run.seconds = time.perf_counter() - started
    return run


def _bytes_pass(
    data: bytes,
    kind: Kind,
    file: str,
    progress: Callable[[int, int], None] | None = None,
    want_prompts: bool = True,
) -> _Pass:
    started = time.perf_counter()
    check_binary(data, file)
    byte_count = len(data)
    bom = data.startswith(b"\xef\xbb\xbf")
    if bom:
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = data.split(b"\n")
    ends_with_newline = lines[-1] == b""
    if ends_with_newline:
        lines.pop()
    run = _Pass(file, byte_count, lines, bom)
    _check_lines(run, kind, progress, want_prompts)
    if lines and not ends_with_newline and lines[-1].isspace():
        run.findings = [_fix_last_blank(f, run, len(lines)) for f in run.findings]
    run.seconds = time.perf_counter() - started
    return run


def _finish(run: _Pass, other_prompts: set[str] | None, other_name: str) -> Report:
    started = time.perf_counter()
    leaks = [index for index, key in run.prompts if key in other_prompts] if other_prompts else []
    findings = run.findings + _dataset_findings_of(run.duplicates(), leaks, run.width_of, other_name)
    if run.bom:
        findings = [_shift_bom(f) for f in findings]
        findings.append(_BOM_FINDING)
    findings.sort(key=lambda f: (f.line, f.column, f.code))
    seconds = run.seconds + time.perf_counter() - started
    errors = sum(1 for f in findings if f.severity == "error")
    stats: dict[str, Any] = {
        "lines": len(run.lines),
        "train_rows": run.train_rows,
        "eval_rows": run.eval_rows,
        "messages": run.messages,
        "errors": errors,
        "warnings": len(findings) - errors,
        "bytes": run.byte_count,
        "seconds": round(seconds, 4),
        "mb_per_s": round(run.byte_count / 1e6 / seconds, 1) if seconds > 0 else None,
    }
    rows = run.train_rows + run.eval_rows
    return Report(file=run.file, rows=rows, ok=errors == 0, findings=findings, stats=stats)


def prompt_keys(text: str, kind: Kind = "auto") -> set[str]:
    """User prompts of every row of a file, for leakage checks against it."""
    return _text_pass(text, kind, "<text>").prompt_keys()


def _paired_prompts(other: str | None, other_prompts: set[str] | None, kind: Kind) -> set[str] | None:
    """The paired train/eval file's user prompts, for leakage: given, derived from its text, or None."""
    if other is not None and other_prompts is None:
        return prompt_keys(other, "train" if kind == "eval" else "auto")
    return other_prompts


def validate_text(
    text: str,
    kind: Kind = "auto",
    other: str | None = None,
    *,
    file: str = "<text>",
    other_prompts: set[str] | None = None,
    other_name: str = "the other file",
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Validate a whole JSONL text. `other` (or `other_prompts`) is the paired train/eval file, for leakage."""
    other_prompts = _paired_prompts(other, other_prompts, kind)
    run = _text_pass(text, kind, file, progress, want_prompts=other_prompts is not None)
    return _finish(run, other_prompts, other_name)


def _shift_bom(finding: Finding) -> Finding:
    """Line 1 was checked without its BOM; in the file the BOM is code point 1, so shift line-1 columns by one."""
    if finding.line != 1:
        return finding
    fix = finding.fix
    if fix is not None:
        edits = [
            msgspec.structs.replace(
                e,
                column=e.column + (e.line == 1),
                end_column=e.end_column + (e.end_line == 1),
            )
            for e in fix.edits
        ]
        fix = Fix(fix.title, edits)
    end_shift = 1 if finding.end_line == 1 else 0
    return msgspec.structs.replace(
        finding, column=finding.column + 1, end_column=finding.end_column + end_shift, fix=fix
    )


def _fix_last_blank(finding: Finding, run: _Pass, count: int) -> Finding:
    """A whitespace-only last line without a newline: remove it from the end of the previous line instead."""
    if finding.code != "blank-line" or finding.line != count or count < 2:
        return finding
    edit = TextEdit(count - 1, run.width_of(count - 2) + 1, count, finding.end_column, "")
    return msgspec.structs.replace(finding, fix=Fix("Remove the blank line", [edit]))


def _move(finding: Finding, line_no: int) -> Finding:
    delta = line_no - finding.line
    fix = finding.fix
    if fix is not None:
        fix = Fix(
            fix.title,
            [msgspec.structs.replace(e, line=e.line + delta, end_line=e.end_line + delta) for e in fix.edits],
        )
    return msgspec.structs.replace(
        finding, line=finding.line + delta, end_line=finding.end_line + delta, fix=fix
    )


# ---------------------------------------------------------------------------------------------------------------
# Bytes and files


_SURROGATES = re.compile("[\udc80-\udcff]+")


def _decode_line(raw: bytes, line_no: int) -> tuple[str, list[Finding]]:
    """Text of one line; each run of invalid UTF-8 bytes becomes U+FFFD (one per byte, so columns stay put) and
    a finding at its exact position."""
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    text = raw.decode("utf-8", "surrogateescape")
    findings: list[Finding] = []
    for found in _SURROGATES.finditer(text):
        if len(findings) >= MAX_UTF8_FINDINGS:
            break
        shown = found.group().encode("utf-8", "surrogateescape").hex(" ")
        findings.append(
            Finding(
                line_no,
                found.start() + 1,
                line_no,
                found.end() + 1,
                "error",
                "invalid-utf8",
                f"bytes {shown} are not valid UTF-8 (save the file as UTF-8)",
            )
        )
    return _SURROGATES.sub(lambda m: "\ufffd" * len(m.group()), text), findings


def check_binary(data: bytes, name: str) -> None:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UnreadableFile(f"{name}: is UTF-16 text; save it as UTF-8 (JSONL is UTF-8)")
    nul = data.find(b"\x00", 0, BINARY_SNIFF_BYTES)
    if nul >= 0:
        raise UnreadableFile(f"{name}: looks like a binary file (NUL byte at offset {nul}), not UTF-8 JSONL")


def validate_bytes(
    data: bytes,
    kind: Kind = "auto",
    other: str | None = None,
    *,
    file: str = "<bytes>",
    other_prompts: set[str] | None = None,
    other_name: str = "the other file",
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Validate raw file bytes: BOM, invalid UTF-8 (each a finding, nothing dropped), CRLF; binary data raises."""
    other_prompts = _paired_prompts(other, other_prompts, kind)
    run = _bytes_pass(data, kind, file, progress, want_prompts=other_prompts is not None)
    return _finish(run, other_prompts, other_name)


def read_input(path: str | Path) -> bytes:
    """The bytes of a file to validate, or UnreadableFile with a message a person understands."""
    p = Path(path)
    try:
        if p.is_dir():
            raise UnreadableFile(f"{p}: is a directory, not a JSONL file")
        from machine_lsp.core.safe_files import read_regular

        data = read_regular(p)  # a FIFO or /dev/zero is refused, never read until it blocks or fills memory
    except FileNotFoundError:
        raise UnreadableFile(f"{p}: no such file") from None
    except PermissionError:
        raise UnreadableFile(f"{p}: permission denied") from None
    except IsADirectoryError:
        raise UnreadableFile(f"{p}: is a directory, not a JSONL file") from None
    except OSError as exc:
        raise UnreadableFile(f"{p}: cannot be read ({exc.strerror or exc})") from None
    check_binary(data, str(p))
    return data


def validate_path(
    path: str | Path,
    eval_path: str | Path | None = None,
    kind: Kind = "auto",
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Validate a file, and its eval file (checked as kind "eval") with train/eval leakage flagged in both."""
    data = read_input(path)
    eval_data = read_input(eval_path) if eval_path is not None else None
    run = _bytes_pass(data, kind, str(path), progress, want_prompts=eval_data is not None)
    if eval_data is None:
        return _finish(run, None, "")
    eval_run = _bytes_pass(eval_data, "eval", str(eval_path))
    report = _finish(run, eval_run.prompt_keys(), str(eval_path))
    report.eval_report = _finish(eval_run, run.prompt_keys(), str(path))
    return report
