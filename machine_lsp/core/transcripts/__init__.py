"""Transcript adapters: a conversation file -> the assistant turns in it that can be tagged; and the registry of
them, ADAPTERS, which everything that names a harness or a log format iterates (sessions, selection, sniff, the
CLI's and the editor's harness lists).

A file is read by the first adapter whose sniffer claims its first few non-blank lines (an adapter's
`sniff_lines`, else `sniff` on the first line); chat JSONL (`{"messages": [...]}` per line) is the fallback. A file
none of them claims, whose first lines are objects without `messages`, gets one message naming what it looks like
and what is supported instead of an error on every line. Another harness's log becomes readable by adding its
adapter module and one line to ADAPTERS (CONTRIBUTING.md walks through it).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from machine_lsp.core.lines import normalize_line_ends
from machine_lsp.core.safe_files import read_regular, unreadable_reason
from machine_lsp.core.transcripts.base import SNIFF_LINES, TranscriptAdapter, TranscriptError, Turn, TurnList
from machine_lsp.core.transcripts.captured import CapturedAdapter
from machine_lsp.core.transcripts.chat_jsonl import ChatJsonlAdapter
from machine_lsp.core.transcripts.claude_code import ClaudeCodeAdapter
from machine_lsp.core.transcripts.codex import CodexAdapter
from machine_lsp.core.transcripts.gemini_cli import GeminiCliAdapter
from machine_lsp.core.transcripts.opencode import OpenCodeExportAdapter
from machine_lsp.core.transcripts.pi import LettaCodeAdapter, PiSessionAdapter
from machine_lsp.core.transcripts.qwen_code import QwenCodeAdapter
from machine_lsp.core.transcripts.session_files import Homes, Session
from machine_lsp.core.transcripts.unknown import describe_object, describe_text

__all__ = [
    "ADAPTERS",
    "HARNESSES",
    "answer_line",
    "is_assistant_entry",
    "TranscriptAdapter",
    "TranscriptError",
    "Turn",
    "TurnList",
    "load_turns",
    "read_text",
    "turn_at",
]


def describe_document(document: Any) -> str:
    """A whole JSON document that is not an `opencode export` (the one JSON-document format read): what it looks
    like, when that is known. The registry's words (they name every format read), given to the OpenCode adapter."""
    looks = "a JSON document, but not an OpenCode session export"
    if isinstance(document, dict) and not describe_first(document).startswith("unknown"):
        looks = f"a JSON document that {describe_first(document)}, not an OpenCode session export"
    return f'{looks} (`opencode export <id>`: {{"info": ..., "messages": [...]}}); supported: {SUPPORTED}'


# The registry: every format read, most specific first (the first whose sniffer claims a file reads it; the chat
# adapter, last, takes anything the others do not). An adapter carries its harness's one name, its sniffer, how the
# "supported:" list words it, and, where its harness has them: `find_sessions` (where it keeps its sessions),
# `answer_line` (the line test: is a decoded line a taggable answer), `near_miss` (words for a file shaped almost
# like its logs), `reads_file`/`load_file` (a log that is not text) and `load_session`. A new format: one module,
# one line here.
ADAPTERS: list[TranscriptAdapter] = [
    GeminiCliAdapter(),  # a Gemini CLI header has a `sessionId` as Claude Code's lines do: first
    LettaCodeAdapter(),  # Pi's format with a Letta conversation id: before Pi
    PiSessionAdapter(),
    QwenCodeAdapter(),  # a uuid/parentUuid tree like Claude Code's, with Gemini `parts`: before Claude Code
    ClaudeCodeAdapter(),
    CodexAdapter(),
    OpenCodeExportAdapter(describe_document),  # `opencode export` JSON: before the chat fallback
    CapturedAdapter(),  # `machine capture proxy` logs carry `messages`: before the chat fallback
    ChatJsonlAdapter(),
]
CHAT_ADAPTER = ADAPTERS[-1]
#: The harnesses whose sessions `machine sessions`, `--from last` and the editor find, by their one name.
HARNESSES = tuple(adapter.name for adapter in ADAPTERS if hasattr(adapter, "find_sessions"))
SUPPORTED = ", ".join(adapter.supported for adapter in [CHAT_ADAPTER, *ADAPTERS[:-1]])


def adapter_named(name: str) -> TranscriptAdapter:
    return next(adapter for adapter in ADAPTERS if adapter.name == name)


