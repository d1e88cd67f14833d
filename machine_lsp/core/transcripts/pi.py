"""Pi coding-agent session logs (`~/.pi/agent/sessions/.../<ts>_<uuid>.jsonl`), formats v1, v2 and v3.

Line 1 is a `{"type":"session"}` header; every other line is an entry. From v2 on entries carry `id`/`parentId` and
form a tree (branches are new children of earlier entries); v1 is a plain list, so each entry's parent is the one
before it. The conversation behind an entry is the path root -> entry.

Turns: every assistant entry with `--trace`; without it, every assistant entry that ends an exchange (anything but
an intermediate `toolUse` stop), since a plain tag is about the final text reply.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from machine_lsp.core.schema import (
    ContentPart,
    Message,
    Source,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolFunction,
)
from machine_lsp.core.transcripts.base import TranscriptError, Turn, TurnList, decode_json_line

HARNESS = "pi"
_SUMMARY_PREFIX = {
    "compaction": "Summary of the earlier conversation (compacted):\n\n",
    "branch": "Summary of another branch of this conversation:\n\n",
}


@dataclass
class _Entry:
    id: str
    parent_id: str | None
    line: int
    data: dict[str, Any]
    synthetic_id: bool = False

    @property
    def type(self) -> str:
        return str(self.data.get("type"))

    @property
    def message(self) -> dict[str, Any]:
        message = self.data.get("message")
        return message if isinstance(message, dict) else {}

    @property
    def is_assistant(self) -> bool:
        return self.type == "message" and self.message.get("role") == "assistant"


@dataclass
class _Converted:
    """An entry turned into zero or more messages, plus warnings about what was dropped."""

    messages: list[Message] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class _Prefix(NamedTuple):
    messages: tuple[Message, ...]
    warnings: tuple[str, ...]


_EMPTY = _Prefix((), ())


class PiSessionAdapter:
    name = "pi"

    def sniff(self, first_line: str) -> bool:
        try:
            obj = msgspec.json.decode(first_line)
        except (msgspec.DecodeError, RecursionError):
            return False
        return isinstance(obj, dict) and obj.get("type") == "session"

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        return _SessionReader(text, uri, trace=trace, thinking=thinking).read()


class _SessionReader:
    def __init__(self, text: str, uri: str, *, trace: bool, thinking: bool) -> None:
        self.text = text
        self.uri = uri
        self.trace = trace
        self.thinking = thinking
        self.result = TurnList()
        self.entries: dict[str, _Entry] = {}
        self.order: list[_Entry] = []
        self.has_children: set[str] = set()
        self.session_id: str | None = None
        self.converted: dict[str, _Converted] = {}
        self.prefixes: dict[str, _Prefix] = {}

    # -- parsing ----------------------------------------------------------------------------------------------

    def read(self) -> TurnList:
        lines = self.text.split("\n")
        self.result.line_count = len(lines) - (1 if lines and lines[-1] == "" else 0)
        version: int | None = None
        previous_id: str | None = None
        for line_no, raw in enumerate(lines, start=1):
            line_text = raw.removesuffix("\r")
            if not line_text.strip():
                continue
            try:
                obj = decode_json_line(line_text, self.uri, line_no)
                if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
                    raise TranscriptError(
                        self.uri, 'expected a Pi entry, a JSON object with a "type"', line_no, 1
                    )
            except TranscriptError as exc:
                self.result.problems.append(exc)
                continue
            if version is None:
                if obj["type"] != "session":
                    self.result.problems.append(
                        TranscriptError(
                            self.uri, 'a Pi session starts with a {"type":"session"} header', line_no, 1
                        )
                    )
                    return self.result
                raw_version = obj.get("version", 1)
                version = raw_version if isinstance(raw_version, int) else 1
                session_id = obj.get("id")
                self.session_id = session_id if isinstance(session_id, str) else None
                continue
            entry_id = obj.get("id")
            if version >= 2 and isinstance(entry_id, str) and entry_id:
                parent = obj.get("parentId")
                entry = _Entry(entry_id, parent if isinstance(parent, str) else None, line_no, obj)
            else:
                # v1 (or an entry without an id): a linear log, each entry follows the previous one.
                entry = _Entry(f"@{line_no}", previous_id, line_no, obj, synthetic_id=True)
            if entry.id in self.entries:
                self.result.problems.append(
                    TranscriptError(
                        self.uri, f"entry id {entry.id} repeats line {self.entries[entry.id].line}", line_no
                    )
                )
            self.entries[entry.id] = entry
            self.order.append(entry)
            if entry.parent_id is not None:
                self.has_children.add(entry.parent_id)
            previous_id = entry.id
        # In file order, parents come before children: each entry's prefix is built from its parent's once, and a
        # prefix is dropped when the last child has used it, so memory stays near the size of the turns themselves.
        waiting_children = Counter(entry.parent_id for entry in self.order if entry.parent_id is not None)
        for entry in self.order:
            if entry.is_assistant and self._is_turn(entry):
                self.result.append(self._turn(entry))
            if waiting_children[entry.id] > 0:
                self._prefix(entry.id, entry)
            if entry.parent_id is not None:
                waiting_children[entry.parent_id] -= 1
                if waiting_children[entry.parent_id] <= 0:
                    self.prefixes.pop(entry.parent_id, None)
        return self.result

    def _is_turn(self, entry: _Entry) -> bool:
        if self.trace:
            return True
        # An intermediate tool-calling step is part of the exchange whose final reply comes later.
        return entry.message.get("stopReason") != "toolUse" or entry.id not in self.has_children

    # -- conversations ---------------------------------------------------------------------------------------
    # The messages before an entry are those before its parent plus the parent's own, so they are memoised per
    # entry (`_Prefix`, shared, never mutated): a session of thousands of entries stays linear, not quadratic.

    def _prefix(self, entry_id: str | None, child: _Entry) -> _Prefix:
        """Messages (and warnings) of the path root -> `entry_id`, inclusive."""
        chain: list[_Entry] = []
        in_chain: set[str] = set()
        base = _EMPTY
        current = entry_id
        below = child
        while current is not None:
            known = self.prefixes.get(current)
            if known is not None:
                base = known
                break
            entry = self.entries.get(current)
            if entry is None:
                base = _Prefix(
                    (),
                    (
                        f"line {below.line}: parent entry {current} is not in the file; "
                        "the conversation starts here",
                    ),
                )
                break
            if entry.id in in_chain:
                base = _Prefix(
                    (), (f"line {entry.line}: entries form a cycle; the conversation starts here",)
                )
                break
            chain.append(entry)
            in_chain.add(entry.id)
            below = entry
            current = entry.parent_id
        for entry in reversed(chain):
            base = self._extend(base, entry)
            self.prefixes[entry.id] = base
        return base

    def _extend(self, base: _Prefix, entry: _Entry) -> _Prefix:
        if entry.type == "compaction":
            return self._compacted(entry)
        converted = self._convert(entry)
        if not converted.messages and not converted.warnings:
            return base  # share: most entries add nothing (labels, model changes, tool steps in plain mode)
        return _Prefix(base.messages + tuple(converted.messages), base.warnings + tuple(converted.warnings))

    def _compacted(self, compaction: _Entry) -> _Prefix:
        """Pi's context after a compaction: the summary, then the entries from `firstKeptEntryId` on."""
        first_kept = compaction.data.get("firstKeptEntryId")
        kept: list[_Entry] = []
        current = compaction.parent_id
        seen: set[str] = set()
        while current is not None and current not in seen:
            entry = self.entries.get(current)
            if entry is None:
                break
            seen.add(current)
            kept.append(entry)
            if entry.id == first_kept:
                break
            current = entry.parent_id
        else:
            kept = []  # the kept entry is not on this path: only the summary survives
        if kept and kept[-1].id != first_kept:
            kept = []
        messages: list[Message] = []
        warnings: list[str] = []
        summary = str(compaction.data.get("summary") or "")
        if summary:
            messages.append(Message(role="user", content=_SUMMARY_PREFIX["compaction"] + summary))
        for entry in reversed(kept):
            if entry.type == "compaction":
                continue
            converted = self._convert(entry)
            messages.extend(converted.messages)
            warnings.extend(converted.warnings)
        return _Prefix(tuple(messages), tuple(warnings))

    def _turn(self, answer_entry: _Entry) -> Turn:
        before = self._prefix(answer_entry.parent_id, answer_entry)
        warnings = list(before.warnings)
        answer_message = answer_entry.message
        answer = self._assistant(answer_message, answer_entry.line, warnings)
        messages = [*before.messages, answer]
        return Turn(
            line=self._span_start(answer_entry),
            end_line=answer_entry.line,
            messages=messages,
            answer_index=len(messages) - 1,
            source=Source(
                kind="session_log",
                uri=self.uri,
                line=answer_entry.line,
                end_line=answer_entry.line,
                entry_id=None if answer_entry.synthetic_id else answer_entry.id,
                session_id=self.session_id,
                harness=HARNESS,
                model=_str_or_none(answer_message.get("model")),
                provider=_str_or_none(answer_message.get("provider")),
            ),
            tags_blocked=self._blocked(answer_message, answer),
            warnings=warnings,
        )

    def _span_start(self, answer_entry: _Entry) -> int:
        """First line of the entries between the previous turn on the path and this one (the prompt, tool results)."""
        start = answer_entry.line
        seen = {answer_entry.id}
        current = answer_entry.parent_id
        while current is not None and current not in seen:
            entry = self.entries.get(current)
            if entry is None or (entry.is_assistant and self._is_turn(entry)):
                break
            seen.add(current)
            start = min(start, entry.line)
            current = entry.parent_id
        return start

    def _blocked(self, message: dict[str, Any], answer: Message) -> str | None:
        stop = message.get("stopReason")
        if stop == "error":
            detail = message.get("errorMessage")
            return "stopReason is error" + (f" ({detail})" if detail else "") + ": cannot be tagged good"
        if stop == "aborted":
            return "stopReason is aborted (the reply was interrupted): cannot be tagged good"
        has_text = bool(_text_of_parts(message.get("content")).strip())
        if self.trace:
            return None if has_text or answer.tool_calls else "the reply is empty: nothing to train on"
        if has_text:
            return None
        if stop == "toolUse":
            return "the agent called tools and never gave a final reply: tag it with --trace to keep the tool calls"
        return "the reply has no text: nothing to train on"

    # -- entry conversion ------------------------------------------------------------------------------------

    def _convert(self, entry: _Entry) -> _Converted:
        cached = self.converted.get(entry.id)
        if cached is None:
            cached = self.converted[entry.id] = self._convert_uncached(entry)
        return cached

    def _convert_uncached(self, entry: _Entry) -> _Converted:
        out = _Converted()
        kind = entry.type
        if kind == "branch_summary":
            summary = str(entry.data.get("summary") or "")
            if summary:
                out.messages.append(Message(role="user", content=_SUMMARY_PREFIX["branch"] + summary))
            return out
        if kind == "custom_message":
            if self.trace:
                self._user_text(entry.data.get("content"), entry.line, out)
            return out
        if kind != "message":
            return out  # model/thinking changes, labels, extension state: not part of what the model read
        message = entry.message
        role = message.get("role")
        if role == "user":
            self._user_text(message.get("content"), entry.line, out)
        elif role == "assistant":
            if message.get("stopReason") in ("error", "aborted"):
                return out  # Pi leaves failed replies out of the context it sends next
            if not self.trace and message.get("stopReason") == "toolUse":
                return out
            assistant = self._assistant(message, entry.line, out.warnings)
            if self.trace or _text_of_parts(message.get("content")).strip():
                out.messages.append(assistant)
        elif role == "toolResult" and self.trace and self._call_is_kept(entry, message.get("toolCallId")):
            text = self._parts_text(message.get("content"), entry.line, out.warnings, "tool result")
            out.messages.append(
                Message(
                    role="tool",
                    content=text,
                    tool_call_id=_str_or_none(message.get("toolCallId")),
                    name=_str_or_none(message.get("toolName")),
                )
            )
        elif role == "bashExecution" and self.trace and not message.get("excludeFromContext"):
            command = str(message.get("command") or "")
            output = str(message.get("output") or "")
            out.messages.append(Message(role="user", content=f"Ran `{command}`\n```\n{output}\n```"))
        elif role in ("custom", "hookMessage") and self.trace:
            self._user_text(message.get("content"), entry.line, out)
        elif role in ("branchSummary", "compactionSummary"):
            summary = str(message.get("summary") or "")
            prefix = _SUMMARY_PREFIX["branch" if role == "branchSummary" else "compaction"]
            if summary:
                out.messages.append(Message(role="user", content=prefix + summary))
        return out

    def _call_is_kept(self, result: _Entry, call_id: Any) -> bool:
        """A tool result belongs in the trace only if the call it answers is there: the assistant entry above it
        (past sibling results) did not fail and made a call with this id."""
        current = result.parent_id
        for _ in range(10_000):  # bounded: a malformed file may loop
            entry = self.entries.get(current) if current is not None else None
            if entry is None or not (entry.type == "message" and entry.message.get("role") == "toolResult"):
                break
            current = entry.parent_id
        if entry is None or not entry.is_assistant:
            return False
        message = entry.message
        if message.get("stopReason") in ("error", "aborted"):
            return False
        content = message.get("content")
        return isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") == "toolCall" and part.get("id") == call_id
            for part in content
        )

    def _user_text(self, content: Any, line: int, out: _Converted) -> None:
        text = self._parts_text(content, line, out.warnings, "user message")
        if text:
            out.messages.append(Message(role="user", content=text))

    def _parts_text(self, content: Any, line: int, warnings: list[str], what: str) -> str:
        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            return ""
        texts: list[str] = []
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "image":
                mime = part.get("mimeType") or "image"
                warnings.append(
                    f"line {line}: an image ({mime}) in a {what} was dropped: rows carry text only"
                )
        return "\n".join(texts)

    def _assistant(self, message: dict[str, Any], line: int, warnings: list[str]) -> Message:
        parts = message.get("content")
        if isinstance(parts, str):
            parts = [{"type": "text", "text": parts}]
        if not isinstance(parts, list):
            parts = []
        content_parts: list[ContentPart] = []
        tool_calls: list[ToolCall] = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str) and part["text"]:
                content_parts.append(TextPart(part["text"]))
            elif kind == "thinking" and self.thinking and isinstance(part.get("thinking"), str):
                if part["thinking"] and not part.get("redacted"):
                    content_parts.append(ThinkingPart(part["thinking"]))
            elif kind == "toolCall" and self.trace:
                arguments = part.get("arguments")
                tool_calls.append(
                    ToolCall(
                        id=str(part.get("id") or f"call_{line}_{len(tool_calls)}"),
                        function=ToolFunction(
                            name=str(part.get("name") or ""),
                            arguments=msgspec.json.encode(
                                arguments if arguments is not None else {}
                            ).decode(),
                        ),
                    )
                )
            elif kind == "image":
                warnings.append(
                    f"line {line}: an image in an assistant reply was dropped: rows carry text only"
                )
        content: str | list[ContentPart]
        if any(isinstance(part, ThinkingPart) for part in content_parts):
            content = content_parts
        else:
            content = "\n".join(part.text for part in content_parts if isinstance(part, TextPart))
        return Message(role="assistant", content=content, tool_calls=tool_calls or None)


def _text_of_parts(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
