"""OpenCode's messages -> turns, for both of its sources: the `opencode export` JSON (opencode.py) and the
database (opencode_db.py).

The conversation is rebuilt as OpenCode's `MessageV2.toModelMessages` hands it to the model:
- user: its text parts (not `ignored`, not empty); a `compaction` part is the text "What did we do so far?", a
  `subtask` part "The following tool was executed by the user"; files are dropped with a warning (rows are text).
- assistant: failed messages (`error`) are left out; each step (`step-start` opens one) is one assistant message:
  its text, its tool calls (`tool` parts), then one `tool` message per call: the output, the error, "[Tool
  execution was interrupted]" for a call that never finished, "[Old tool result content cleared]" for a result
  OpenCode cleared; reasoning only with `--thinking`.
- compaction (`MessageV2.filterCompacted`): after a finished summary (an assistant message with `summary`), the
  context starts at the user message that asked for it, then the summary (and the kept tail, if it names one). The
  summary itself is not a turn: OpenCode asked for it with its own prompt, which the log does not keep.

Turns: each assistant step with `--trace`; without it, each step that does not end in tool calls (the final reply
of an exchange), in a conversation of user texts and final replies. A turn's line is where its message's id is
in an export file; in the database, the turn's number (1, 2, ...) in the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from machine_lsp.core.schema import ContentPart, Message, TextPart, ThinkingPart, ToolCall, text_of
from machine_lsp.core.transcripts.base import Turn, TurnList, answer_source, tool_call
from machine_lsp.core.transcripts.path import EMPTY, Chunk, SharedPath

HARNESS = "opencode"
_COMPACTION_PROMPT = "What did we do so far?"
_SUBTASK_PROMPT = "The following tool was executed by the user"
_INTERRUPTED = "[Tool execution was interrupted]"
_CLEARED = "[Old tool result content cleared]"


@dataclass
class _Step:
    """One model call inside an assistant message: what it said and the tools it called (with their results)."""

    text: list[str]
    reasoning: list[str]
    tools: list[dict[str, Any]]


class MessageReader:
    """One session's messages (an export's or the database's, in order) -> its turns."""

    def __init__(self, uri: str, session_id: str | None, *, trace: bool, thinking: bool) -> None:
        self.uri = uri
        self.session_id = session_id
        self.trace = trace
        self.thinking = thinking

    def read(self, messages: list[dict[str, Any]], line_of: Any, result: TurnList) -> TurnList:
        by_id = {text_value(m.get("info", {}).get("id")): index for index, m in enumerate(messages)}
        context: Chunk[Message] = EMPTY
        warnings: Chunk[str] = EMPTY
        ordinal = 0
        # The context each message adds, kept so a compaction with a kept tail can replay it.
        added: list[tuple[Chunk[Message], Chunk[str]]] = []
        for index, message in enumerate(messages):
            info = message.get("info") if isinstance(message.get("info"), dict) else {}
            parts = [p for p in message.get("parts") or [] if isinstance(p, dict)]
            start_context, start_warnings = context, warnings
            role = info.get("role")
            message_id = text_value(info.get("id")) or f"#{index + 1}"
            if role == "user":
                user, user_warnings = self._user(parts, message_id)
                if user is not None:
                    context = context.then([user])
                warnings = warnings.then(user_warnings)
            elif role == "assistant":
                steps = _steps(parts)
                failed = info.get("error") is not None and not _aborted_with_output(info, parts)
                for step_index, step in enumerate(steps):
                    answer, tool_messages, step_warnings = self._assistant(step, message_id)
                    # Plain: a step that calls tools is not a final reply. A compaction summary is not a turn: OpenCode
                    # asked for it with a prompt of its own that the log does not keep.
                    if (self.trace or not step.tools) and not info.get("summary"):
                        ordinal += 1
                        line = ordinal if line_of is None else line_of(index, message_id)
                        entry_id = message_id if len(steps) == 1 else f"{message_id}:{step_index + 1}"
                        turn_warnings = warnings.then(step_warnings)
                        result.append(self._turn(info, answer, context, turn_warnings, line, entry_id))
                    if failed:
                        continue  # OpenCode leaves a failed message out of what it sends next
                    if self.trace:
                        context = context.then([answer, *tool_messages])
                    elif not step.tools and text_of(answer).strip():
                        context = context.then([answer])
                    warnings = warnings.then(step_warnings)
                if _is_finished_summary(info):
                    context, warnings = self._after_compaction(
                        messages, by_id, info, added, context, warnings
                    )
            added.append((start_context, start_warnings))
        result.line_count = result.line_count or ordinal
        return result

    def _turn(
        self,
        info: dict[str, Any],
        answer: Message,
        context: Chunk[Message],
        warnings: Chunk[str],
        line: int,
        entry_id: str,
    ) -> Turn:
        """The turn that `answer` ends, after `context`."""
        turn_messages = context.then([answer])
        return Turn(
            line=line,
            end_line=line,
            messages=SharedPath(turn_messages),  # type: ignore[arg-type]
            answer_index=turn_messages.size - 1,
            source=answer_source(
                self.uri,
                HARNESS,
                self.session_id,
                line,
                entry_id,
                model=info.get("modelID"),
                provider=info.get("providerID"),
            ),
            tags_blocked=self._blocked(info, answer),
            warnings=SharedPath(warnings),  # type: ignore[arg-type]
        )

    def _after_compaction(
        self,
        messages: list[dict[str, Any]],
        by_id: dict[str, int],
        summary_info: dict[str, Any],
        added: list[tuple[Chunk[Message], Chunk[str]]],
        context: Chunk[Message],
        warnings: Chunk[str],
    ) -> tuple[Chunk[Message], Chunk[str]]:
        """filterCompacted: the asking user message, the summary, then (if named) the kept tail before them."""
        asked_index = by_id.get(text_value(summary_info.get("parentID")))
        if asked_index is None:
            return context, warnings
        asked_parts = [p for p in messages[asked_index].get("parts") or [] if isinstance(p, dict)]
        compaction = next((p for p in asked_parts if p.get("type") == "compaction"), None)
        if compaction is None:
            return context, warnings
        # The messages from the asking user message on (it and the summary): context minus what came before it.
        before_ask, before_ask_warnings = added[asked_index] if asked_index < len(added) else (EMPTY, EMPTY)
        from_ask = SharedPath(context).to_list()[before_ask.size :]
        new_context: Chunk[Message] = EMPTY.then(from_ask)
        tail_id = text_value(compaction.get("tail_start_id"))
        tail_index = by_id.get(tail_id) if tail_id else None
        if tail_index is not None and tail_index < asked_index:
            tail_start = added[tail_index][0].size
            tail = SharedPath(before_ask).to_list()[tail_start:]
            new_context = new_context.then(tail)
        return new_context, warnings

    def _user(self, parts: list[dict[str, Any]], message_id: str) -> tuple[Message | None, list[str]]:
        texts: list[str] = []
        warnings: list[str] = []
        for part in parts:
            kind = part.get("type")
            if (
                kind == "text"
                and not part.get("ignored")
                and isinstance(part.get("text"), str)
                and part["text"]
            ):
                texts.append(part["text"])
            elif kind == "file" and part.get("mime") not in ("text/plain", "application/x-directory"):
                name = part.get("filename") or "file"
                warnings.append(
                    f"message {message_id}: an attached {part.get('mime') or 'file'} ({name}) was dropped: "
                    "rows carry text only"
                )
            elif kind == "compaction":
                texts.append(_COMPACTION_PROMPT)
            elif kind == "subtask":
                texts.append(_SUBTASK_PROMPT)
        if not texts:
            return None, warnings
        content: str | list[ContentPart] = texts[0] if len(texts) == 1 else [TextPart(t) for t in texts]
        return Message(role="user", content=content), warnings

    def _assistant(self, step: _Step, message_id: str) -> tuple[Message, list[Message], list[str]]:
        parts: list[ContentPart] = []
        if self.thinking:
            parts.extend(ThinkingPart(text) for text in step.reasoning if text)
        text = "".join(step.text)
        tool_calls: list[ToolCall] = []
        tool_messages: list[Message] = []
        if self.trace:
            for tool in step.tools:
                call_id = text_value(tool.get("callID")) or f"call_{message_id}_{len(tool_calls)}"
                state = tool.get("state") if isinstance(tool.get("state"), dict) else {}
                arguments = state.get("input") if state.get("input") is not None else {}
                name = text_value(tool.get("tool"))
                tool_calls.append(tool_call(call_id, name, arguments))
                tool_messages.append(
                    Message(role="tool", content=_tool_output(state), tool_call_id=call_id, name=name)
                )
        content: str | list[ContentPart]
        if parts:
            content = [*parts, *([TextPart(text)] if text else [])]
        else:
            content = text
        answer = Message(role="assistant", content=content, tool_calls=tool_calls or None)
        return answer, tool_messages, []

    def _blocked(self, info: dict[str, Any], answer: Message) -> str | None:
        error = info.get("error")
        if isinstance(error, dict):
            name = error.get("name") or "error"
            if name == "MessageAbortedError":
                return "the reply was aborted (interrupted): cannot be tagged good"
            data = error.get("data") if isinstance(error.get("data"), dict) else {}
            detail = data.get("message")
            return f"the reply failed ({name}{': ' + str(detail) if detail else ''}): cannot be tagged good"
        if info.get("finish") == "length":
            return (
                "finish is length (the reply was cut off at the token limit): cannot be tagged good; "
                "tag it bad instead"
            )
        has_text = bool(text_of(answer).strip())
        if self.trace:
            return None if has_text or answer.tool_calls else "the reply is empty: nothing to train on"
        return None if has_text else "the reply has no text: nothing to train on"


