"""The slow path's span parser: [start, end) code-point offsets of every key and value in one JSON line."""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

# Beyond this many JSON tokens in one line the span parser gives up and findings cover the whole line, so that a
# pathological 50 MB line of tiny tokens costs seconds, not minutes.
MAX_SPAN_TOKENS = 1_000_000


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
        node = _new_span(start, pos, punct)
        if parent is not None:
            _attach(parent, node, pending_key)
            pending_key = None
        if punct in ("{", "["):
            stack.append(node)
        elif parent is None:  # a scalar alone on the line
            return node


def _new_span(start: int, end: int, punct: str | None) -> _Span:
    """An object or list opening at `start` (ended by its closing bracket), or a scalar ending at `end`."""
    node = _Span(start)
    if punct == "{":
        node.keys = {}
    elif punct == "[":
        node.items = []
    else:
        node.end = end
    return node


def _attach(parent: _Span, node: _Span, pending_key: tuple[int, int, str] | None) -> None:
    if parent.keys is not None:
        assert pending_key is not None
        parent.keys[pending_key[2]] = (pending_key[0], pending_key[1], node)
    else:
        assert parent.items is not None
        parent.items.append(node)


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


class MessageAt(NamedTuple):
    """A message being checked and where it stands: its span (None when the line has none), the range a finding
    on the whole message covers, and its index in the row."""

    message: dict[str, Any]
    span: _Span | None
    range: tuple[int, int]
    index: int

    @property
    def name(self) -> str:
        return f"message {self.index + 1}"

    def value_range(self, key: str) -> tuple[int, int]:
        """The range of `key`'s value, else the whole message's."""
        return _span_of(_value_span(self.span, key), self.range)
