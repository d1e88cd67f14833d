"""What every transcript adapter produces: assistant turns with their conversation and where they came from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

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


class Turn(msgspec.Struct, omit_defaults=True):
    """One assistant answer that can be tagged, with the conversation that led to it.

    `line`..`end_line` (1-based, inclusive) is the span of the file that selects this turn; `messages` ends with the
    answer at `answer_index`; `tags_blocked` says why the turn cannot be tagged good (None when it can).
    """

    line: int
    end_line: int
    messages: list[Message]
    answer_index: int
    source: Source
    tags_blocked: str | None = None
    warnings: list[str] = msgspec.field(default_factory=list)  # e.g. an image dropped from the conversation
    extra: dict[str, Any] = msgspec.field(default_factory=dict)  # a chat row's other top-level keys (`tools`)


class TranscriptError(Exception):
    """A transcript cannot be read at a precise place. str() is `uri:line:column: message` (as much as known)."""

    def __init__(self, uri: str, message: str, line: int | None = None, column: int | None = None) -> None:
        self.uri = uri
        self.message = message
        self.line = line
        self.column = column
        super().__init__(self.location() + message)

    def location(self) -> str:
        where = display_path(self.uri)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where + ": "


class TurnList(list[Turn]):
    """The turns of a file in file order, plus the lines that could not be read (kept so that a broken line
    elsewhere in the file does not stop the user tagging a good one)."""

    def __init__(
        self, turns: list[Turn] | None = None, problems: list[TranscriptError] | None = None
    ) -> None:
        super().__init__(turns or [])
        self.problems: list[TranscriptError] = problems or []
        self.line_count = 0
        self.uri = ""
        self.adapter = ""
        self.notes: list[str] = []  # e.g. a half-written last line skipped (the harness is still writing)


class TranscriptAdapter(Protocol):
    """`sniff` sees the first non-blank line; an adapter may also define `sniff_lines(lines)`, which sees the
    first few non-blank lines (SNIFF_LINES) and is preferred when present: some logs start with bookkeeping lines
    (Claude Code's `summary`, `file-history-snapshot` and queue lines)."""

    name: str

    def sniff(self, first_line: str) -> bool: ...

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList: ...


class LogReader:
    """What every log reader starts from: the text, its uri, the reading asked for (`trace`: the harness's own
    context and tool calls kept; `thinking`: reasoning kept) and the turns read so far."""

    def __init__(self, text: str, uri: str, *, trace: bool, thinking: bool) -> None:
        self.text = text
        self.uri = uri
        self.trace = trace
        self.thinking = thinking
        self.result = TurnList()


class LineSniffer:
    """The sniffing of an adapter whose files are claimed by one of their first lines: `looks_like(obj)` says
    whether a decoded line is one of its lines."""

    @staticmethod
    def looks_like(obj: Any) -> bool:
        raise NotImplementedError

    def sniff(self, first_line: str) -> bool:
        return self.sniff_lines([first_line])

    def sniff_lines(self, lines: list[str]) -> bool:
        return any_line_decodes_to(lines, self.looks_like)


class LogLine:
    """A log line's JSON object (`data`, set by the dataclass that subclasses this), with the `type` and `message`
    every line-tree format (Claude Code's nodes, Pi's entries) reads safely: a missing or odd one reads as empty."""

    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data.get("type"))

    @property
    def message(self) -> dict[str, Any]:
        message = self.data.get("message")
        return message if isinstance(message, dict) else {}


def str_or_none(value: Any) -> str | None:
    """A log's string field, or None where it is missing, empty or not a string."""
    return value if isinstance(value, str) and value else None


def answer_source(
    uri: str,
    harness: str,
    session_id: Any,
    line: int,
    entry_id: Any = None,
    *,
    model: Any = None,
    provider: Any = None,
) -> Source:
    """Where a session log's turn comes from: the line its answer stands on (the one line that selects it), with the
    session, entry, model and provider the log names there, as read (a value that is not a non-empty string: not
    named)."""
    return Source(
        kind="session_log",
        uri=uri,
        line=line,
        end_line=line,
        entry_id=str_or_none(entry_id),
        session_id=str_or_none(session_id),
        harness=harness,
        model=str_or_none(model),
        provider=str_or_none(provider),
    )


def collect_turn(result: TurnList, make: Callable[..., Turn | None], *args: Any, **kwargs: Any) -> None:
    """Add the turn `make(*args, **kwargs)` builds from one line, or the problem it raises: a broken line never
    hides the others."""
    try:
        turn = make(*args, **kwargs)
    except TranscriptError as exc:
        result.problems.append(exc)
        return
    if turn is not None:
        result.append(turn)


def display_path(uri: str) -> str:
    """A file URI as the path a person typed; other URIs unchanged."""
    if uri.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(uri).path)
    return uri


