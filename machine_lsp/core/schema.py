"""Row schemas shared by every part of machine-lsp: chat messages, training/eval rows, tag records.

Everything is a msgspec Struct so rows decode and encode fast and strictly. `TrainingRow` keeps top-level keys it
does not know (a user's `{"messages": [...], "meta": {...}}` must survive a round trip), which msgspec Structs do
not do on their own, so it has dedicated decode/encode helpers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import msgspec

from machine_lsp.core.lines import split_lines
from machine_lsp.core.safe_files import read_input_text

Role = Literal["system", "developer", "user", "assistant", "tool"]
MatchKind = Literal["exact", "contains", "regex"]
Verdict = Literal["good", "bad"]
SourceKind = Literal["chat_jsonl", "session_log", "selection", "cli"]


class TextPart(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class ThinkingPart(msgspec.Struct, tag="thinking", tag_field="type"):
    thinking: str


ContentPart = TextPart | ThinkingPart


class ToolFunction(msgspec.Struct):
    name: str
    arguments: str  # JSON text, OpenAI style


class ToolCall(msgspec.Struct, omit_defaults=True):
    id: str
    function: ToolFunction
    type: str = "function"


class Message(msgspec.Struct, omit_defaults=True):
    """One chat message. `content` may be missing or null in the source (OpenAI's rows for an assistant message
    that only calls tools); it is read as "" then. `weight` (OpenAI, 0 or 1) and `trainable` (tinker-cookbook)
    say whether an assistant message is trained on."""

    role: Role
    # Default None (made "" below) rather than "": omit_defaults must never drop an empty content on encode.
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    weight: int | None = None
    trainable: bool | None = None

    def __post_init__(self) -> None:
        if self.content is None:
            self.content = ""


class TrainingRow(msgspec.Struct, omit_defaults=True):
    """`{"messages": [...]}` plus any other top-level keys, kept in `extra` (use decode/encode_training_row)."""

    messages: list[Message]
    extra: dict[str, Any] = msgspec.field(default_factory=dict)


class EvalRow(msgspec.Struct, omit_defaults=True):
    messages: list[Message]
    expected: str
    match: MatchKind = "exact"
    id: str | None = None


class Source(msgspec.Struct, omit_defaults=True):
    kind: SourceKind
    uri: str
    line: int | None = None  # 1-based
    end_line: int | None = None  # 1-based, inclusive
    entry_id: str | None = None
    session_id: str | None = None
    harness: str | None = None
    model: str | None = None
    provider: str | None = None
    context: str | None = None  # file context for selections


class TagRecord(msgspec.Struct, omit_defaults=True):
    id: str
    verdict: Verdict
    messages: list[Message]
    source: Source
    created_at: str
    tool_version: str
    note: str = ""
    original: str | None = None  # the model's answer when a rewrite replaced it
    trace: bool = False  # messages carry the full tool trace
    extra: dict[str, Any] = msgspec.field(
        default_factory=dict
    )  # the chat row's other top-level keys (`tools`)
    # Editing a tag appends a record, the store stays append-only: `supersedes` names the record this one replaces
    # (retag) or withdraws (`untag`: then this record is no tag itself, only the turn's history).
    supersedes: str | None = None
    untag: bool = False


# ---------------------------------------------------------------------------------------------------------------
# Helpers


def text_of(message: Message) -> str:
    """The visible text of a message: a string content, or its text parts joined (thinking is left out)."""
    if isinstance(message.content, str) or message.content is None:
        return message.content or ""
    return "".join(part.text for part in message.content if isinstance(part, TextPart))


def to_cookbook_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Plain dicts in the shape of tinker-cookbook's `renderers.Message` TypedDict.

    `content` stays a string or becomes a list of `{"type": "text"|"thinking", ...}` parts; `tool_calls` are
    OpenAI-style dicts (`{"type","id","function":{"name","arguments"}}`) that
    `tinker_cookbook.renderers.ToolCall.model_validate` accepts — the engine layer does that conversion, because
    the core never imports the cookbook.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "content": msgspec.to_builtins(message.content or "")}
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "type": call.type,
                    "id": call.id,
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
                for call in message.tool_calls
            ]
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
        if message.name is not None:
            item["name"] = message.name
        out.append(item)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Decode / encode

_json_encoder = msgspec.json.Encoder()
_tag_decoder = msgspec.json.Decoder(TagRecord)
_eval_decoder = msgspec.json.Decoder(EvalRow)
_message_list_decoder = msgspec.json.Decoder(list[Message])


def encode(obj: Any) -> bytes:
    """Compact JSON bytes for any schema object (TrainingRow goes through encode_training_row)."""
    if isinstance(obj, TrainingRow):
        return encode_training_row(obj)
    return _json_encoder.encode(obj)


def decode_tag_record(data: bytes | str) -> TagRecord:
    return _tag_decoder.decode(data)


def decode_eval_row(data: bytes | str) -> EvalRow:
    return _eval_decoder.decode(data)


def decode_messages(data: bytes | str) -> list[Message]:
    return _message_list_decoder.decode(data)


def training_row_from_obj(obj: Any) -> TrainingRow:
    """Build a TrainingRow from an already-decoded JSON object, keeping unknown keys.

    Raises msgspec.ValidationError with a `$.messages[...]` path when the shape is wrong.
    """
    if not isinstance(obj, dict):
        raise msgspec.ValidationError(f"Expected `object`, got `{type(obj).__name__}`")
    if "messages" not in obj:
        raise msgspec.ValidationError("Object missing required field `messages`")
    extra = {key: value for key, value in obj.items() if key != "messages"}
    try:
        messages = msgspec.convert(obj["messages"], list[Message])
    except msgspec.ValidationError as exc:
        # msgspec paths start at `$`; re-anchor them under `messages`.
        raise msgspec.ValidationError(str(exc).replace("`$", "`$.messages", 1)) from None
    return TrainingRow(messages=messages, extra=extra)


def decode_training_row(data: bytes | str) -> TrainingRow:
    return training_row_from_obj(msgspec.json.decode(data))


def training_row_to_obj(row: TrainingRow) -> dict[str, Any]:
    return {"messages": msgspec.to_builtins(row.messages), **row.extra}


def encode_training_row(row: TrainingRow) -> bytes:
    return _json_encoder.encode(training_row_to_obj(row))


class RowFileError(ValueError):
    """A chat JSONL file that cannot be read as training rows; the message names the file and line."""


def read_training_rows(path: Path) -> list[tuple[int, TrainingRow]]:
    """(1-based line, row) for every non-blank line, through our own parser (tool calls, content parts and
    extra keys all kept). Raises RowFileError naming the file and line; an empty file is an error too."""
    text = read_input_text(path, RowFileError, "a JSONL file")
    rows: list[tuple[int, TrainingRow]] = []
    for line_no, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            rows.append((line_no, training_row_from_obj(json.loads(line))))
        except (json.JSONDecodeError, msgspec.ValidationError) as exc:
            raise RowFileError(f"{path}:{line_no}: not a chat row: {exc}") from None
    if not rows:
        raise RowFileError(f"{path}: no rows")
    return rows
