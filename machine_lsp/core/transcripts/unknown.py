"""What a file no adapter reads looks like, in words: one line naming the format (or the agent that writes it) so the
user knows why nothing was tagged. Only shapes seen in real logs are named; anything else is described by its keys.

A shape is named here only when no adapter reads it: a format whose adapter is added to `transcripts.ADAPTERS` is
claimed by that adapter's sniffer first and never reaches these words. A near miss of a format that is read (a Pi
log without its header) is worded by that format's adapter (`near_miss`), asked first by `transcripts.describe_first`.
"""

from __future__ import annotations

from typing import Any

import msgspec


def describe_text(first_line: str) -> str | None:
    """Words for a file whose first non-blank line is not JSON at all (None when it starts like JSON, so a broken
    JSON line gets the precise JSON error instead)."""
    stripped = first_line.strip()
    if stripped.startswith(("{", "[", '"')):
        return None
    try:
        msgspec.json.decode(stripped)
        return None  # JSON, though not an object (`null`, a number): the chat adapter words that per line
    except (msgspec.DecodeError, RecursionError):
        pass
    if stripped.startswith("TO LLM") or stripped.startswith("LLM RESPONSE"):
        return "not a JSON lines file: looks like Aider's LLM history (.aider.llm.history), which is not read"
    if stripped.startswith(("#", ">", "- ", "* ", "```")):
        return (
            "not a JSON lines file: looks like markdown (an Aider .aider.chat.history.md?), which is not read; "
            "record such an agent through a chat JSONL export"
        )
    return "not a JSON lines file: its first line is not JSON"


def describe_object(first: dict[str, Any]) -> str:
    """Words for a JSON object that begins a file no adapter reads (a JSONL line, or a whole JSON document), when
    it is no near miss of a format that is read: another agent's log, another row format, else its keys."""
    kind = first.get("type")
    keys = ", ".join(list(first)[:8]) or "none"
    if isinstance(kind, str) and kind.startswith("session.") and "data" in first:
        return "looks like a GitHub Copilot CLI session (events.jsonl), which this version does not read"
    if kind == "metadata" and "protocol_version" in first:
        return "looks like a Kimi Code CLI wire log, which this version does not read"
    if "role" in first and isinstance(first.get("message"), dict) and "messages" not in first:
        return (
            "looks like a Cursor CLI agent transcript (role/message lines), which this version does not read"
        )
    if "prompt" in first and ("completion" in first or len(first) <= 2):
        return "looks like prompt/completion rows (keys: " + keys + "), not chat rows"
    if "conversations" in first:
        return "looks like ShareGPT rows (a `conversations` list), not chat rows"
    return f"unknown JSONL: the first line has keys {keys}"