def json_error_position(line_text: str, error: Exception) -> int:
    """1-based column (code points) of a msgspec JSON decode error on one line, from its `(byte N)` hint."""
    message = str(error)
    marker = "(byte "
    start = message.rfind(marker)
    if start == -1:
        return 1
    digits = message[start + len(marker) :].split(")", 1)[0]
    try:
        byte_offset = int(digits)
    except ValueError:
        return 1
    prefix = line_text.encode("utf-8", "surrogatepass")[:byte_offset]
    return len(prefix.decode("utf-8", "replace")) + 1


def decode_json_line(line_text: str, uri: str, line_no: int) -> Any:
    """Decode one JSONL line or raise TranscriptError pointing at the offending column."""
    try:
        return msgspec.json.decode(line_text)
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            column = len(line_text.rstrip()) + 1  # the JSON value ends early: point just past the text
            reason = "the line ends before the JSON value does"
        else:
            column = json_error_position(line_text, exc)
            reason = str(exc).split(" (byte", 1)[0].removeprefix("JSON is malformed: ")
        raise TranscriptError(uri, f"not valid JSON: {reason}", line_no, column) from None
    except RecursionError:
        raise TranscriptError(uri, "JSON nested too deeply to read", line_no, 1) from None


SNIFF_LINES = 8


def any_line_decodes_to(lines: list[str], looks_like: Callable[[Any], bool]) -> bool:
    """Whether one of the first SNIFF_LINES lines decodes to JSON that `looks_like` claims (a format's sniffer)."""
    for line in lines[:SNIFF_LINES]:
        try:
            obj = msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError):
            continue
        if looks_like(obj):
            return True
    return False


def assistant_message(parts: list[ContentPart], tool_calls: list[ToolCall]) -> Message:
    """An assistant message of `parts`: the parts themselves when thinking is kept, else their text joined."""
    content: str | list[ContentPart]
    if any(isinstance(part, ThinkingPart) for part in parts):
        content = list(parts)
    else:
        content = "\n".join(part.text for part in parts if isinstance(part, TextPart))
    return Message(role="assistant", content=content, tool_calls=list(tool_calls) or None)


def tool_call(call_id: str, name: str, arguments: Any) -> ToolCall:
    """An OpenAI-style tool call from a harness's decoded arguments (None: no arguments, an empty object)."""
    encoded = msgspec.json.encode(arguments if arguments is not None else {}).decode()
    return ToolCall(id=call_id, function=ToolFunction(name=name, arguments=encoded))


def logged_call(block: dict[str, Any], line: int, index: int, arguments: Any) -> ToolCall:
    """A tool call block as a log writes it (`id`, `name`): a block without an id gets one from its line and its
    place in the reply, so its result can still be paired."""
    return tool_call(str(block.get("id") or f"call_{line}_{index}"), str(block.get("name") or ""), arguments)


def dropped(line: int, what: str) -> str:
    """The warning for something a row cannot carry (`an image in a tool result`), dropped from the turn."""
    return f"line {line}: {what} was dropped: rows carry text only"


def json_objects(text: str, uri: str, result: TurnList) -> list[tuple[int, dict[str, Any]]]:
    """(1-based line, object) for every line that decodes to a JSON object; other lines become `result.problems`,
    except a half-written last line (no newline after it, the JSON ends early: the harness is still writing it),
    which is skipped with a note. Sets `result.line_count`."""
    lines = text.split("\n")
    result.line_count = len(lines) - (1 if lines and lines[-1] == "" else 0)
    last_index = len(lines) - 1
    objects: list[tuple[int, dict[str, Any]]] = []
    for index, raw in enumerate(lines):
        line_text = raw.removesuffix("\r")
        if not line_text.strip():
            continue
        line_no = index + 1
        try:
            obj = decode_json_line(line_text, uri, line_no)
        except TranscriptError as exc:
            if index == last_index and "ends before the JSON value does" in exc.message:
                result.notes.append(
                    f"line {line_no}: skipped a half-written last line (the agent may still be writing the log)"
                )
            else:
                result.problems.append(exc)
            continue
        if not isinstance(obj, dict):
            kind = "null" if obj is None else type(obj).__name__
            result.problems.append(TranscriptError(uri, f"expected a JSON object, got {kind}", line_no, 1))
            continue
        objects.append((line_no, obj))
    return objects


def reply_with_calls_blocked(has_text: bool) -> str:
    """Why a plain `good` of a reply that made tool calls is refused: tagged alone, its text (or its silence)
    would train the model to stop where the agent went on to call tools."""
    if has_text:
        # The text announces calls that never came back: as a final answer it would teach stopping there.
        return (
            "the session ends on this reply's tool calls, unanswered: tag it with --trace to keep the calls"
        )
    return "the agent called tools and never gave a final reply: tag it with --trace to keep the tool calls"


def unanswered_calls_warning(unanswered: list[str]) -> str:
    """The warning on a reply the session ended on: `unanswered` names its calls whose results never came back
    (e.g. `bash call (line 7)`); empty when every result came back but the model never answered them."""
    if unanswered:
        return f"the session ends on an unanswered {', '.join(unanswered)}: this turn is the reply up to the call"
    return "the session ends on tool results the model never answered: this turn is the reply up to the calls"
