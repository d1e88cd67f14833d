"""OpenCode sessions: the SQLite database (`~/.local/share/opencode/opencode.db`, read-only) and `opencode export`.

OpenCode (npm `opencode-ai`, checked against 1.18.33) keeps each session as messages (`info`: role, parentID,
finish, error, summary, modelID/providerID) with parts (text, reasoning, tool, file, step-start/step-finish,
compaction, subtask). The export JSON is `{"info": session, "messages": [{"info", "parts"}]}`; the database holds
the same objects in the `session`, `message` and `part` tables (`data` columns, JSON).

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

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.schema import ContentPart, Message, TextPart, ThinkingPart, ToolCall, text_of
from machine_lsp.core.transcripts.base import TranscriptError, Turn, TurnList, answer_source, tool_call
from machine_lsp.core.transcripts.path import EMPTY, Chunk, SharedPath
from machine_lsp.core.transcripts.session_files import Homes, Session

HARNESS = "opencode"
CHECKED_VERSION = "1.18.33"
_COMPACTION_PROMPT = "What did we do so far?"
_SUBTASK_PROMPT = "The following tool was executed by the user"
_INTERRUPTED = "[Tool execution was interrupted]"
_CLEARED = "[Old tool result content cleared]"


class OpenCodeExportAdapter:
    """`opencode export <id> > session.json` (pretty-printed or on one line)."""

    name = HARNESS
    supported = "OpenCode (opencode.db, `opencode export` JSON)"

    def __init__(self, describe_document: Callable[[Any], str]) -> None:
        """`describe_document`: the registry's words for a JSON document that is not an export (they list every
        format read, which only the registry knows)."""
        self.describe_document = describe_document

    def sessions_home(self, homes: Homes) -> Path:
        return homes.dir("XDG_DATA_HOME", homes.home() / ".local" / "share") / "opencode" / "opencode.db"

    def find_sessions(self, homes: Homes, project: Path) -> Iterator[Session]:
        """The database's top-level sessions; `session.directory` is the directory each ran in."""
        from machine_lsp.core.transcripts.opencode_db import db_sessions

        database = self.sessions_home(homes)
        if not database.is_file():
            return
        try:
            rows = db_sessions(database)
        except TranscriptError as exc:
            homes.notes.append(f"opencode: {database}: {exc.message}; its sessions are not listed")
            return
        for row in rows:
            if (
                not row.parent_id
            ):  # a sub-agent's session is listed under its parent's tool call, not on its own
                yield Session(self.name, row.id, database, row.directory, row.time_updated / 1000)

    def reads_file(self, path: Path) -> bool:
        """The database is SQLite, not text: it is read here, read-only, before any text sniffing."""
        from machine_lsp.core.transcripts.opencode_db import is_opencode_db

        return is_opencode_db(path)

    def load_file(self, path: Path, *, trace: bool, thinking: bool) -> TurnList:
        from machine_lsp.core.transcripts.opencode_db import load_db_turns

        return load_db_turns(path, trace=trace, thinking=thinking)

    def load_session(self, session: Session, *, trace: bool, thinking: bool) -> TurnList:
        from machine_lsp.core.transcripts.opencode_db import load_db_turns

        return load_db_turns(session.path, session.id, trace=trace, thinking=thinking)

    def sniff(self, first_line: str) -> bool:
        stripped = first_line.strip()
        if stripped == "{":
            return True  # a pretty-printed JSON document; turns() says so if it is not an OpenCode export
        try:
            obj = msgspec.json.decode(stripped)
        except (msgspec.DecodeError, RecursionError):
            return False
        return _is_export(obj)

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        result = TurnList()
        result.line_count = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        try:
            document = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            reason = str(exc).split(" (byte", 1)[0].removeprefix("JSON is malformed: ")
            result.problems.append(TranscriptError(uri, f"not valid JSON: {reason}", 1, 1))
            return result
        except RecursionError:
            result.problems.append(TranscriptError(uri, "JSON nested too deeply to read", 1, 1))
            return result
        if not _is_export(document):
            result.adapter = (
                "unknown"  # nobody's format: every line of it gets this answer (transcripts.turn_at)
            )
            result.problems.append(
                TranscriptError(
                    uri,
                    self.describe_document(document),
                    1,
                    1,
                )
            )
            return result
        messages = [m for m in document["messages"] if isinstance(m, dict)]
        session = document["info"]
        lines = _id_lines(text, messages)
        reader = _Reader(uri, _str(session.get("id")), trace=trace, thinking=thinking)
        return reader.read(messages, lambda index, message_id: lines.get(message_id, 1), result)


def _is_export(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("info"), dict)
        and isinstance(obj.get("messages"), list)
        and isinstance(obj["info"].get("id"), str)
        and obj["info"]["id"].startswith("ses_")
    )


def _id_lines(text: str, messages: list[dict[str, Any]]) -> dict[str, int]:
    """Line of each message id's first appearance (its `info`, which the export writes before its parts)."""
    lines: dict[str, int] = {}
    position = 0
    line = 1
    for message in messages:
        message_id = _str((message.get("info") or {}).get("id"))
        if not message_id:
            continue
        found = text.find(f'"{message_id}"', position)
        if found == -1:
            continue
        line += text.count("\n", position, found)
        position = found
        lines[message_id] = line
    return lines


# -- conversion ------------------------------------------------------------------------------------------------


@dataclass
class _Step:
    """One model call inside an assistant message: what it said and the tools it called (with their results)."""

    text: list[str]
    reasoning: list[str]
    tools: list[dict[str, Any]]


class _Reader:
    def __init__(self, uri: str, session_id: str | None, *, trace: bool, thinking: bool) -> None:
        self.uri = uri
        self.session_id = session_id
        self.trace = trace
        self.thinking = thinking

    def read(self, messages: list[dict[str, Any]], line_of: Any, result: TurnList) -> TurnList:
        by_id = {_str(m.get("info", {}).get("id")): index for index, m in enumerate(messages)}
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
            message_id = _str(info.get("id")) or f"#{index + 1}"
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
        asked_index = by_id.get(_str(summary_info.get("parentID")))
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
        tail_id = _str(compaction.get("tail_start_id"))
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
                call_id = _str(tool.get("callID")) or f"call_{message_id}_{len(tool_calls)}"
                state = tool.get("state") if isinstance(tool.get("state"), dict) else {}
                arguments = state.get("input") if state.get("input") is not None else {}
                name = _str(tool.get("tool"))
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


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
