"""The recording proxy's log (`machine capture proxy`, `.machine/captured/<start>-<id>.jsonl`): a turn per exchange.

Each line is one model exchange (`serve.captured_log.CapturedRow`): the request as sent, the answer as received,
and `messages`, the conversation as chat messages ending in the answer. A line is a turn when the upstream answered
2xx with an assistant turn; an exchange the upstream refused, or one whose conversation could not be read, is
reported at its line and leaves the other lines taggable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from machine_lsp.core.schema import Message, text_of
from machine_lsp.core.transcripts.base import (
    TranscriptError,
    Turn,
    TurnList,
    answer_source,
    any_line_decodes_to,
    collect_turn,
    display_path,
    json_objects,
)
from machine_lsp.core.transcripts.chat_jsonl import text_turns_only
from machine_lsp.core.transcripts.session_files import Homes, Session, file_session, first_object, glob_files

HARNESS = "proxy"
MARKER = "proxy"  # the value of every line's first key, `capture`


def is_captured_line(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("capture") == MARKER


class CapturedAdapter:
    name = HARNESS
    supported = "the recording proxy's logs (.machine/captured/*.jsonl)"

    def find_sessions(self, homes: Homes, project: Path) -> Iterator[Session]:
        """The recording proxy's logs in this project's store (they belong to it by where they are)."""
        from machine_lsp.core.store import find_machine_dir

        directory = find_machine_dir(project) / "captured"
        if directory.is_symlink():
            return  # the store never follows a link out of itself
        for path in glob_files(directory, "*.jsonl"):
            header = first_object(path)
            if header is not None and header.get("capture") == MARKER:
                yield file_session(self.name, path, header.get("session"), str(project))

    def sniff(self, first_line: str) -> bool:
        return first_line.startswith('{"capture":"proxy"')

    def sniff_lines(self, lines: list[str]) -> bool:
        return bool(lines) and self.sniff(lines[0]) and any_line_decodes_to(lines[:1], is_captured_line)

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        result = TurnList()
        session = PurePosixPath(display_path(uri)).stem
        for line_no, obj in json_objects(text, uri, result):
            collect_turn(result, _turn, obj, uri, line_no, session, trace=trace)
        return result


def _messages(obj: dict[str, Any], uri: str, line_no: int) -> list[Message] | None:
    if not is_captured_line(obj):
        raise TranscriptError(uri, 'not a captured exchange (no "capture": "proxy")', line_no, 1)
    status = obj.get("status")
    if not isinstance(status, int) or not 200 <= status < 300:
        return None  # the upstream refused it (kept in the log as it came): nothing was answered
    messages = obj.get("messages")
    if messages is None:
        problem = obj.get("problem") or "the exchange has no conversation"
        raise TranscriptError(uri, f"exchange not taggable: {problem}", line_no, 1)
    try:
        return msgspec.convert(messages, list[Message])
    except msgspec.ValidationError as exc:
        raise TranscriptError(uri, f"exchange not taggable: messages: {exc}", line_no, 1) from None


def _turn(obj: dict[str, Any], uri: str, line_no: int, session: str, *, trace: bool) -> Turn | None:
    messages = _messages(obj, uri, line_no)
    if not messages or messages[-1].role != "assistant":
        return None
    has_tools = any(message.role == "tool" or message.tool_calls for message in messages)
    blocked = None
    if obj.get("incomplete"):
        blocked = "the answer was cut off: cannot be tagged good"
    if not trace and has_tools:
        if text_of(messages[-1]).strip():
            messages = text_turns_only(messages)
        else:
            blocked = blocked or "the answer is only a tool call: tag it with --trace to keep the tool calls"
    if blocked is None and not text_of(messages[-1]).strip() and not messages[-1].tool_calls:
        blocked = "the answer is empty"
    tools = obj.get("tools")
    extra = {"tools": tools} if trace and has_tools and isinstance(tools, list) else {}
    session = obj.get("session") if isinstance(obj.get("session"), str) else session
    source = answer_source(uri, HARNESS, session, line_no, model=obj.get("model"), provider=obj.get("api"))
    return Turn(line_no, line_no, messages, len(messages) - 1, source, tags_blocked=blocked, extra=extra)
