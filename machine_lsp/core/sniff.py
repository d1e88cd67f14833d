"""What a text is before it is read as chat JSONL: a harness session log, or binary data. One rule each.

The language server and the CLI both ask here, so a file is never a session log to one and chat JSONL to the other.
"""

from __future__ import annotations

from collections.abc import Iterable

#: How far into a file a NUL byte (character) makes it binary; the validator's `check_binary` looks as far.
BINARY_SNIFF_CHARS = 8192
#: Lines looked at for the first non-blank one.
_FIRST_LINES = 64


def first_nonblank_lines(lines: Iterable[str], count: int) -> list[str]:
    """Up to `count` non-blank lines from the start (among the first few), without their endings."""
    out: list[str] = []
    for seen, line in enumerate(lines):
        if seen >= _FIRST_LINES or len(out) >= count:
            break
        if line.strip():
            out.append(line.rstrip("\r\n").lstrip("\ufeff") if not out else line.rstrip("\r\n"))
    return out


def session_log_format(lines: Iterable[str]) -> str | None:
    """The name of the harness whose session log this is ("pi", ...), or None for chat JSONL / anything else.

    Decided by the registry's own sniffers (`transcripts.pick_adapter` on the first non-blank lines), so that a
    format added to `transcripts.ADAPTERS` is recognised everywhere at once. The chat JSONL adapter (the fallback)
    is not a session log."""
    from machine_lsp.core import transcripts

    head = first_nonblank_lines(lines, transcripts.SNIFF_LINES)
    adapter = transcripts.pick_adapter(head) if head else None
    return None if adapter is None or adapter is transcripts.CHAT_ADAPTER else adapter.name


def _binary_message(offset: int) -> str:
    return f"looks like a binary file (NUL character at offset {offset}), not UTF-8 JSONL"


def binary_reason(head: str) -> str | None:
    """Why a decoded text is binary, not JSONL (a NUL in its first characters), or None."""
    nul = head.find("\x00", 0, BINARY_SNIFF_CHARS)
    return _binary_message(nul) if nul >= 0 else None


def binary_reason_of_lines(lines: list[str]) -> str | None:
    """binary_reason for a text held as lines: looks only at the lines that hold its first characters."""
    seen = 0
    for line in lines:
        if seen >= BINARY_SNIFF_CHARS:
            break
        nul = line.find("\x00")
        if nul >= 0:
            return _binary_message(seen + nul) if seen + nul < BINARY_SNIFF_CHARS else None
        seen += len(line)
    return None
