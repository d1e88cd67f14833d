"""Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl`).

Checked against rollouts written by Codex 0.171.0 (`@openai/codex`, run for real in tests/capture: text, a shell
call, reasoning, auto-compaction) and a public rollout of 0.40.0 (tests/fixtures/codex/README.md). The older unwrapped
format (before `payload`, 0.2x-0.3x) is read from its documented shape only. Rules and versions: docs/CAPTURE.md.

Lines are `{"timestamp", "type", "payload"}`: `session_meta` (session id, cwd, provider), `turn_context` (model),
`response_item` (the items Codex sends back to the model: `message`, `reasoning`, `function_call` /
`function_call_output`, `custom_tool_call` / `custom_tool_call_output`, `local_shell_call`), `event_msg` (UI copies
of the same things: skipped, or they would count twice) and `compacted`. Older rollouts (before `payload`) put the
items themselves on the lines after a `{"id", "timestamp", "instructions"}` header.

- The conversation is the `response_item` lines in file order. Consecutive assistant output items (reasoning, text,
  tool calls) are one assistant message, as one Responses API answer; tool outputs pair with calls by `call_id`.
- A `compacted` line replaces the history: its `replacement_history` when present, else the user messages so far
  followed by the summary as a user message (what Codex sends after compacting).
- Codex's base instructions (its first developer message) are not among the items, and session_meta's
  `base_instructions` is not the text it sends (sections for tools it does not offer are cut), so they are left out.
- Injected context is never a user turn: developer messages, and user messages that hold only
  `<environment_context>`, `<user_instructions>`, `# AGENTS.md instructions`, skills/permissions instructions or a
  `<turn_aborted>` marker. Plain tags drop it; `--trace` keeps it as `system` messages (docs/CAPTURE.md).
- Reasoning: the summary text only with `--thinking`; encrypted reasoning is always dropped.
- Turns: with `--trace` every assistant message; without it the final replies (no tool calls). A reply followed
  by a turn abort cannot be tagged good.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from machine_lsp.core.transcripts.base import (
    LineSniffer,
    LogReader,
    Turn,
    TurnList,
    answer_source,
    assistant_message,
    dropped,
    json_objects,
    reply_with_calls_blocked,
    str_or_none,
    unanswered_calls_warning,
)
from machine_lsp.core.transcripts.session_files import Homes, Session, file_session, first_object, glob_files

HARNESS = "codex"
CHECKED_VERSIONS = "0.171.0 (run in tests), 0.40.0 (public rollout)"
_LINE_TYPES = {"session_meta", "response_item", "turn_context", "event_msg", "compacted"}
_ITEM_TYPES = {
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "web_search_call",
}
_CALLS = {"function_call", "custom_tool_call", "local_shell_call"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
_INJECTED = re.compile(
    r"^\s*(<(environment_context|user_instructions|skills_instructions|permissions instructions|apps_instructions"
    r"|plugins_instructions|collaboration_mode|turn_aborted|subagent_notification|user_shell_command)\b"
    r"|# AGENTS\.md instructions)"
)
_ABORTED = "<turn_aborted>"
_ABORTED_BLOCK = "the turn was aborted (interrupted): cannot be tagged good"


def looks_like_codex(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    if obj.get("type") in _LINE_TYPES and "payload" in obj:
        return True
    # The older unwrapped format: a header line, then bare items and `record_type: state` lines.
    return ("instructions" in obj and "id" in obj and "timestamp" in obj) or obj.get("record_type") == "state"


class CodexAdapter(LineSniffer):
    name = HARNESS
    supported = "Codex rollouts (~/.codex/sessions/.../rollout-*.jsonl)"
    looks_like = staticmethod(looks_like_codex)

    def sessions_home(self, homes: Homes) -> Path:
        return homes.dir("CODEX_HOME", homes.home() / ".codex") / "sessions"

    def find_sessions(self, homes: Homes, project: Path) -> Iterator[Session]:
        """`sessions/YYYY/MM/DD/rollout-*.jsonl`; `session_meta.payload.cwd` is the directory it ran in."""
        for path in glob_files(self.sessions_home(homes), "*/*/*/rollout-*.jsonl"):
            meta = first_object(path)
            payload = meta.get("payload") if meta and meta.get("type") == "session_meta" else None
            if isinstance(payload, dict):
                yield file_session(self.name, path, payload.get("id"), payload.get("cwd"))

    def answer_line(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """An assistant message or tool call item (--trace offered: it keeps the injected context)."""
        payload = obj.get("payload")
        if obj.get("type") != "response_item" or not isinstance(payload, dict):
            return None
        kind = payload.get("type")
        if (kind == "message" and payload.get("role") == "assistant") or kind in _CALLS:
            return {"tools": True, "stop": None}
        return None

    def near_miss(self, first: dict[str, Any]) -> str | None:
        if "payload" in first and "timestamp" in first:
            kind = first.get("type")
            return f"looks like a Codex rollout but of a kind this version does not know (first line type {kind!r})"
        return None

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        return _Reader(text, uri, trace=trace, thinking=thinking).read()


@dataclass
class _Open:
    """The assistant message being assembled from consecutive output items."""

    first_line: int
    last_line: int = 0
    entry_id: str | None = None
    parts: list[ContentPart] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    call_lines: list[int] = field(default_factory=list)  # the line of each of `tool_calls`
    has_text: bool = False
    aborted: bool = False  # a turn abort followed it

    def build(self) -> Message:
        return assistant_message(self.parts, self.tool_calls)


class _Reader(LogReader):
    def __init__(self, text: str, uri: str, *, trace: bool, thinking: bool) -> None:
        super().__init__(text, uri, trace=trace, thinking=thinking)
        self.history: list[Message] = []
        self.plain: list[
            Message
        ] = []  # the plain-tag view of `history`, kept alongside (no refiltering per turn)
        self.warnings: list[str] = []
        self.open: _Open | None = None
        self.session_id: str | None = None
        self.provider: str | None = None
        self.model: str | None = None
        self.tool_names: dict[str, str] = {}
        self.pending_thinking: list[str] = []
        self.span_start = 1
        self.turn_since_input: Turn | None = None  # the last turn, until new input arrives
        self.answered: set[str] = set()  # call ids whose output is in the log
        # The last assistant message, while no later one closed: (it, built, its turn if any, the plain view
        # then, as the list and its length: `plain` only grows until a compaction replaces it).
        self.last_reply: tuple[_Open, Message, Turn | None, list[Message], int] | None = None

    def read(self) -> TurnList:
        for line_no, obj in json_objects(self.text, self.uri, self.result):
            kind = obj.get("type")
            payload = obj.get("payload")
            if kind in _LINE_TYPES and isinstance(payload, dict):
                if kind == "session_meta":
                    self.session_id = str_or_none(payload.get("id")) or self.session_id
                    self.provider = str_or_none(payload.get("model_provider")) or self.provider
                elif kind == "turn_context":
                    self.model = str_or_none(payload.get("model")) or self.model
                elif kind == "response_item":
                    self._item(payload, line_no)
                elif kind == "compacted":
                    self._compacted(payload, line_no)
                elif kind == "event_msg" and payload.get("type") == "turn_aborted":
                    self._aborted()
                elif kind == "event_msg" and payload.get("type") in ("token_count", "task_complete"):
                    self._close()  # one model response ends here: the next output items are a new message
                continue
            if kind == "token_usage_record":
                self._close()
                continue
            if "instructions" in obj and "id" in obj and "timestamp" in obj and "payload" not in obj:
                self.session_id = str_or_none(obj.get("id")) or self.session_id  # the older header line
            elif kind in _ITEM_TYPES:
                self._item(obj, line_no)
        self._close()
        self._ends_on_calls()
        if self.result.notes and self.result:
            self.result[-1].warnings.extend(self.result.notes)
        return self.result

    # -- items -------------------------------------------------------------------------------------------------

    def _item(self, item: dict[str, Any], line: int) -> None:
        kind = item.get("type")
        role = item.get("role")
        if kind == "message" and role == "assistant" or kind in _CALLS or kind == "reasoning":
            self._assistant_item(item, line)
            return
        if kind == "message":
            self._close()
            text = _content_text(item.get("content"), line, self.warnings)
            if role in ("developer", "system"):
                self._input(Message(role="system", content=text), real_input=False)
            elif role == "user":
                if _INJECTED.match(text):
                    if text.lstrip().startswith(_ABORTED):
                        self._aborted()
                    self._input(Message(role="system", content=text), real_input=False)
                elif text:
                    self._input(Message(role="user", content=text), real_input=True)
            return
        if kind in _OUTPUTS:
            self._close()
            call_id = str(item.get("call_id") or "")
            self.answered.add(call_id)
            # In a plain tag tool results are not in the row: an image dropped from one is no loss to warn of.
            output = _output_text(item.get("output"), line, self.warnings if self.trace else [])
            self._input(
                Message(role="tool", content=output, tool_call_id=call_id, name=self.tool_names.get(call_id)),
                real_input=True,
            )

    def _input(self, message: Message, *, real_input: bool) -> None:
        self.history.append(message)
        if message.role == "user":
            self.plain.append(message)
        if real_input:
            self.turn_since_input = None

    def _assistant_item(self, item: dict[str, Any], line: int) -> None:
        kind = item.get("type")
        if self.open is None:
            self.open = _Open(first_line=line)
        current = self.open
        current.last_line = line
        current.entry_id = str_or_none(item.get("id")) or current.entry_id
        if kind == "reasoning":
            if self.thinking:
                texts = [
                    str(part.get("text") or "")
                    for key in ("summary", "content")
                    for part in item.get(key) or []
                    if isinstance(part, dict) and part.get("text")
                ]
                current.parts.extend(ThinkingPart(text) for text in texts)
            return  # encrypted_content is never kept
        if kind == "message":
            text = _content_text(item.get("content"), line, self.warnings)
            if text:
                current.parts.append(TextPart(text))
                current.has_text = True
            return
        call_id = str(item.get("call_id") or item.get("id") or f"call_{line}")
        if kind == "function_call":
            name = str(item.get("name") or "")
            arguments = item.get("arguments")
            arguments = (
                arguments if isinstance(arguments, str) else msgspec.json.encode(arguments or {}).decode()
            )
        elif kind == "custom_tool_call":
            name = str(item.get("name") or "")
            arguments = msgspec.json.encode(
                item.get("input") or ""
            ).decode()  # free-form input, as a JSON string
        else:  # local_shell_call
            name = "local_shell"
            arguments = msgspec.json.encode(item.get("action") or {}).decode()
        self.tool_names[call_id] = name
        current.tool_calls.append(ToolCall(id=call_id, function=ToolFunction(name=name, arguments=arguments)))
        current.call_lines.append(line)

    def _close(self) -> None:
        """The open assistant message is complete: add it to the history and make it a turn."""
        current = self.open
        if current is None:
            return
        self.open = None
        message = current.build()
        before = self.history[:]
        self.history.append(message)
        is_turn = self.trace or not message.tool_calls
        self.last_reply = (current, message, None, self.plain, len(self.plain))
        if not is_turn:
            return
        if self.trace:
            messages = [*before, message]
        else:
            messages = [*self.plain, message]
        if _text_turns([message]):
            self.plain.append(message)
        blocked = None
        if not current.has_text and not message.tool_calls:
            blocked = "the reply is empty: nothing to train on"
        turn = self._append_turn(current, messages, blocked)
        self.last_reply = (current, message, turn, self.plain, len(self.plain))
        self.turn_since_input = turn
        self.span_start = current.last_line + 1

    def _ends_on_calls(self) -> None:
        """The log ends on a reply's tool calls (killed mid-call, or the model never answered their results):
        that reply is the session's last turn, with a warning naming the calls; a plain tag keeps its text only
        and cannot be good (its text announces calls that never came back), `--trace` keeps the calls."""
        if self.last_reply is None or not self.last_reply[1].tool_calls:
            return
        current, message, turn, plain, plain_length = self.last_reply
        unanswered = [
            f"{call.function.name or 'a tool'} call (line {line})"
            for call, line in zip(message.tool_calls or [], current.call_lines, strict=True)
            if call.id not in self.answered
        ]
        if turn is None:
            answer = Message(role="assistant", content=message.content)
            messages = [*plain[:plain_length], answer]
            turn = self._append_turn(current, messages, reply_with_calls_blocked(current.has_text))
        if current.aborted and turn.tags_blocked is None:
            turn.tags_blocked = _ABORTED_BLOCK
        turn.warnings.append(unanswered_calls_warning(unanswered))

    def _append_turn(self, current: _Open, messages: list[Message], blocked: str | None) -> Turn:
        """The turn answering with `current`, its context since the last one; appended to the result."""
        turn = Turn(
            line=min(self.span_start, current.first_line),
            end_line=current.last_line,
            messages=messages,
            answer_index=len(messages) - 1,
            source=self._source(current),
            tags_blocked=blocked,
            warnings=list(dict.fromkeys(self.warnings)),
        )
        self.result.append(turn)
        return turn

    def _source(self, current: _Open) -> Source:
        return answer_source(
            self.uri,
            HARNESS,
            self.session_id,
            current.last_line,
            current.entry_id,
            model=self.model,
            provider=self.provider,
        )

    def _aborted(self) -> None:
        self._close()
        if self.last_reply is not None:
            self.last_reply[0].aborted = True
        if self.turn_since_input is not None and self.turn_since_input.tags_blocked is None:
            self.turn_since_input.tags_blocked = _ABORTED_BLOCK

    def _compacted(self, payload: dict[str, Any], line: int) -> None:
        self._close()
        summary = str(payload.get("message") or "")
        # The summary Codex asked the model for is logged as an assistant message just before this line, but the
        # request that produced it is not: it is not a turn anyone can tag as sent.
        last = self.turn_since_input
        if last is not None and self.result and self.result[-1] is last:
            answer = last.messages[last.answer_index]
            text = answer.content if isinstance(answer.content, str) else ""
            if text.strip() and text.strip() in summary:
                self.result.pop()
                self.turn_since_input = None
                self.span_start = last.line
        replacement = payload.get("replacement_history")
        if isinstance(replacement, list):
            self.history = []
            saved_turns, last_reply = len(self.result), self.last_reply
            for item in replacement:
                if isinstance(item, dict):
                    self._item(item, line)
            self._close_without_turn(saved_turns)
            self.last_reply = last_reply  # the replayed history is context, not a reply the session ended on
            self.plain = _text_turns(self.history)
            return
        kept = [message for message in self.history if message.role == "user"]
        self.history = [*kept, Message(role="user", content=summary)] if summary else kept
        self.plain = _text_turns(self.history)

    def _close_without_turn(self, turn_count: int) -> None:
        """Replacement history may end in an assistant message: it is context, not a new turn."""
        if self.open is not None:
            self.history.append(self.open.build())
            self.open = None
        del self.result[turn_count:]


def _content_text(content: Any, line: int, warnings: list[str]) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("input_text", "output_text", "text"):
            texts.append(str(part.get("text") or ""))
        elif part.get("type") in ("input_image", "image"):
            warnings.append(dropped(line, "an image"))
    return "\n".join(texts)


def _output_text(output: Any, line: int, warnings: list[str]) -> str:
    """A tool output's text; an image in it (`input_image`, e.g. a screenshot tool's) is dropped with a warning."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return _output_text(output.get("content", ""), line, warnings)
    if not isinstance(output, list):
        return ""
    texts = []
    for part in output:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("input_image", "image"):
            warnings.append(dropped(line, "an image in a tool result"))
        else:
            texts.append(str(part.get("text") or ""))
    return "\n".join(texts)


def _text_turns(messages: list[Message]) -> list[Message]:
    """Typed user text and final text replies: no injected context, tool calls or tool results."""
    return [
        message
        for message in messages
        if message.role == "user"
        or (
            message.role == "assistant"
            and not message.tool_calls
            and isinstance(message.content, str)
            and message.content
        )
        or (
            message.role == "assistant"
            and not message.tool_calls
            and not isinstance(message.content, str)
            and any(isinstance(part, TextPart) and part.text for part in message.content)
        )
    ]
