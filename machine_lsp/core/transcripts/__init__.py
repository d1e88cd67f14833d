"""Transcript adapters: a conversation file -> the assistant turns in it that can be tagged.

Two formats so far, picked by sniffing the first non-blank line: Pi session logs (a `{"type":"session"}` header) and
chat JSONL (`{"messages": [...]}` per line). Another harness's log becomes readable by adding an adapter to ADAPTERS.
"""

from __future__ import annotations

from pathlib import Path

from machine_lsp.core.transcripts.base import (
    TranscriptAdapter,
    TranscriptError,
    Turn,
    TurnList,
)
from machine_lsp.core.transcripts.chat_jsonl import ChatJsonlAdapter
from machine_lsp.core.transcripts.opencode import OpenCodeExportAdapter, is_opencode_db, load_db_turns
from machine_lsp.core.transcripts.pi import LettaCodeAdapter, PiSessionAdapter

__all__ = [
    "ADAPTERS",
    "TranscriptAdapter",
    "TranscriptError",
    "Turn",
    "TurnList",
    "load_turns",
    "read_text",
    "turn_at",
]

# Most specific first: the chat adapter takes anything the others do not claim.
ADAPTERS: list[TranscriptAdapter] = [PiSessionAdapter(), ChatJsonlAdapter()]
ADAPTERS.insert(0, LettaCodeAdapter())  # Pi's format with a Letta conversation id: before Pi
ADAPTERS.insert(-1, OpenCodeExportAdapter())  # `opencode export` JSON: before the chat fallback


def read_text(path: Path, uri: str | None = None) -> str:
    """A transcript file's text, or TranscriptError saying precisely why it cannot be read."""
    uri = uri or path.absolute().as_uri()
    try:
        data = path.read_bytes()
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
        text = read_text(path_or_text, uri)
    else:
        text = path_or_text.removeprefix("\ufeff")
        uri = uri or "untitled:"
    first_line = next((line for line in text.split("\n") if line.strip()), "")
    adapter = next((a for a in ADAPTERS if a.sniff(first_line)), ADAPTERS[-1])
    turns = adapter.turns(text, uri, trace=trace, thinking=thinking)
    turns.uri = uri
    turns.adapter = (
        turns.adapter or adapter.name
    )  # an adapter may name what it found (Pi's format, Letta's log)
    return turns


def turn_at(turns: list[Turn], line: int | None) -> Turn:
    """The turn at `line` (1-based): the one ending there, else the narrowest one whose span covers it.

    With no line: the last turn of the file. Raises TranscriptError when the line cannot be read or holds no
    assistant turn.
    """
    uri = getattr(turns, "uri", "") or (turns[0].source.uri if turns else "")
    problems: list[TranscriptError] = getattr(turns, "problems", [])
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
