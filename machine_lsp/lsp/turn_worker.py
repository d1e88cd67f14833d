"""Runs in the turns worker process (see turns.py): builds and keeps the turns of session logs, answers one turn.

Imports only the core (no pygls, no lsprotocol): the process starts in a fraction of a second. Every answer is plain
data or msgspec structs, so it pickles; errors come back as values, not exceptions (TranscriptError's constructor
does not round-trip through pickle).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import msgspec

from machine_lsp.core.schema import Message, text_of
from machine_lsp.core.selection import SelectionError, document_turns, turn_at_line
from machine_lsp.core.transcripts import TranscriptError, TurnList, turn_at

MAX_CHARS = 600
#: A hover shows at most this many messages of the conversation (the last ones): a turn deep in a long session
#: carries thousands, and a hover is a glance, not the log.
MAX_MESSAGES = 20
#: Documents whose turns the worker keeps (the most recently used).
KEEP_DOCUMENTS = 4

_built: OrderedDict[tuple[str, bool], tuple[int | None, TurnList]] = OrderedDict()


class NeedLines(Exception):
    """The worker does not hold this document version: send its lines."""


def render_turn(turn) -> str:
    out = [f"**machine: tagging this {'entry' if turn.source.kind == 'session_log' else 'row'} stores**", ""]
    hidden = len(turn.messages) - MAX_MESSAGES
    if hidden > 0:
        out.append(f"- … {hidden} earlier messages")
    for message in turn.messages[max(0, hidden) :]:
        out.append(f"- **{message.role}**: {_preview(message)}")
    if turn.tags_blocked:
        out += ["", f"⚠ cannot be tagged good: {turn.tags_blocked}"]
    for warning in getattr(turn, "warnings", []) or []:
        out.append(f"⚠ {warning}")
    src = turn.source
    meta = [
        f"{k}: {v}"
        for k, v in (("model", src.model), ("provider", src.provider), ("entry", src.entry_id))
        if v
    ]
    if meta:
        out += ["", " · ".join(meta)]
    return "\n".join(out)


def _preview(message: Message) -> str:
    text = text_of(message)
    if message.tool_calls:
        calls = ", ".join(f"`{c.function.name}`" for c in message.tool_calls)
        text = (text + " " if text else "") + f"[tool calls: {calls}]"
    text = " ".join(text.split())
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "…"


def _error(exc: Exception) -> tuple[Any, ...]:
    if isinstance(exc, TranscriptError):
        return ("transcript", exc.uri, exc.message, exc.line, exc.column)
    if isinstance(exc, SelectionError):
        return ("selection", str(exc))
    return ("unreadable", f"{type(exc).__name__}: {exc}")


def _turns(uri: str, version: int | None, trace: bool, lines: list[str] | None) -> TurnList:
    key = (uri, trace)
    held = _built.get(key)
    if held is not None and held[0] == version and version is not None and lines is None:
        _built.move_to_end(key)
        return held[1]
    if lines is None:
        raise NeedLines
    turns = document_turns(lines, uri, trace=trace)
    _built[key] = (version, turns)
    _built.move_to_end(key)
    while len(_built) > KEEP_DOCUMENTS:
        _built.popitem(last=False)
    return turns


def prepare(uri: str, version: int | None, trace: bool, lines: list[str]) -> int:
    """Build and keep the turns of this version; how many there are."""
    try:
        return len(_turns(uri, version, trace, lines))
    except (TranscriptError, UnicodeError, RecursionError, ValueError):
        return 0


def hover(uri: str, version: int | None, lines: list[str] | None, line: int) -> tuple[Any, ...]:
    """("ok", markdown) or an error tuple for the turn at 1-based `line`."""
    try:
        return ("ok", render_turn(turn_at(_turns(uri, version, False, lines), line)))
    except NeedLines:
        raise
    except (TranscriptError, UnicodeError, RecursionError, ValueError) as exc:
        return _error(exc)


def turn(
    uri: str, version: int | None, trace: bool, lines: list[str] | None, line: int | None
) -> tuple[Any, ...]:
    """("ok", the Turn as msgpack) or an error tuple; `version` None: not an open document (nothing kept)."""
    try:
        if version is None:
            assert lines is not None
            found = turn_at_line(lines, uri, line, trace=trace)
        else:
            found = turn_at(_turns(uri, version, trace, lines), line)
        # A plain list (an adapter may share conversation prefixes between turns), sent as msgpack.
        plain = msgspec.structs.replace(found, messages=list(found.messages), warnings=list(found.warnings))
        return ("ok", msgspec.msgpack.encode(plain))
    except NeedLines:
        raise
    except (TranscriptError, UnicodeError, RecursionError, ValueError) as exc:
        return _error(exc)


def forget(uri: str) -> None:
    for key in [key for key in _built if key[0] == uri]:
        del _built[key]
