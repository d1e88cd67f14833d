"""Chat JSONL: each line `{"messages": [...]}` is one turn; its last assistant message is the answer."""

from __future__ import annotations

import msgspec

from machine_lsp.core.schema import Message, Source, TextPart, text_of, training_row_from_obj
from machine_lsp.core.transcripts.base import TranscriptError, Turn, TurnList, collect_turn, decode_json_line

# Top-level keys of an eval row (not part of a training row) and of tool declarations (dropped with the tool calls
# when a turn is tagged without its trace). Every other key (`meta`, ...) goes into the tag record and the export.
EVAL_KEYS = frozenset({"expected", "match", "id"})
TOOL_KEYS = frozenset({"tools", "parallel_tool_calls", "functions"})


class ChatJsonlAdapter:
    name = "chat_jsonl"
    supported = 'chat JSONL ({"messages": [...]} per line)'

    def sniff(self, first_line: str) -> bool:
        return '"messages"' in first_line

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        result = TurnList()
        lines = text.split("\n")
        result.line_count = len(lines) - (1 if lines and lines[-1] == "" else 0)
        for line_no, raw in enumerate(lines, start=1):
            line_text = raw.removesuffix("\r")
            if not line_text.strip():
                continue
            collect_turn(result, self._turn, line_text, uri, line_no, trace=trace)
        return result

    def _turn(self, line_text: str, uri: str, line_no: int, *, trace: bool) -> Turn | None:
        obj = decode_json_line(line_text, uri, line_no)
        if not isinstance(obj, dict):
            kind = "null" if obj is None else type(obj).__name__
            raise TranscriptError(
                uri, f'expected a JSON object {{"messages": [...]}}, got {kind}', line_no, 1
            )
        try:
            row = training_row_from_obj(obj)
        except msgspec.ValidationError as exc:
            message, column = _shape_error(
                line_text, line_no
            )  # the validator's words and code where it has them
            raise TranscriptError(uri, message or f"not a chat row: {exc}", line_no, column) from None
        messages = row.messages
        answer_index = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None
        )
        if answer_index is None:
            return None  # a prompt-only row (e.g. an eval row): nothing to tag
        messages = messages[: answer_index + 1]
        source = Source(kind="chat_jsonl", uri=uri, line=line_no, end_line=line_no)
        blocked = None
        if not trace and _has_tools(messages):
            if text_of(messages[answer_index]).strip():
                messages = text_turns_only(messages)
                answer_index = len(messages) - 1
            else:
                blocked = "the answer is only a tool call: tag it with --trace to keep the tool calls"
        answer = messages[answer_index]
        if blocked is None and not text_of(answer).strip() and not answer.tool_calls:
            blocked = "the answer is empty"
        extra = {key: value for key, value in row.extra.items() if key not in EVAL_KEYS}
        if not _has_tools(messages):
            extra = {key: value for key, value in extra.items() if key not in TOOL_KEYS}
        return Turn(line_no, line_no, messages, answer_index, source, tags_blocked=blocked, extra=extra)


def _has_tools(messages: list[Message]) -> bool:
    return any(message.role == "tool" or message.tool_calls for message in messages)


def text_turns_only(messages: list[Message]) -> list[Message]:
    """The plain (non-trace) view of a conversation: tool messages and tool calls removed, and assistant
    messages that only called tools dropped."""
    kept: list[Message] = []
    for message in messages:
        if message.role == "tool":
            continue
        if message.role == "assistant":
            if not text_of(message).strip():
                continue
            content = message.content
            if not isinstance(content, str):
                content = [part for part in content if not isinstance(part, TextPart) or part.text]
            kept.append(Message(role="assistant", content=content))
            continue
        kept.append(message)
    return kept


def _shape_error(line_text: str, line_no: int) -> tuple[str | None, int]:
    """The validator's first error on the line as `message (code)`, and its column: tagging and validation say
    the same thing about a bad row (e.g. `unknown role "Assistant" ...; did you mean "assistant"? (role-unknown)`)."""
    try:
        from machine_lsp.core.validate import check_line
    except ImportError:
        return None, 1
    try:
        findings = check_line(line_text, line_no, "train").findings
    except Exception:  # the validator is a convenience here; never let it hide the real error
        return None, 1
    errors = [finding for finding in findings if finding.severity == "error"]
    if not errors:
        return None, 1
    return f"{errors[0].message} ({errors[0].code})", errors[0].column
