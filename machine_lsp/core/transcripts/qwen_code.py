"""Qwen Code session logs (`~/.qwen/projects/<cwd with / -> ->/chats/<sessionId>.jsonl`).

Checked against logs written by Qwen Code 0.24.4 (`@qwen-code/qwen-code`, run for real in tests/capture: a text
turn, a `run_shell_command` call, a resumed session) and the shape of 0.21.x logs. Rules: docs/CAPTURE.md.

The file is a tree like Claude Code's: every line has `uuid` and `parentUuid`, and the conversation behind a line is
the path root -> line. Lines are `user` (typed text), `assistant` (the model's reply: `message.role` "model"),
`tool_result` (the results of the calls of the reply before it) and `system` (bookkeeping: `attribution_snapshot`,
`ui_telemetry`; never sent). Messages carry Gemini-style `parts`: `{text}`, `{text, thought: true}` (thinking, kept
only with --thinking), `{functionCall: {id, name, args}}` and `{functionResponse: {id, name, response}}`.

What Qwen Code adds to a request and does not log (its system prompt, `<system-reminder>` parts with skills and the
date) is not in the log, so no row carries it. Turns: with `--trace` every assistant line; without it, the final
replies (no function call) and a last line the session ended on, with the user's text and the earlier final replies.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.schema import ContentPart, Message, TextPart, ThinkingPart, ToolCall
from machine_lsp.core.transcripts.base import (
    LineSniffer,
    TranscriptError,
    Turn,
    TurnList,
    answer_source,
    assistant_message,
    json_objects,
    reply_with_calls_blocked,
    tool_call,
)
from machine_lsp.core.transcripts.claude_code_lines import text_turns, tree_answer_line
from machine_lsp.core.transcripts.session_files import Homes, Session, glob_files, tree_sessions

HARNESS = "qwen-code"
CHECKED_VERSIONS = "0.24.4 (run in tests), 0.21.x (log shape)"
_TYPES = {"user", "assistant", "tool_result", "system"}


def looks_like_qwen_code(obj: Any) -> bool:
    """A Qwen Code log line: a tree line (`uuid`, `parentUuid`, `sessionId`) whose message has Gemini `parts`, or
    one of its own line kinds (`tool_result`, a `system` line with a `systemPayload`)."""
    if (
        not isinstance(obj, dict)
        or obj.get("type") not in _TYPES
        or "uuid" not in obj
        or "parentUuid" not in obj
    ):
        return False
    message = obj.get("message")
    if isinstance(message, dict) and isinstance(message.get("parts"), list):
        return True
    return obj["type"] == "tool_result" or (obj["type"] == "system" and "systemPayload" in obj)


class QwenCodeAdapter(LineSniffer):
    name = HARNESS
    supported = "Qwen Code (~/.qwen/projects/<cwd>/chats/<session>.jsonl)"
    looks_like = staticmethod(looks_like_qwen_code)

    def sessions_home(self, homes: Homes) -> Path:
        return homes.home() / ".qwen" / "projects"

    def find_sessions(self, homes: Homes, project: Path) -> Iterable[Session]:
        """`projects/<cwd with / -> ->/chats/<sessionId>.jsonl`; each line's `cwd` is the directory it ran in."""
        return tree_sessions(self.name, glob_files(self.sessions_home(homes), "*/chats/*.jsonl"))

    def answer_line(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        return tree_answer_line(obj)

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        return _Reader(uri, trace=trace, thinking=thinking).read(text)


class _Reader:
    def __init__(self, uri: str, *, trace: bool, thinking: bool) -> None:
        self.uri = uri
        self.trace = trace
        self.thinking = thinking
        self.result = TurnList()
        self.lines: dict[str, tuple[int, dict[str, Any]]] = {}  # uuid -> (line, object)
        self.answered: set[str] = set()  # lines some model reply comes after
        self.prefix: dict[str, tuple[Message, ...]] = {}  # user line uuid -> the conversation through it
        self.warnings: list[str] = []
        self.prompt_line = 0  # the line of the prompt the last `_path` stopped at (0: none)

    def read(self, text: str) -> TurnList:
        for line_no, obj in json_objects(text, self.uri, self.result):
            uuid = obj.get("uuid")
            if not isinstance(uuid, str) or not uuid or obj.get("type") not in _TYPES:
                continue
            if uuid in self.lines:
                if self.lines[uuid][1] != obj:
                    first = self.lines[uuid][0]
                    self.result.problems.append(
                        TranscriptError(self.uri, f"uuid {uuid} repeats line {first}", line_no)
                    )
                continue
            self.lines[uuid] = (line_no, obj)
        self._mark_answered()
        for uuid, (line_no, obj) in self.lines.items():
            if obj["type"] == "assistant" and self._is_turn(uuid, obj):
                self.result.append(self._turn(uuid, line_no, obj))
        if not self.result and not self.result.problems and self.lines:
            if not any(obj["type"] == "assistant" for _, obj in self.lines.values()):
                self.result.problems.append(
                    TranscriptError(self.uri, "a Qwen Code session log with no model reply yet")
                )
        return self.result

    def _mark_answered(self) -> None:
        """The lines a model reply comes after: a call with no reply after it is where the session ended."""
        for obj in [obj for _, obj in self.lines.values() if obj["type"] == "assistant"]:
            current = obj.get("parentUuid")
            while isinstance(current, str) and current not in self.answered:
                self.answered.add(current)
                current = self.lines[current][1].get("parentUuid") if current in self.lines else None

    def _is_turn(self, uuid: str, obj: dict[str, Any]) -> bool:
        return self.trace or not _calls(obj) or uuid not in self.answered

    # -- the conversation --------------------------------------------------------------------------------------

    def _path(self, uuid: str) -> tuple[tuple[Message, ...], list[dict[str, Any]]]:
        """The cached conversation through the nearest user line above `uuid`, and the lines from there on."""
        segment: list[dict[str, Any]] = []
        seen: set[str] = set()
        current: str | None = uuid
        while current is not None and current in self.lines and current not in seen:
            seen.add(current)
            obj = self.lines[current][1]
            if current != uuid and obj["type"] == "user":
                base = self._through(current)  # (may walk further up: the prompt line is set after it)
                self.prompt_line = self.lines[current][0]
                return base, segment[::-1]
            segment.append(obj)
            parent = obj.get("parentUuid")
            current = parent if isinstance(parent, str) else None
        if current is not None and current not in seen:
            self.warnings.append(
                f"parent line {current} is not in the file; the conversation starts after it"
            )
        return (), segment[::-1]

    def _through(self, user_uuid: str) -> tuple[Message, ...]:
        cached = self.prefix.get(user_uuid)
        if cached is None:
            base, segment = self._path(user_uuid)
            cached = self.prefix[user_uuid] = base + tuple(self._messages(segment))
        return cached

    def _messages(self, objects: list[dict[str, Any]]) -> list[Message]:
        out: list[Message] = []
        for obj in objects:
            parts = _parts(obj)
            if obj["type"] == "user":
                text = "\n".join(
                    str(p["text"]) for p in parts if isinstance(p.get("text"), str) and p["text"]
                )
                if text:
                    out.append(Message(role="user", content=text))
            elif obj["type"] == "assistant":
                out.append(self._assistant(parts))
            elif obj["type"] == "tool_result":
                out.extend(_results(parts))
        return out

    def _assistant(self, parts: list[dict[str, Any]]) -> Message:
        content: list[ContentPart] = []
        calls: list[ToolCall] = []
        for index, part in enumerate(parts):
            text = part.get("text")
            if isinstance(text, str) and text:
                if not part.get("thought"):
                    content.append(TextPart(text))
                elif self.thinking:
                    content.append(ThinkingPart(text))
            call = part.get("functionCall")
            if isinstance(call, dict):
                call_id = str(call.get("id") or f"call_{index}")
                calls.append(tool_call(call_id, str(call.get("name") or ""), call.get("args")))
        return assistant_message(content, calls)

    # -- turns -------------------------------------------------------------------------------------------------

    def _turn(self, uuid: str, line_no: int, obj: dict[str, Any]) -> Turn:
        self.prompt_line = 0
        base, segment = self._path(uuid)
        start = self.prompt_line or (self.lines[segment[0]["uuid"]][0] if segment else line_no)
        conversation = [*base, *self._messages(segment)]
        answer = conversation[-1]
        warnings = list(dict.fromkeys(self.warnings))
        if _calls(obj) and uuid not in self.answered:
            warnings.append(
                f"the session ends on this reply's tool calls (line {line_no}) with no reply to their results: "
                "this turn is the reply up to the calls"
            )
        if not self.trace:
            answer = Message(role="assistant", content=answer.content)
            conversation = [*text_turns(conversation[:-1]), answer]
        return Turn(
            line=start,
            end_line=line_no,
            messages=conversation,
            answer_index=len(conversation) - 1,
            source=answer_source(
                self.uri, HARNESS, obj.get("sessionId"), line_no, uuid, model=obj.get("model")
            ),
            tags_blocked=self._blocked(obj, answer),
            warnings=warnings,
        )

    def _blocked(self, obj: dict[str, Any], answer: Message) -> str | None:
        has_text = (
            bool(answer.content)
            if isinstance(answer.content, str)
            else any(isinstance(part, TextPart) and part.text for part in answer.content)
        )
        if self.trace:
            return None if has_text or answer.tool_calls else "the reply is empty: nothing to train on"
        if _calls(obj):
            return reply_with_calls_blocked(has_text)
        if has_text:
            return None
        return "the reply has no text: nothing to train on"


def _parts(obj: dict[str, Any]) -> list[dict[str, Any]]:
    message = obj.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


def _calls(obj: dict[str, Any]) -> bool:
    return any(isinstance(part.get("functionCall"), dict) for part in _parts(obj))


def _results(parts: list[dict[str, Any]]) -> list[Message]:
    """`tool` messages, as Qwen Code sends them: the response's `output` (or its `error`) as the content."""
    out = []
    for part in parts:
        response = part.get("functionResponse")
        if not isinstance(response, dict):
            continue
        body = response.get("response")
        if isinstance(body, dict) and isinstance(body.get("output"), str):
            content = body["output"]
        elif isinstance(body, dict) and isinstance(body.get("error"), str):
            content = body["error"]
        else:
            content = msgspec.json.encode(body).decode() if body is not None else ""
        name = response.get("name")
        out.append(
            Message(
                role="tool",
                content=content,
                tool_call_id=str(response.get("id") or ""),
                name=name if isinstance(name, str) else None,
            )
        )
    return out
