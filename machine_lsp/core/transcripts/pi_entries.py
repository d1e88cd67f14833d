"""How one Pi session entry becomes the messages Pi sends (pi-coding-agent 0.73.1, `convertToLlm`), with warnings
about what a text row cannot carry (images). The session's tree, compactions and turns are in `pi.py`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from machine_lsp.core.schema import ContentPart, Message, TextPart, ThinkingPart, ToolCall
from machine_lsp.core.transcripts.base import LogLine, dropped, logged_call, str_or_none

# Pi's own wrappers (pi-coding-agent 0.73.1, core/messages.ts): the summary text the model reads is exactly this.
COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
BRANCH_SUMMARY_SUFFIX = "</summary>"
# Letta Code prepends harness context to what the user typed; a plain tag keeps only what the user typed.
_SYSTEM_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\s*", re.DOTALL)


@dataclass
class Entry(LogLine):
    """One entry line of a Pi session: its id (`@<line>` in v1 files, which have none), parent, line and object."""

    id: str
    parent_id: str | None
    line: int
    data: dict[str, Any]
    synthetic_id: bool = False

    @property
    def is_assistant(self) -> bool:
        return self.type == "message" and self.message.get("role") == "assistant"


@dataclass
class Converted:
    """An entry turned into zero or more messages, plus warnings about what was dropped."""

    messages: list[Message] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class EntryConverter:
    """Entries to messages, each converted once (`convert` caches by entry id). `entries` is the reader's own map,
    read when a tool result looks up the call it answers; `letta` may be set after construction (a Letta Code log
    is known once its entries are read)."""

    def __init__(self, entries: dict[str, Entry], *, trace: bool, thinking: bool, letta: bool) -> None:
        self.entries = entries
        self.trace = trace
        self.thinking = thinking
        self.letta = letta
        self.converted: dict[str, Converted] = {}

    def convert(self, entry: Entry) -> Converted:
        cached = self.converted.get(entry.id)
        if cached is None:
            cached = self.converted[entry.id] = self.convert_uncached(entry)
        return cached

    def convert_uncached(self, entry: Entry) -> Converted:
        out = Converted()
        kind = entry.type
        if kind == "branch_summary":
            summary = entry.data.get("summary")
            if isinstance(summary, str) and summary:
                out.messages.append(_branch_summary(summary))
            return out
        if kind == "custom_message":
            # An extension's message: Pi sends it to the model as a user message, with or without --trace.
            self._user_text(entry.data.get("content"), entry.line, out)
            return out
        if kind != "message":
            return out  # model/thinking changes, labels, extension state: not part of what the model read
        message = entry.message
        role = message.get("role")
        if role == "user":
            self._user_text(message.get("content"), entry.line, out, typed=True)
        elif role == "assistant":
            if message.get("stopReason") in ("error", "aborted"):
                return out  # Pi leaves failed replies out of the context it sends next
            if not self.trace and message.get("stopReason") == "toolUse":
                return out
            assistant = self.assistant(message, entry.line, out.warnings)
            if self.trace or text_of_parts(message.get("content")).strip():
                out.messages.append(assistant)
        elif role == "toolResult" and self.trace and self._call_is_kept(entry, message.get("toolCallId")):
            text = self._parts_text(message.get("content"), entry.line, out.warnings, "tool result")
            out.messages.append(
                Message(
                    role="tool",
                    content=text,
                    tool_call_id=str_or_none(message.get("toolCallId")),
                    name=str_or_none(message.get("toolName")),
                )
            )
        elif role == "bashExecution" and not message.get("excludeFromContext"):
            # A `!command` the user ran: Pi puts its output in the conversation as a user message (`!!` excludes).
            out.messages.append(Message(role="user", content=bash_execution_text(message)))
        elif role in ("custom", "hookMessage"):
            self._user_text(message.get("content"), entry.line, out)
        elif role == "branchSummary":
            summary = message.get("summary")
            if isinstance(summary, str) and summary:
                out.messages.append(_branch_summary(summary))
        elif role == "compactionSummary":
            summary = message.get("summary")
            out.messages.append(compaction_summary(summary if isinstance(summary, str) else ""))
        return out

    def _call_is_kept(self, result: Entry, call_id: Any) -> bool:
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

    def _user_text(self, content: Any, line: int, out: Converted, *, typed: bool = False) -> None:
        if (
            isinstance(content, list)
            and sum(1 for p in content if isinstance(p, dict) and p.get("type") == "text") > 1
        ):
            # Several text parts are sent as several parts: keep them so (images are dropped, with a warning).
            texts = [self._parts_text([part], line, out.warnings, "user message") for part in content]
        else:
            texts = [self._parts_text(content, line, out.warnings, "user message")]
        if typed and self.letta:
            # Letta Code injects <system-reminder> context into the user's message. The rule every harness adapter
            # follows (docs/CAPTURE.md): injected context is never a user turn; a plain tag drops it, --trace keeps
            # it as a `system` message where the log has it (just before what the user typed).
            injected = [block.strip() for text in texts for block in _SYSTEM_REMINDER.findall(text)]
            texts = [_SYSTEM_REMINDER.sub("", text).strip() for text in texts]
            if injected and self.trace:
                out.messages.append(Message(role="system", content="\n".join(injected)))
        texts = [text for text in texts if text]
        if len(texts) == 1:
            out.messages.append(Message(role="user", content=texts[0]))
        elif texts:
            out.messages.append(Message(role="user", content=[TextPart(text) for text in texts]))

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
                warnings.append(dropped(line, f"an image ({mime}) in a {what}"))
        return "\n".join(texts)

    def assistant(self, message: dict[str, Any], line: int, warnings: list[str]) -> Message:
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
                tool_calls.append(logged_call(part, line, len(tool_calls), part.get("arguments")))
            elif kind == "image":
                warnings.append(dropped(line, "an image in an assistant reply"))
        content: str | list[ContentPart]
        if any(isinstance(part, ThinkingPart) for part in content_parts):
            content = content_parts
        else:
            content = "\n".join(part.text for part in content_parts if isinstance(part, TextPart))
        return Message(role="assistant", content=content, tool_calls=tool_calls or None)


def bash_execution_text(message: dict[str, Any]) -> str:
    """Pi's `bashExecutionToText`: the user message a `!command` becomes."""
    text = f"Ran `{message.get('command') or ''}`\n"
    output = message.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = message.get("exitCode")
    if message.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif isinstance(exit_code, int) and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if message.get("truncated") and message.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {message['fullOutputPath']}]"
    return text


def compaction_summary(summary: str) -> Message:
    return Message(role="user", content=COMPACTION_SUMMARY_PREFIX + summary + COMPACTION_SUMMARY_SUFFIX)


def _branch_summary(summary: str) -> Message:
    return Message(role="user", content=BRANCH_SUMMARY_PREFIX + summary + BRANCH_SUMMARY_SUFFIX)


def text_of_parts(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )
