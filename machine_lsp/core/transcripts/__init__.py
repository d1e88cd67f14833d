"""Transcript adapters: a conversation file -> the assistant turns in it that can be tagged.

Formats, picked by sniffing the first few non-blank lines (an adapter's `sniff_lines`, else `sniff` on the first
line): Pi session logs (a `{"type":"session"}` header), Qwen Code session logs (a uuid tree of Gemini `parts`),
Claude Code session logs (uuid/parentUuid lines, possibly
after summary/snapshot/queue lines), Codex rollouts (`session_meta` / `response_item` lines) and chat JSONL
(`{"messages": [...]}` per line). A file none of them claims, whose first lines are objects without `messages`,
gets one message naming what it looks like and what is supported instead of an error on every line. Another
harness's log becomes readable by adding an adapter to ADAPTERS.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path

from machine_lsp.core.lines import normalize_line_ends
from machine_lsp.core.safe_files import read_regular
from machine_lsp.core.transcripts.base import SNIFF_LINES, TranscriptAdapter, TranscriptError, Turn, TurnList
from machine_lsp.core.transcripts.captured import CapturedAdapter
from machine_lsp.core.transcripts.chat_jsonl import ChatJsonlAdapter
from machine_lsp.core.transcripts.claude_code import ClaudeCodeAdapter
from machine_lsp.core.transcripts.codex import CodexAdapter
from machine_lsp.core.transcripts.gemini_cli import GeminiCliAdapter
from machine_lsp.core.transcripts.opencode import OpenCodeExportAdapter, is_opencode_db, load_db_turns
from machine_lsp.core.transcripts.pi import LettaCodeAdapter, PiSessionAdapter
from machine_lsp.core.transcripts.qwen_code import QwenCodeAdapter
from machine_lsp.core.transcripts.unknown import describe_object, describe_text

__all__ = [
    "ADAPTERS",
    "is_assistant_entry",
    "TranscriptAdapter",
    "TranscriptError",
    "Turn",
    "TurnList",
    "load_turns",
    "read_text",
    "turn_at",
]

# Most specific first: the chat adapter takes anything the others do not claim.
ADAPTERS: list[TranscriptAdapter] = [
    PiSessionAdapter(),
    QwenCodeAdapter(),  # a uuid/parentUuid tree like Claude Code's, with Gemini `parts`: before Claude Code
    ClaudeCodeAdapter(),
    CodexAdapter(),
    ChatJsonlAdapter(),
]
ADAPTERS.insert(0, LettaCodeAdapter())  # Pi's format with a Letta conversation id: before Pi
ADAPTERS.insert(-1, OpenCodeExportAdapter())  # `opencode export` JSON: before the chat fallback
# `machine capture proxy` logs carry `messages`: before the chat fallback.
ADAPTERS.insert(-1, CapturedAdapter())
# A Gemini CLI header has a `sessionId` as Claude Code's lines do: first.
ADAPTERS.insert(0, GeminiCliAdapter())
SUPPORTED = (
    'chat JSONL ({"messages": [...]} per line), Pi session logs, Claude Code session logs '
    "(~/.claude/projects/.../<session>.jsonl), Codex rollouts (~/.codex/sessions/.../rollout-*.jsonl)"
    ", OpenCode (opencode.db, `opencode export` JSON), Letta Code (~/.letta/lc-local-backend/conversations/"
    "<id>/messages.jsonl), Qwen Code (~/.qwen/projects/<cwd>/chats/<session>.jsonl)"
    ", Gemini CLI (~/.gemini/tmp/<project>/chats/session-*.jsonl or .json)"
    ", the recording proxy's logs (.machine/captured/*.jsonl)"
)


def read_text(path: Path, uri: str | None = None) -> str:
    """A transcript file's text, or TranscriptError saying precisely why it cannot be read."""
    uri = uri or path.absolute().as_uri()
    try:
        # A FIFO or /dev/zero is refused, never read until it blocks or fills memory.
        data = read_regular(path)
    except FileNotFoundError:
        raise TranscriptError(uri, "no such file") from None
    except IsADirectoryError:
        raise TranscriptError(uri, "is a directory, expected a JSONL file") from None
    except PermissionError:
        raise TranscriptError(uri, "permission denied") from None
    except OSError as exc:
        raise TranscriptError(uri, f"cannot read: {exc.strerror or exc}") from None
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
    if isinstance(path_or_text, Path) and is_opencode_db(path_or_text):  # SQLite, not text: read it read-only
        return load_db_turns(path_or_text, trace=trace, thinking=thinking)
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
    if not isinstance(obj, dict):
        return False
    message = obj.get("message")
    if obj.get("type") == "message" and isinstance(message, dict):  # Pi
        return message.get("role") == "assistant"
    if (
        obj.get("type") == "assistant" and isinstance(message, dict) and "uuid" in obj
    ):  # Claude Code, Qwen Code
        return True
    if obj.get("type") == "gemini" and isinstance(obj.get("id"), str):  # Gemini CLI
        return True
    payload = obj.get("payload")
    if obj.get("type") == "response_item" and isinstance(payload, dict):  # Codex
        kind = payload.get("type")
        return (kind == "message" and payload.get("role") == "assistant") or kind in (
            "function_call",
            "custom_tool_call",
            "local_shell_call",
        )
    return False


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
    return TranscriptError(uri, f"{describe_object(objects[0])}; supported: {SUPPORTED}", 1, 1)


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