def find_harness_sessions(homes: Homes, project: Path, harness: str | None = None) -> Iterator[Session]:
    """Every session the harnesses keep (`harness`: only that one's), wherever it ran."""
    for adapter in ADAPTERS:
        finder = getattr(adapter, "find_sessions", None)
        if finder is not None and harness in (None, adapter.name):
            yield from finder(homes, project)


def load_session(session: Session, *, trace: bool = False, thinking: bool = False) -> TurnList:
    """A found session's turns: read by its adapter where its log is not one file of its own, else its file."""
    custom = getattr(adapter_named(session.harness), "load_session", None)
    if custom is not None:
        return custom(session, trace=trace, thinking=thinking)
    return load_turns(session.path, trace=trace, thinking=thinking)


def describe_first(first: dict) -> str:
    """Words for the first object of a file no adapter reads: a near miss of a format read (its adapter's words),
    else what else it looks like (unknown.describe_object)."""
    for adapter in ADAPTERS:
        near_miss = getattr(adapter, "near_miss", None)
        words = near_miss(first) if near_miss is not None else None
        if words is not None:
            return words
    return describe_object(first)


def read_text(path: Path, uri: str | None = None) -> str:
    """A transcript file's text, or TranscriptError saying precisely why it cannot be read."""
    uri = uri or path.absolute().as_uri()
    try:
        # A FIFO or /dev/zero is refused, never read until it blocks or fills memory.
        data = read_regular(path)
    except OSError as exc:
        raise TranscriptError(uri, unreadable_reason(exc, "a JSONL file")) from None
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM is harmless; drop it rather than fail line 1
    nul = data.find(b"\x00")
    if nul != -1:
        line = data.count(b"\n", 0, nul) + 1
        raise TranscriptError(
            uri, "looks like a binary file (it contains NUL bytes), expected JSONL text", line
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        column = len(data[line_start : exc.start].decode("utf-8", "replace")) + 1
        raise TranscriptError(uri, f"not valid UTF-8 (byte 0x{data[exc.start]:02x})", line, column) from None


def load_turns(
    path_or_text: Path | str,
    uri: str | None = None,
    *,
    trace: bool = False,
    thinking: bool = False,
) -> TurnList:
    """The tagged-able turns of a file (a Path) or of its text (a str, e.g. an editor buffer; pass its uri)."""
    if isinstance(path_or_text, Path):
        for adapter in ADAPTERS:  # a log that is not text (OpenCode's SQLite database) is read by its adapter
            reads_file = getattr(adapter, "reads_file", None)
            if reads_file is not None and reads_file(path_or_text):
                return adapter.load_file(path_or_text, trace=trace, thinking=thinking)
    if isinstance(path_or_text, Path):
        uri = uri or path_or_text.absolute().as_uri()
        text = normalize_line_ends(read_text(path_or_text, uri))
    else:
        # Lines end where the validator and editors say ("\r\n", lone "\r", "\n"): adapters then split on "\n".
        text = normalize_line_ends(path_or_text.removeprefix("\ufeff"))
        uri = uri or "untitled:"
        cached = _last_big_text
        if (
            cached is not None
            and cached[0] == (uri, trace, thinking)
            and (cached[1] is text or cached[1] == text)
        ):
            return cached[2]  # the same editor buffer again (hover, then a tag action): do not reread it
    turns = _load(text, uri, trace=trace, thinking=thinking)
    if not isinstance(path_or_text, Path):
        _remember(text, uri, trace, thinking, turns)
    return turns


# One big editor buffer's turns, kept between calls: an editor asks about the same unchanged buffer again and again
# (hover on a line, then the tag action on it), and rebuilding a 50 MB log's turns takes seconds.
_BIG_TEXT = 1_000_000
_last_big_text: tuple[tuple[str, bool, bool], str, TurnList] | None = None


def _remember(text: str, uri: str, trace: bool, thinking: bool, turns: TurnList) -> None:
    global _last_big_text
    _last_big_text = ((uri, trace, thinking), text, turns) if len(text) >= _BIG_TEXT else None


def _load(text: str, uri: str, *, trace: bool, thinking: bool) -> TurnList:
    head = _head_lines(text)
    adapter = pick_adapter(head)
    unknown = None if adapter is not None else _unknown_format(head, uri)
    if unknown is not None:
        turns = TurnList(problems=[unknown])
        turns.line_count = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        adapter_name = "unknown"
    else:
        adapter = adapter or ADAPTERS[-1]
        with _gc_paused():
            turns = adapter.turns(text, uri, trace=trace, thinking=thinking)
        adapter_name = adapter.name
    turns.uri = uri
    turns.adapter = (
        turns.adapter or adapter_name
    )  # an adapter may name what it found (Letta's log in Pi's format)
    return turns


def is_assistant_entry(obj: object) -> bool:
    """Whether one decoded log line is an assistant answer of a harness log (a line a person would tag)."""
    return answer_line(obj) is not None


def answer_line(obj: object) -> dict | None:
    """What the adapters' line tests say of one decoded log line: None when it is no harness's taggable answer,
    else whether --trace is offered for it (`tools`) and its stop reason where the log records one (`stop`)."""
    if not isinstance(obj, dict):
        return None
    for adapter in ADAPTERS:
        test = getattr(adapter, "answer_line", None)
        found = test(obj) if test is not None else None
        if found is not None:
            return found
    return None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Reading a big log allocates millions of objects and no cycles: the cyclic collector's repeated full passes
    over them cost more than the reading itself (measured: 15.9 s -> 4.4 s for a 50 MB Codex rollout with --trace)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _head_lines(text: str) -> list[str]:
    head: list[str] = []
    start = 0
    while len(head) < SNIFF_LINES and start <= len(text):
        end = text.find("\n", start)
        line = text[start:] if end == -1 else text[start:end]
        if line.strip():
            head.append(line.removesuffix("\r"))
        if end == -1:
            break
        start = end + 1
    return head


def pick_adapter(head: list[str]) -> TranscriptAdapter | None:
    """The adapter that claims these first non-blank lines, or None (the chat adapter is then the fallback)."""
    for adapter in ADAPTERS:
        sniff_lines = getattr(adapter, "sniff_lines", None)
        if sniff_lines is not None:
            if sniff_lines(head):
                return adapter
        elif head and adapter.sniff(head[0]):
            return adapter
    return None


def _unknown_format(head: list[str], uri: str) -> TranscriptError | None:
    """One clear error for a file that is neither chat rows nor a known log: its first lines are JSON objects
    without `messages`, or it is not JSON at all (markdown, plain text)."""
    import msgspec

    if head:
        not_json = describe_text(head[0])
        if not_json is not None:
            return TranscriptError(uri, f"{not_json}; supported: {SUPPORTED}", 1, 1)
    objects = []
    for line in head:
        try:
            objects.append(msgspec.json.decode(line))
        except (msgspec.DecodeError, RecursionError):
            return None  # broken JSON: the chat adapter reports it precisely, line by line
    if not objects or not all(isinstance(obj, dict) for obj in objects):
        return None
    if any("messages" in obj for obj in objects):
        return None
    return TranscriptError(uri, f"{describe_first(objects[0])}; supported: {SUPPORTED}", 1, 1)


def turn_at(turns: list[Turn], line: int | None) -> Turn:
    """The turn at `line` (1-based): the one ending there, else the narrowest one whose span covers it.

    With no line: the last turn of the file. Raises TranscriptError when the line cannot be read or holds no
    assistant turn.
    """
    uri = getattr(turns, "uri", "") or (turns[0].source.uri if turns else "")
    problems: list[TranscriptError] = getattr(turns, "problems", [])
    if getattr(turns, "adapter", None) == "unknown" and problems:
        raise problems[0]  # a format no adapter reads: that is the answer for every line of it
    line_count: int = getattr(turns, "line_count", 0)
    if line is None:
        last_turn_line = max((turn.end_line for turn in turns), default=0)
        later = [problem for problem in problems if (problem.line or 0) > last_turn_line]
        if later:
            raise later[-1]  # the file ends in a broken line: that is the one the user meant
        if not turns:
            if problems:
                raise problems[0]
            raise TranscriptError(uri, "no assistant turn in this file")
        return max(turns, key=lambda turn: turn.end_line)
    if line < 1:
        raise TranscriptError(uri, f"line {line} is not a line number (lines start at 1)")
    for problem in problems:
        if problem.line == line:
            raise problem
    exact = [turn for turn in turns if turn.end_line == line]
    if exact:
        return exact[0]
    covering = [turn for turn in turns if turn.line <= line <= turn.end_line]
    if covering:
        return min(covering, key=lambda turn: turn.end_line - turn.line)
    if line_count and line > line_count:
        raise TranscriptError(uri, f"line {line} is past the end of the file ({line_count} lines)", line)
    raise TranscriptError(uri, "no assistant turn at this line", line)