def _steps(parts: list[dict[str, Any]]) -> list[_Step]:
    """An assistant message's model calls: a `step-start` part opens each (a message without one is one step)."""
    steps: list[_Step] = []
    current: _Step | None = None
    for part in parts:
        kind = part.get("type")
        if kind == "step-start" or current is None:
            current = _Step([], [], [])
            steps.append(current)
            if kind == "step-start":
                continue
        if kind == "text" and isinstance(part.get("text"), str):
            current.text.append(part["text"])
        elif kind == "reasoning" and isinstance(part.get("text"), str):
            current.reasoning.append(part["text"])
        elif kind == "tool":
            current.tools.append(part)
    return [step for step in steps if step.text or step.reasoning or step.tools] or [_Step([], [], [])]


def _tool_output(state: dict[str, Any]) -> str:
    status = state.get("status")
    if status == "completed":
        if isinstance(state.get("time"), dict) and state["time"].get("compacted"):
            return _CLEARED
        output = state.get("output")
        return output if isinstance(output, str) else msgspec.json.encode(output).decode()
    if status == "error":
        metadata = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
        if metadata.get("interrupted") is True and isinstance(metadata.get("output"), str):
            return metadata["output"]
        return str(state.get("error") or "")
    return _INTERRUPTED


def _aborted_with_output(info: dict[str, Any], parts: list[dict[str, Any]]) -> bool:
    """OpenCode still sends an aborted message that got some output (it skips every other failed one)."""
    error = info.get("error")
    aborted = isinstance(error, dict) and error.get("name") == "MessageAbortedError"
    return aborted and any(p.get("type") not in ("step-start", "reasoning") for p in parts)


def _is_finished_summary(info: dict[str, Any]) -> bool:
    return bool(info.get("summary")) and bool(info.get("finish")) and not info.get("error")


def text_value(value: Any) -> str:
    return value if isinstance(value, str) else ""
