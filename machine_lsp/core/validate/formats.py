"""File-level diagnoses: a whole file in another chat format gets one finding with a fix that converts it.

A file that is one JSON array (of rows, or of messages), a ShareGPT file (`conversations` of `from`/`value`) or a
prompt/completion file (`prompt`/`completion`, string or chat style) would otherwise give one error per line, and
a pretty-printed array thousands. The sniff looks at the first non-blank line only (the whole text only when that
line opens an array), so a chat JSONL file pays one line's decode.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from machine_lsp.core.validate.findings import Finding, Fix, TextEdit

# ShareGPT `from` values, mapped to chat roles.
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
}

_decoder = msgspec.json.Decoder()


class _NotConvertible(Exception):
    pass


def _is_sharegpt(obj: Any) -> bool:
    turns = obj.get("conversations") if isinstance(obj, dict) else None
    return (
        "messages" not in obj
        and isinstance(turns, list)
        and bool(turns)
        and all(isinstance(t, dict) and "from" in t and "value" in t for t in turns)
    )


def _is_prompt_completion(obj: Any) -> bool:
    return isinstance(obj, dict) and "messages" not in obj and "prompt" in obj and "completion" in obj


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def _convert_row(obj: Any) -> dict[str, Any]:
    """One row of any recognised format -> a chat row, keeping its other keys."""
    if isinstance(obj, dict) and "messages" in obj:
        return obj
    if _is_sharegpt(obj):
        messages = []
        for turn in obj["conversations"]:
            role = SHAREGPT_ROLES.get(str(turn["from"]).strip().lower())
            if role is None or not isinstance(turn["value"], str):
                raise _NotConvertible
            messages.append({"role": role, "content": turn["value"]})
        rest = {k: v for k, v in obj.items() if k != "conversations"}
        return {"messages": messages, **rest}
    if _is_prompt_completion(obj):
        prompt, completion = obj["prompt"], obj["completion"]
        if isinstance(prompt, str) and isinstance(completion, str):
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
        elif _is_messages(prompt) and _is_messages(completion):
            messages = [*prompt, *completion]  # TRL's conversational prompt-completion rows
        else:
            raise _NotConvertible
        rest = {k: v for k, v in obj.items() if k not in ("prompt", "completion")}
        return {"messages": messages, **rest}
    if _is_messages(obj):
        return {"messages": obj}
    raise _NotConvertible


def _first_line(lines: Sequence[str]) -> tuple[int, str] | None:
    for index, line in enumerate(lines):
        if line.strip():
            return index, line
    return None


def diagnose_lines(lines: Sequence[str]) -> Finding | None:
    """One file-level finding (line 1) when the file is in another chat format, else None. `lines` may keep
    their line ends (the language server's) or not."""
    first = _first_line(lines)
    if first is None:
        return None
    index, line = first
    head = line.lstrip("\ufeff").strip()
    if head.startswith("["):
        return _diagnose_array(lines, index, line)
    if not head.startswith("{") or ('"conversations"' not in head and '"prompt"' not in head):
        return None  # the common case: a chat row (or not JSON at all) is the per-line checks' business
    try:
        obj = _decoder.decode(head)
    except (msgspec.DecodeError, RecursionError):
        return None
    if _is_sharegpt(obj):
        what = "a ShareGPT file (`conversations` of `from`/`value` turns)"
    elif _is_prompt_completion(obj):
        what = "a prompt/completion file (`prompt` and `completion` keys)"
    else:
        return None
    rows: list[Any] = []
    for text in lines:
        text = text.lstrip("\ufeff").strip()
        if not text:
            continue
        try:
            rows.append(_decoder.decode(text))
        except (msgspec.DecodeError, RecursionError):
            return _finding(lines, what, None)
    return _finding(lines, what, rows)


def _diagnose_array(lines: Sequence[str], index: int, line: str) -> Finding | None:
    rest_blank = not any(s.strip() for s in lines[index + 1 :])
    try:
        value = _decoder.decode(line.lstrip("\ufeff").strip())
    except (msgspec.DecodeError, RecursionError):
        value = None  # the array goes on over more lines (pretty-printed): decode the whole text below
    else:
        if not rest_blank:
            return None  # a whole JSON value on line 1 and rows after it: JSONL with a bad first line
    if value is None:
        text = "".join(lines) if lines and lines[0].endswith(("\n", "\r")) else "\n".join(lines)
        try:
            value = _decoder.decode(text.lstrip("\ufeff").strip())
        except (msgspec.DecodeError, RecursionError):
            return None
    if not isinstance(value, list) or not value:
        return None
    if _is_messages(value):
        if rest_blank:
            return None  # one line holding a list of messages: the per-line `bare-messages` fix handles it
        what = "one JSON array of messages (one conversation), not JSON Lines"
        return _finding(lines, what, [value])
    what = "one JSON array of rows, not JSON Lines (one row per line)"
    return _finding(lines, what, value)


def _finding(lines: Sequence[str], what: str, rows: list[Any] | None) -> Finding:
    """The file-level finding; its fix, when every row converts, replaces the whole text with chat JSONL."""
    fix = None
    converted: list[str] = []
    if rows is not None:
        try:
            converted = [json.dumps(_convert_row(row), ensure_ascii=False) for row in rows]
        except _NotConvertible:
            converted = []
    last = len(lines)
    last_width = len(lines[-1].rstrip("\r\n")) if lines else 0
    if converted:
        edit = TextEdit(1, 1, last, last_width + 1, "\n".join(converted))
        fix = Fix(f"Convert the file to chat JSONL ({len(converted)} rows)", [edit])
    message = f'the file is {what}; machine-lsp reads chat JSONL: one {{"messages": [...]}} row per line'
    if fix is None:
        message += " (it cannot be converted automatically: some rows do not fit the format)"
    else:
        message += (
            " (a fix converts it: the editor's quick fix, or the edit in `machine train validate --json`)"
        )
    first_width = len(lines[0].rstrip("\r\n")) if lines else 0
    return Finding(1, 1, 1, first_width + 1, "error", "file-format", message, fix)
