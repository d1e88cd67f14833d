"""Pi coding-agent session logs (`~/.pi/agent/sessions/.../<ts>_<uuid>.jsonl`), formats v1, v2 and v3.

Line 1 is a `{"type":"session"}` header; every other line is an entry. From v2 on entries carry `id`/`parentId` and
form a tree (branches are new children of earlier entries); v1 is a plain list, so each entry's parent is the one
before it. The conversation behind an entry is the path root -> entry.

Turns: every assistant entry with `--trace`; without it, every assistant entry that ends an exchange (anything but
an intermediate `toolUse` stop), since a plain tag is about the final text reply.

The conversation is what Pi itself sends (checked against `@mariozechner/pi-coding-agent` 0.73.1, `buildSessionContext`
and `convertToLlm`): compaction and branch summaries carry Pi's own `<summary>` wrapper, a `!command` the user ran
(`bashExecution`) and extension messages (`custom`, `custom_message`) are user messages, a v1 compaction's
`firstKeptEntryIndex` is mapped the way Pi's v1->v2 migration maps it. Letta Code's local backend writes this same
format (`~/.letta/lc-local-backend/conversations/<id>/messages.jsonl`): it is read here and named "letta-code".

Cost is linear in the file: each entry's conversation is its parent's plus its own messages, shared (`SharedPath`),
never copied per turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from machine_lsp.core.schema import Message
from machine_lsp.core.transcripts.base import (
    LogReader,
    TranscriptError,
    Turn,
    TurnList,
    answer_source,
    decode_json_line,
    reply_with_calls_blocked,
    unanswered_calls_warning,
)
from machine_lsp.core.transcripts.path import EMPTY, Chunk, SharedPath
from machine_lsp.core.transcripts.pi_entries import (
    Entry,
    EntryConverter,
    compaction_summary,
    text_of_parts,
)
from machine_lsp.core.transcripts.session_files import Homes, Session, file_session, first_object, glob_files

HARNESS = "pi"
LETTA_HARNESS = "letta-code"
# Letta Code's local conversation ids (a Pi session id is a UUID).
_LETTA_SESSION_ID = re.compile(r"^(local-conv-|conv-|default$)")
_LINE_TYPES = {"session", "message", "model_change", "thinking_level_change", "compaction"}


class _Prefix(NamedTuple):
    """The conversation up to an entry: messages and the warnings about what was dropped, both shared chains."""

    messages: Chunk[Message]
    warnings: Chunk[str]


_EMPTY = _Prefix(EMPTY, EMPTY)


def _session_header(first_line: str) -> dict[str, Any] | None:
    try:
        obj = msgspec.json.decode(first_line)
    except (msgspec.DecodeError, RecursionError):
        return None
    return obj if isinstance(obj, dict) and obj.get("type") == "session" else None


def is_letta_session_id(value: Any) -> bool:
    return isinstance(value, str) and bool(_LETTA_SESSION_ID.match(value))


class PiSessionAdapter:
    name = HARNESS
    supported = "Pi session logs"

    def sniff(self, first_line: str) -> bool:
        return _session_header(first_line) is not None

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        return _SessionReader(text, uri, trace=trace, thinking=thinking).read()

    def sessions_home(self, homes: Homes) -> Path:
        return homes.dir("PI_CODING_AGENT_DIR", homes.home() / ".pi" / "agent") / "sessions"

    def find_sessions(self, homes: Homes, project: Path) -> Iterator[Session]:
        """`sessions/--<cwd>--/*.jsonl`; the header's `cwd` is the directory it ran in."""
        yield from _header_sessions(self.name, glob_files(self.sessions_home(homes), "*/*.jsonl"))

    def answer_line(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """An assistant message entry (Letta Code's too: the same format), with its stop reason."""
        message = obj.get("message")
        if obj.get("type") == "message" and isinstance(message, dict) and message.get("role") == "assistant":
            return {"tools": False, "stop": message.get("stopReason")}
        return None

    def near_miss(self, first: dict[str, Any]) -> str | None:
        kind = first.get("type")
        if kind in _LINE_TYPES and ("parentId" in first or kind == "session"):
            return 'looks like a Pi session log but its first line is not the {"type":"session"} header'
        return None


class LettaCodeAdapter:
    """Letta Code's local backend transcripts: Pi's v3 session format, a Letta conversation id in the header."""

    name = LETTA_HARNESS
    supported = "Letta Code (~/.letta/lc-local-backend/conversations/<id>/messages.jsonl)"

    def sniff(self, first_line: str) -> bool:
        header = _session_header(first_line)
        return header is not None and is_letta_session_id(header.get("id"))

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        return _SessionReader(text, uri, trace=trace, thinking=thinking, letta=True).read()

    def sessions_home(self, homes: Homes) -> Path:
        default = homes.home() / ".letta" / "lc-local-backend"
        return homes.dir("LETTA_LOCAL_BACKEND_DIR", default) / "conversations"

    def find_sessions(self, homes: Homes, project: Path) -> Iterator[Session]:
        """`conversations/<id>/messages.jsonl`; the header's `cwd` is the directory it ran in."""
        paths = glob_files(self.sessions_home(homes), "*/messages.jsonl")
        yield from _header_sessions(self.name, paths, named_by_dir=True)


def _header_sessions(harness: str, paths: list[Path], *, named_by_dir: bool = False) -> Iterator[Session]:
    """Logs that open with a `{"type":"session"}` header naming the session and the directory it ran in; without
    an id there, a session is named by its file (Letta Code's: by its directory)."""
    for path in paths:
        header = first_object(path)
        if header is None or header.get("type") != "session":
            continue
        session_id = header.get("id") or (path.parent.name if named_by_dir else None)
        yield file_session(harness, path, session_id, header.get("cwd"))


class _SessionReader(LogReader):
    def __init__(self, text: str, uri: str, *, trace: bool, thinking: bool, letta: bool = False) -> None:
        super().__init__(text, uri, trace=trace, thinking=thinking)
        self.letta = letta
        self.entries: dict[str, Entry] = {}
        self.order: list[Entry] = []
        # Assistant entries with a later assistant entry below them (their exchange went on), and the ids of the
        # calls whose results are in the file: a toolUse reply that nothing continued is where the session ended.
        self.continued: set[str] = set()
        self.answered: set[str] = set()
        self.assistant_above: dict[str, str | None] = {}
        self.session_id: str | None = None
        self.converter = EntryConverter(self.entries, trace=trace, thinking=thinking, letta=letta)
        self.prefixes: dict[str, _Prefix] = {}
        # v1 compactions name their first kept entry by its index among the file's JSON lines (header = 0).
        self.entry_at_json_index: dict[int, str] = {}
        self.v1_first_kept: dict[str, str | None] = {}

    # -- parsing ----------------------------------------------------------------------------------------------

    def read(self) -> TurnList:
        lines = self.text.split("\n")
        self.result.line_count = len(lines) - (1 if lines and lines[-1] == "" else 0)
        version: int | None = None
        previous_id: str | None = None
        json_index = -1
        for line_no, raw in enumerate(lines, start=1):
            line_text = raw.removesuffix("\r")
            if not line_text.strip():
                continue
            obj, is_json = self._decode(line_text, line_no, last=line_no == len(lines))
            json_index += is_json  # Pi counts every line that parses as JSON, whatever its shape
            if obj is None:
                continue
            if version is None:
                version = self._header(obj, line_no)
                if version is None:
                    return self.result
                continue
            previous_id = self._add_entry(obj, line_no, version, previous_id, json_index).id
        self.converter.letta = self.letta
        # In file order parents come before children, so each entry's prefix is its parent's (already built) plus
        # its own messages: one step per entry, and the turns share their common prefixes.
        for entry in self.order:
            if entry.is_assistant and self._is_turn(entry):
                self.result.append(self._turn(entry))
            self._prefix(entry.id, entry)
        if self.letta:
            self.result.adapter = LETTA_HARNESS
        return self.result

    def _decode(self, line_text: str, line_no: int, *, last: bool) -> tuple[dict[str, Any] | None, int]:
        """The line's entry (None: a problem or note was recorded) and whether it parsed as JSON (1 or 0)."""
        try:
            obj = decode_json_line(line_text, self.uri, line_no)
        except TranscriptError as exc:
            if last and "ends before the JSON value does" in exc.message:
                # No newline after it and the JSON ends early: the agent is still writing this line.
                self.result.notes.append(
                    f"line {line_no}: skipped a half-written last line (the agent may still be writing the log)"
                )
            else:
                self.result.problems.append(exc)
            return None, 0
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            self.result.problems.append(
                TranscriptError(self.uri, 'expected a Pi entry, a JSON object with a "type"', line_no, 1)
            )
            return None, 1
        return obj, 1

    def _header(self, obj: dict[str, Any], line_no: int) -> int | None:
        """The session header's format version (None: the file does not start with one)."""
        if obj["type"] != "session":
            self.result.problems.append(
                TranscriptError(self.uri, 'a Pi session starts with a {"type":"session"} header', line_no, 1)
            )
            return None
        raw_version = obj.get("version", 1)
        session_id = obj.get("id")
        self.session_id = session_id if isinstance(session_id, str) else None
        self.letta = self.letta or is_letta_session_id(session_id)
        return raw_version if isinstance(raw_version, int) else 1

    def _add_entry(
        self, obj: dict[str, Any], line_no: int, version: int, previous_id: str | None, json_index: int
    ) -> Entry:
        entry_id = obj.get("id")
        if version >= 2 and isinstance(entry_id, str) and entry_id:
            parent = obj.get("parentId")
            entry = Entry(entry_id, parent if isinstance(parent, str) else None, line_no, obj)
        else:
            # v1 (or an entry without an id): a linear log, each entry follows the previous one.
            entry = Entry(f"@{line_no}", previous_id, line_no, obj, synthetic_id=True)
        if entry.id in self.entries:
            self.result.problems.append(
                TranscriptError(
                    self.uri, f"entry id {entry.id} repeats line {self.entries[entry.id].line}", line_no
                )
            )
        self.entries[entry.id] = entry
        self.order.append(entry)
        self.entry_at_json_index[json_index] = entry.id
        self._note_continuation(entry)
        if version < 2 and obj["type"] == "compaction":
            index = obj.get("firstKeptEntryIndex")
            if isinstance(index, int) and not isinstance(index, bool):
                # As Pi's migrateV1ToV2: the entry at that index (the header, or nothing, keeps nothing).
                self.v1_first_kept[entry.id] = self.entry_at_json_index.get(index) if index > 0 else None
        if not self.letta and obj["type"] == "message" and isinstance(entry.message.get("id"), str):
            self.letta = True  # Pi's messages carry no id; Letta Code's local backend gives each one
        return entry

    @property
    def harness(self) -> str:
        return LETTA_HARNESS if self.letta else HARNESS

    def _note_continuation(self, entry: Entry) -> None:
        """Record which assistant entry `entry` follows (the nearest one above it) and what it answers."""
        parent = self.entries.get(entry.parent_id) if entry.parent_id is not None else None
        above = None
        if parent is not None:
            above = parent.id if parent.is_assistant else self.assistant_above.get(parent.id)
        self.assistant_above[entry.id] = above
        if entry.is_assistant and above is not None:
            self.continued.add(above)
        if entry.type == "message" and entry.message.get("role") == "toolResult":
            self.answered.add(str(entry.message.get("toolCallId")))

    def _ends_on_calls(self, entry: Entry) -> bool:
        """A reply whose tool calls the session ended on: no reply came after it (killed mid-call, or the model
        never answered the results)."""
        return entry.message.get("stopReason") == "toolUse" and entry.id not in self.continued

    def _is_turn(self, entry: Entry) -> bool:
        if self.trace:
            return True
        # An intermediate tool-calling step is part of the exchange whose final reply comes later.
        return entry.message.get("stopReason") != "toolUse" or self._ends_on_calls(entry)

    # -- conversations ---------------------------------------------------------------------------------------
    # The messages before an entry are those before its parent plus the parent's own, so they are memoised per
    # entry (`_Prefix`, chains of shared chunks, never mutated): a session of thousands of entries stays linear.

    def _prefix(self, entry_id: str | None, child: Entry) -> _Prefix:
        """Messages (and warnings) of the path root -> `entry_id`, inclusive."""
        chain: list[Entry] = []
        in_chain: set[str] = set()
        base = _EMPTY
        current = entry_id
        below = child
        while current is not None:
            known = self.prefixes.get(current)
            if known is not None:
                base = known
                break
            entry = self.entries.get(current)
            if entry is None:
                warning = f"line {below.line}: parent entry {current} is not in the file; the conversation starts here"
                base = _Prefix(EMPTY, EMPTY.then([warning]))
                break
            if entry.id in in_chain:
                warning = f"line {entry.line}: entries form a cycle; the conversation starts here"
                base = _Prefix(EMPTY, EMPTY.then([warning]))
                break
            chain.append(entry)
            in_chain.add(entry.id)
            below = entry
            current = entry.parent_id
        for entry in reversed(chain):
            base = self._extend(base, entry)
            self.prefixes[entry.id] = base
        return base

    def _extend(self, base: _Prefix, entry: Entry) -> _Prefix:
        if entry.type == "compaction":
            return self._compacted(entry)
        converted = self.converter.convert(entry)
        # Entries that add nothing (labels, model changes, tool steps in plain mode) share their parent's prefix.
        return _Prefix(base.messages.then(converted.messages), base.warnings.then(converted.warnings))

    def _compacted(self, compaction: Entry) -> _Prefix:
        """Pi's context after a compaction: the summary, then the entries from `firstKeptEntryId` on."""
        if compaction.id in self.v1_first_kept:
            first_kept: Any = self.v1_first_kept[compaction.id]
        else:
            first_kept = compaction.data.get("firstKeptEntryId")
        kept: list[Entry] = []
        current = compaction.parent_id
        seen: set[str] = set()
        while current is not None and current not in seen:
            entry = self.entries.get(current)
            if entry is None:
                break
            seen.add(current)
            kept.append(entry)
            if entry.id == first_kept:
                break
            current = entry.parent_id
        else:
            kept = []  # the kept entry is not on this path: only the summary survives
        if kept and kept[-1].id != first_kept:
            kept = []
        summary = compaction.data.get("summary")
        messages: list[Message] = [compaction_summary(summary if isinstance(summary, str) else "")]
        warnings: list[str] = []
        letta_summary = compaction.data.get("message")
        if self.letta and isinstance(letta_summary, dict):
            # Letta Code stores the summary message it puts in context with the compaction entry: use it as is.
            as_entry = Entry(
                compaction.id, None, compaction.line, {"type": "message", "message": letta_summary}
            )
            converted = self.converter.convert_uncached(as_entry)
            messages, warnings = list(converted.messages), list(converted.warnings)
        for entry in reversed(kept):
            if entry.type == "compaction":
                continue
            converted = self.converter.convert(entry)
            messages.extend(converted.messages)
            warnings.extend(converted.warnings)
        return _Prefix(EMPTY.then(messages), EMPTY.then(warnings))

    def _turn(self, answer_entry: Entry) -> Turn:
        before = self._prefix(answer_entry.parent_id, answer_entry)
        own_warnings: list[str] = []
        answer_message = answer_entry.message
        answer = self.converter.assistant(answer_message, answer_entry.line, own_warnings)
        if self._ends_on_calls(answer_entry):
            own_warnings.append(self._unanswered(answer_entry))
        messages = before.messages.then([answer])
        return Turn(
            line=self._span_start(answer_entry),
            end_line=answer_entry.line,
            messages=SharedPath(messages),  # type: ignore[arg-type]  # a read-only list, shared with other turns
            answer_index=messages.size - 1,
            source=answer_source(
                self.uri,
                self.harness,
                self.session_id,
                answer_entry.line,
                None if answer_entry.synthetic_id else answer_entry.id,
                model=answer_message.get("model"),
                provider=answer_message.get("provider"),
            ),
            tags_blocked=self._blocked(answer_message, answer),
            warnings=SharedPath(before.warnings.then(own_warnings)),  # type: ignore[arg-type]
        )

    def _unanswered(self, entry: Entry) -> str:
        content = entry.message.get("content")
        calls = [part for part in content if isinstance(part, dict)] if isinstance(content, list) else []
        return unanswered_calls_warning(
            [
                f"{part.get('name') or 'a tool'} call (line {entry.line})"
                for part in calls
                if part.get("type") == "toolCall" and str(part.get("id")) not in self.answered
            ]
        )

    def _span_start(self, answer_entry: Entry) -> int:
        """First line of the entries between the previous turn on the path and this one (the prompt, tool results)."""
        start = answer_entry.line
        seen = {answer_entry.id}
        current = answer_entry.parent_id
        while current is not None and current not in seen:
            entry = self.entries.get(current)
            if entry is None or (entry.is_assistant and self._is_turn(entry)):
                break
            seen.add(current)
            start = min(start, entry.line)
            current = entry.parent_id
        return start

    def _blocked(self, message: dict[str, Any], answer: Message) -> str | None:
        stop = message.get("stopReason")
        if stop == "error":
            detail = message.get("errorMessage")
            return "stopReason is error" + (f" ({detail})" if detail else "") + ": cannot be tagged good"
        if stop == "aborted":
            return "stopReason is aborted (the reply was interrupted): cannot be tagged good"
        if stop == "length":
            # Training on a cut-off reply teaches the model to stop mid-sentence. Tag it bad, or fix the source.
            return (
                "stopReason is length (the reply was cut off at the token limit): cannot be tagged good; "
                "tag it bad instead"
            )
        has_text = bool(text_of_parts(message.get("content")).strip())
        if self.trace:
            return None if has_text or answer.tool_calls else "the reply is empty: nothing to train on"
        if stop == "toolUse":
            return reply_with_calls_blocked(has_text)
        if has_text:
            return None
        return "the reply has no text: nothing to train on"
