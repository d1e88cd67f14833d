"""Gemini CLI session logs: `~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl` (or `.json` up to 0.39).

Two formats, both read:
- up to 0.39: one JSON object per session, `{"sessionId", "projectHash", "startTime", "lastUpdated", "messages":
  [...]}` (rewritten whole on every change);
- from 0.40: append-only JSONL: a header line `{"sessionId", "projectHash", "startTime", "lastUpdated", "kind"}`,
  then message records (`{"id", "type", "content", ...}`; a record with an `id` seen before replaces that message
  where it stands: the CLI re-appends a message as its tool calls finish), `{"$set": {...}}` metadata updates (a
  `messages` list there replaces all messages) and `{"$rewindTo": id}` (that message and all after it are gone).
  This is the CLI's own replay (`chatRecordingService.loadConversationRecord`).

Messages: `user` (`content`: parts), `gemini` (`content`: a string or parts; `thoughts`; `toolCalls` with `args`
and `result`, the functionResponse parts the model was sent), `info` / `error` / `warning` (never sent: skipped).
A user message that holds only functionResponse parts repeats a tool call's result: skipped, as the CLI does when it
rebuilds the model's history. User text starting with `<session_context>` or `<hook_context>` is injected context
(the rule in docs/CAPTURE.md: dropped by a plain tag, a `system` message with --trace); one starting with `/` or `?`
is a CLI command, never sent to the model.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.schema import ContentPart, Message, TextPart, ThinkingPart, text_of
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
    unanswered_calls_warning,
)
from machine_lsp.core.transcripts.chat_jsonl import text_turns_only
from machine_lsp.core.transcripts.session_files import (
    HEAD_BYTES,
    Homes,
    Session,
    file_session,
    first_object,
    glob_files,
)

HARNESS = "gemini-cli"
_INJECTED = ("<session_context>", "<hook_context>")
_COMMAND = ("/", "?")


def is_header(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("sessionId"), str)
        and isinstance(obj.get("projectHash"), str)
    )


class GeminiCliAdapter(LineSniffer):
    name = HARNESS
    supported = "Gemini CLI (~/.gemini/tmp/<project>/chats/session-*.jsonl or .json)"

    def sniff_lines(self, lines: list[str]) -> bool:  # the header line, or 0.39's pretty-printed document
        if not lines:
            return False
        if lines[0].strip() == "{":  # the pretty-printed JSON of 0.39 and before
            head = "\n".join(lines[1:4])
            return '"sessionId"' in head and '"projectHash"' in head
        try:
            return is_header(msgspec.json.decode(lines[0]))
        except (msgspec.DecodeError, RecursionError):
            return False

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        result = TurnList()
        records = _records(text, uri, result)
        if records is None:
            return result
        header, messages = records
        _Builder(uri, header, result, trace=trace, thinking=thinking).run(messages)
        return result

    def sessions_home(self, homes: Homes) -> Path:
        return homes.dir("GEMINI_CLI_HOME", homes.home()) / ".gemini" / "tmp"

    def find_sessions(self, homes: Homes, project: Path) -> Iterator[Session]:
        """`tmp/<project>/chats/session-*.json[l]`: a project's chats are under a short name (0.40+:
        `tmp/<name>/.project_root` holds the path) or under the sha256 of the path (the header's `projectHash`)."""
        project_hash = hashlib.sha256(str(project).encode()).hexdigest()
        home = self.sessions_home(homes)
        kept: dict[str, tuple[int, Session]] = {}
        for path in [
            *glob_files(home, "*/chats/session-*.jsonl"),
            *glob_files(home, "*/chats/session-*.json"),
        ]:
            header = first_object(path) if path.suffix == ".jsonl" else _document_head(path)
            if header is None or not isinstance(header.get("sessionId"), str):
                continue
            try:
                cwd = (path.parent.parent / ".project_root").read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                cwd = str(project) if header.get("projectHash") == project_hash else ""
            session = file_session(self.name, path, header["sessionId"], cwd)
            # A resume in a later minute than the session began makes Gemini CLI start a second file (its name
            # carries the minute) holding only a header and the context, while the conversation goes on in the
            # first: one session per id, the file with the most in it.
            size = _size(path)
            if session.id not in kept or size > kept[session.id][0]:
                kept[session.id] = (size, session)
        for _size_kept, session in kept.values():
            yield session

    def answer_line(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """A model message record (--trace offered: it keeps the injected context)."""
        return (
            {"tools": True, "stop": None}
            if obj.get("type") == "gemini" and isinstance(obj.get("id"), str)
            else None
        )

    def near_miss(self, first: dict[str, Any]) -> str | None:
        if "projectHash" in first and "sessionId" in first:
            return (
                "looks like a Gemini CLI session (~/.gemini/tmp/<project>/chats/), but not in a shape this version "
                "reads (0.39's one JSON document or 0.40+ JSONL)"
            )
        return None


def _document_head(path: Path) -> dict | None:
    """The metadata of a 0.39-style session file (one JSON document; its id comes first)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    found = {key: value for key, value in re.findall(r'"(sessionId|projectHash)"\s*:\s*"([^"]*)"', head)}
    return found or None


def _records(text: str, uri: str, result: TurnList) -> tuple[dict[str, Any], list[tuple[int, dict]]] | None:
    """(the session's metadata, [(line, message)] in conversation order), or None with the problem in `result`."""
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped.rstrip():  # one JSON document: 0.39 and before
        return _whole_document(text, uri, result)
    objects = json_objects(text, uri, result)
    header: dict[str, Any] = {}
    messages: dict[str, tuple[int, dict]] = {}  # insertion-ordered: a re-set id keeps its place
    for line, obj in objects:
        if "$rewindTo" in obj and isinstance(obj["$rewindTo"], str):
            ids = list(messages)
            cut = ids.index(obj["$rewindTo"]) if obj["$rewindTo"] in ids else 0
            for gone in ids[cut:]:
                del messages[gone]
        elif isinstance(obj.get("$set"), dict):
            update = obj["$set"]
            header.update({k: v for k, v in update.items() if k != "messages"})
            if isinstance(update.get("messages"), list):
                messages = {m["id"]: (line, m) for m in update["messages"] if _is_message(m)}
        elif _is_message(obj):
            messages[obj["id"]] = (line, obj)
        elif is_header(obj):
            header.update(obj)
        else:
            result.problems.append(TranscriptError(uri, "not a Gemini CLI session record", line, 1))
    return header, list(messages.values())


def _is_message(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("id"), str)


def _whole_document(
    text: str, uri: str, result: TurnList
) -> tuple[dict[str, Any], list[tuple[int, dict]]] | None:
    result.line_count = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    try:
        document = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        result.problems.append(TranscriptError(uri, f"not valid JSON: {exc}", 1, 1))
        return None
    if is_header(document) and "messages" not in document:
        return document, []  # a JSONL log that so far holds only its header line
    if not is_header(document) or not isinstance(document.get("messages"), list):
        result.problems.append(
            TranscriptError(uri, "not a Gemini CLI session (no sessionId / messages)", 1, 1)
        )
        return None
    placed = []
    for message in document["messages"]:
        if _is_message(message):
            # A message's line: where its id is written (the file is rewritten whole, pretty-printed).
            found = re.search(r'"id"\s*:\s*' + re.escape(msgspec.json.encode(message["id"]).decode()), text)
            placed.append((text.count("\n", 0, found.start()) + 1 if found else 1, message))
    return document, placed


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        c for c in message.get("toolCalls") or [] if isinstance(c, dict) and isinstance(c.get("name"), str)
    ]


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, dict):
        return [content]
    return [part for part in content or [] if isinstance(part, dict)]


def _text(content: Any) -> str:
    return "".join(str(p.get("text", "")) for p in _parts(content) if "text" in p and not p.get("thought"))


def _result_text(result: Any) -> str:
    """The text the model was sent as a tool's result (the functionResponse's `output`, else its JSON)."""
    if isinstance(result, str):
        return result
    pieces = []
    for part in _parts(result):
        response = (part.get("functionResponse") or {}).get("response")
        if isinstance(response, dict) and isinstance(response.get("output"), str) and len(response) == 1:
            pieces.append(response["output"])
        elif response is not None:
            pieces.append(msgspec.json.encode(response).decode())
        elif "text" in part:
            pieces.append(str(part["text"]))
    return "\n".join(pieces)


class _Builder:
    def __init__(
        self, uri: str, header: dict[str, Any], result: TurnList, *, trace: bool, thinking: bool
    ) -> None:
        self.uri, self.result, self.trace, self.thinking = uri, result, trace, thinking
        self.session_id = header.get("sessionId") if isinstance(header.get("sessionId"), str) else None
        self.history: list[Message] = []
        self.span_start = 1

    def run(self, messages: list[tuple[int, dict]]) -> None:
        last: tuple[int, dict[str, Any]] | None = None  # the session's last reply
        for line, message in messages:
            kind = message.get("type")
            if kind == "user":
                self._user(message)
            elif kind == "gemini":
                self._answer(line, message)
                last = (line, message)
        if last is not None and self.result and _calls(last[1]):
            # The session ends on this reply's calls: killed mid-call, or the model never answered the results.
            unanswered = [
                f"{c['name']} call (line {last[0]})" for c in _calls(last[1]) if c.get("result") is None
            ]
            self.result[-1].warnings.append(unanswered_calls_warning(unanswered))

    def _user(self, message: dict[str, Any]) -> None:
        parts = _parts(message.get("content"))
        if parts and all("functionResponse" in part for part in parts):
            return  # a tool call's result again: the call's own `result` carries it
        text = _text(message.get("content"))
        if text.lstrip().startswith(_INJECTED):
            if self.trace:
                self.history.append(Message(role="system", content=text))
        elif text.strip() and not text.lstrip().startswith(_COMMAND):
            self.history.append(Message(role="user", content=text))

    def _answer(self, line: int, message: dict[str, Any]) -> None:
        parts: list[ContentPart] = []
        if self.thinking:
            for thought in message.get("thoughts") or []:
                if isinstance(thought, dict) and thought.get("description"):
                    subject = thought.get("subject")
                    text = (
                        f"**{subject}** {thought['description']}" if subject else str(thought["description"])
                    )
                    parts.append(ThinkingPart(thinking=text))
        text = _text(message.get("content"))
        if text:
            parts.append(TextPart(text=text))
        calls = _calls(message)
        answer = assistant_message(
            parts, [tool_call(str(c.get("id", "")), c["name"], c.get("args")) for c in calls]
        )
        self.history.append(answer)
        self._turn(line, message)
        for call in calls:
            if call.get("result") is not None:
                self.history.append(
                    Message(
                        role="tool",
                        content=_result_text(call["result"]),
                        tool_call_id=str(call.get("id", "")),
                    )
                )

    def _turn(self, line: int, message: dict[str, Any]) -> None:
        messages = list(self.history)
        blocked = None
        if not self.trace:
            has_text = bool(text_of(messages[-1]).strip())
            if has_text:
                messages = text_turns_only(messages)
            if _calls(message):
                # A step that went on to call tools is no final answer (its text, if any, announces the calls).
                blocked = reply_with_calls_blocked(has_text)
        if blocked is None and not any(m.role == "user" for m in messages):
            blocked = "no user message before this answer"
        model = message.get("model")
        source = answer_source(
            self.uri, HARNESS, self.session_id, line, message["id"], model=model, provider="google"
        )
        turn = Turn(
            min(self.span_start, line), line, messages, len(messages) - 1, source, tags_blocked=blocked
        )
        self.result.append(turn)
        self.span_start = line + 1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
