"""Which turn a place in a document means: a line of chat JSONL or a session log, or a selected span of any text.

Pure: takes the document's lines (with or without their endings, split by `machine_lsp.core.lines`) and returns a
`Turn` for `tagging.tag`, or raises TranscriptError / SelectionError with a message for the user. The language
server and the CLI use the same functions, so *Tag as good* on line N stores what `machine good --from F:N` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from machine_lsp.core.lines import strip_line_end
from machine_lsp.core.schema import Message, Source
from machine_lsp.core.sniff import session_log_format
from machine_lsp.core.transcripts import Turn, TurnList, answer_line, load_turns, turn_at

#: Lines of context either side of a selection, and at most this many characters of it, stored with the turn.
CONTEXT_LINES = 20
CONTEXT_CHARS = 4000


_decoder = msgspec.json.Decoder()


class SelectionError(ValueError):
    """A selection that cannot become a turn (empty, outside the document, no prompt)."""


def joined_text(lines: Sequence[str]) -> str:
    """The document as "\\n"-separated lines: the line numbers the transcript adapters see are the editor's."""
    return "\n".join(map(strip_line_end, lines)) + ("\n" if lines else "")


def document_turns(lines: Sequence[str], uri: str, *, trace: bool = False) -> TurnList:
    """Every turn of a document (a session log or chat JSONL); linear in its size."""
    return load_turns(joined_text(lines), uri, trace=trace)


def is_session_log(lines: Sequence[str]) -> bool:
    return session_log_format(lines) is not None


def turn_at_line(lines: Sequence[str], uri: str, line: int | None, *, trace: bool = False) -> Turn:
    """The turn at 1-based `line` (None: the last one). A chat row is one line, so only that line is parsed."""
    if line is not None and not is_session_log(lines):
        if line > len(lines):
            raise SelectionError(f"line {line} is past the end of the file ({len(lines)} lines)")
        # Blank lines before it keep its line number.
        return turn_at(
            load_turns("\n" * (line - 1) + strip_line_end(lines[line - 1]), uri, trace=trace), line
        )
    return turn_at(document_turns(lines, uri, trace=trace), line)


def selection_turn(
    lines: Sequence[str],
    uri: str,
    path: str,
    start: tuple[int, int],
    end: tuple[int, int],
    prompt: str | None,
) -> Turn:
    """A turn whose answer is the text between `start` and `end` ((0-based line, code-point column), end
    exclusive) and whose prompt is `prompt`; the lines around it are kept as context."""
    if not prompt:
        raise SelectionError("tagging a selection needs the prompt: pass {'prompt': '...'}")
    (start_line, start_col), (end_line, end_col) = start, end
    if not (0 <= start_line <= end_line < max(len(lines), 1) + 1):
        raise SelectionError("range is outside the document")
    texts = [strip_line_end(line) for line in lines[start_line : end_line + 1]]
    whole = list(lines[start_line : end_line + 1])
    if start_line == end_line:
        answer = texts[0][start_col:end_col] if texts else ""
    else:
        answer = whole[0][start_col:] + "".join(whole[1:-1] if end_line < len(lines) else whole[1:])
        answer += texts[-1][:end_col] if end_line < len(lines) else ""
    if not answer.strip():
        raise SelectionError("the selection is empty")
    lo, hi = max(0, start_line - CONTEXT_LINES), min(len(lines), end_line + CONTEXT_LINES + 1)
    context = "".join(lines[lo:hi])[:CONTEXT_CHARS]
    last = end_line if end_col > 0 or end_line == start_line else end_line - 1
    source = Source(
        kind="selection",
        uri=uri,
        line=start_line + 1,
        end_line=last + 1,
        context=f"{path} lines {lo + 1}-{hi}:\n{context}",
    )
    messages = [Message(role="user", content=prompt), Message(role="assistant", content=answer)]
    return Turn(start_line + 1, last + 1, messages, 1, source)


def row_info(line_text: str) -> dict[str, Any] | None:
    """What kind of taggable thing a line is: a chat row or a session log's assistant entry (`kind`), whether it
    has tool calls (`tools`); None for anything else, including lines too deeply nested or not encodable."""
    text = strip_line_end(line_text).lstrip("\ufeff")
    if not text.strip().startswith(("{", "[")):
        return None
    try:
        obj = _decoder.decode(text)
    except (msgspec.DecodeError, UnicodeError, RecursionError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
        messages = [m for m in obj["messages"] if isinstance(m, dict)]
        if not any(m.get("role") == "assistant" for m in messages):
            return None
        tools = any(m.get("tool_calls") or m.get("role") == "tool" for m in messages)
        return {"kind": "chat_jsonl", "tools": tools}
    found = answer_line(obj)  # the registry's line tests: each harness's adapter decides its own lines
    return None if found is None else {"kind": "session_log", **found}
