"""Claude Code session logs (`~/.claude/projects/<cwd slug>/<session>.jsonl`).

Checked against logs written by Claude Code 2.1.332 (`@anthropic-ai/claude-code`, run for real in tests/capture:
text, tool calls, parallel tool calls, a sub-agent, `/compact`) and a public log of 2.0.46 with sub-agent lines in the
main file (tests/fixtures/claude_code/README.md). Rules and versions: docs/CAPTURE.md.

The file is a tree: conversation lines (`user`, `assistant`, `attachment`, `system`, `progress`) carry `uuid` and
`parentUuid`; the conversation behind a line is the path root -> line, not file order. Bookkeeping lines without a
`uuid` (`summary`, `file-history-snapshot`, `queue-operation`, `last-prompt`, `api-request*`, `cost-state`, ...)
are not part of it. How the harness's own request is rebuilt from the path:

- A streamed assistant message is written as one line per content block; lines sharing `message.id` are one
  message (tool results and hook lines may sit between them). `tool_use` / `tool_result` pair by id into
  `tool_calls` and `tool` messages. API-error replies (`isApiErrorMessage`) are left out of later context.
- Sub-agent lines (`isSidechain: true`) never enter the main conversation; a file that holds only sidechain lines
  (a sub-agent transcript) is read as its own conversation.
- Compaction: a `compact_boundary` system line starts a new root (its `parentUuid` is null); the next user line
  (`isCompactSummary`) holds the summary and is the user message that starts the new context.
- Injected context is never a user turn: attachment lines (rendered as `<system-reminder>` text), meta lines
  (`isMeta`), `<system-reminder>` parts of a user message, local-command echoes and interruption markers.
- A slash command sent to the model (`.claude/commands/`, a skill) is the user turn: the command as typed, then its
  expanded text (the `isMeta` line), as Claude Code sends them. Commands it runs itself (`/compact`) stay injected. Plain
  tags drop it; `--trace` keeps it as `system` messages where the log records it (the one rule all harness
  adapters follow, docs/CAPTURE.md).
- A user message that is only `tool_result` parts is not a user turn. Thinking blocks only with `--thinking`.
- Turns: with `--trace` every assistant message; without it, the final replies (messages without tool calls, or a
  last message the session ended on). API errors, interrupted replies and `max_tokens` stops cannot be tagged good.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from machine_lsp.core.schema import Message, TextPart
from machine_lsp.core.transcripts.base import (
    LineSniffer,
    LogReader,
    TranscriptError,
    Turn,
    TurnList,
    answer_source,
    json_objects,
    reply_with_calls_blocked,
)
from machine_lsp.core.transcripts.claude_code_lines import (
    CONVERSATION_TYPES,
    AssistantBuilder,
    Item,
    Node,
    add_blocks,
    blocks,
    command_expansion,
    looks_like_claude_code,
    plain_text,
    text_turns,
    tree_answer_line,
    unanswered_calls,
    user_items,
)
from machine_lsp.core.transcripts.session_files import Homes, Session, glob_files, tree_sessions

HARNESS = "claude-code"
CHECKED_VERSIONS = "2.1.332 (run in tests), 2.0.46 (public log)"
_INTERRUPTED = "[Request interrupted by user"


class ClaudeCodeAdapter(LineSniffer):
    name = HARNESS  # one spelling: the harness name `machine sessions`, capture, serve and the editor use
    supported = "Claude Code session logs (~/.claude/projects/.../<session>.jsonl)"
    looks_like = staticmethod(looks_like_claude_code)

    def sessions_home(self, homes: Homes) -> Path:
        return homes.dir("CLAUDE_CONFIG_DIR", homes.home() / ".claude") / "projects"

    def find_sessions(self, homes: Homes, project: Path) -> Iterable[Session]:
        """`projects/<cwd slug>/*.jsonl`; each line's `cwd` is the directory it ran in."""
        return tree_sessions(self.name, glob_files(self.sessions_home(homes), "*/*.jsonl"))

    def answer_line(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        return tree_answer_line(obj)

    def near_miss(self, first: dict[str, Any]) -> str | None:
        kind = first.get("type")
        if "parentUuid" in first or (isinstance(kind, str) and "sessionId" in first and "uuid" in first):
            return "looks like a Claude Code session log but none of its first lines is a conversation line"
        return None

    def turns(self, text: str, uri: str, *, trace: bool = False, thinking: bool = False) -> TurnList:
        return _Reader(text, uri, trace=trace, thinking=thinking).read()


class _Prefix(NamedTuple):
    """The conversation up to a prompt line: every message, its plain-tag view, and warnings (shared, immutable)."""

    messages: tuple[Message, ...]
    warnings: tuple[str, ...]
    plain: tuple[Message, ...] = ()


_EMPTY = _Prefix((), ())


class _Reader(LogReader):
    def __init__(self, text: str, uri: str, *, trace: bool, thinking: bool) -> None:
        super().__init__(text, uri, trace=trace, thinking=thinking)
        self.nodes: dict[str, Node] = {}
        self.children: dict[str, list[Node]] = defaultdict(list)
        self.items: dict[str, tuple[Item, ...]] = {}
        self.item_warnings: dict[str, tuple[str, ...]] = {}
        self.prompt_prefix: dict[str, _Prefix] = {}
        self.session_id: str | None = None
        self.tool_names: dict[str, str] = {}
        self.result_nodes: dict[str, Node] = {}  # tool_use id -> the user line holding its result
        self.groups: dict[str, list[Node]] = {}  # message.id -> its assistant lines, in file order
        self._message_ids: set[str] = set()
        self._last_reply_line = 0  # the line of the conversation's last assistant line

    def read(self) -> TurnList:
        objects = json_objects(self.text, self.uri, self.result)
        main: list[Node] = []
        side: list[Node] = []
        for line_no, obj in objects:
            if self.session_id is None and isinstance(obj.get("sessionId"), str):
                self.session_id = obj["sessionId"]
            uuid = obj.get("uuid")
            if obj.get("type") not in CONVERSATION_TYPES or not isinstance(uuid, str) or not uuid:
                continue
            parent = obj.get("parentUuid")
            node = Node(uuid, parent if isinstance(parent, str) and parent else None, line_no, obj)
            (side if obj.get("isSidechain") else main).append(node)
        # A sub-agent transcript holds only sidechain lines: then they are the conversation. Otherwise sidechain
        # lines belong to another conversation and never leak into this one.
        chosen = main if any(n.type in ("user", "assistant") for n in main) else side
        if not any(n.type in ("user", "assistant") for n in chosen):
            if objects and not self.result.problems:
                self.result.problems.append(
                    TranscriptError(
                        self.uri,
                        "looks like a Claude Code session log but holds no user or assistant messages "
                        "(only summaries or snapshots)",
                    )
                )
            return self.result
        for node in chosen:
            self._add(node)
        self._last_reply_line = max((n.line for n in self.nodes.values() if n.type == "assistant"), default=0)
        groups: dict[str, list[Node]] = defaultdict(list)
        for node in self.nodes.values():
            if node.type == "assistant":
                groups[node.message_id or node.uuid].append(node)
            elif node.type == "user":
                for part in blocks(node.message.get("content")):
                    if part.get("type") == "tool_result" and isinstance(part.get("tool_use_id"), str):
                        self.result_nodes.setdefault(part["tool_use_id"], node)
        self.groups = {key: members for key, members in groups.items() if key and key in self._message_ids}
        turn_groups = [members for members in groups.values() if self._is_turn(members)]
        self.turn_nodes = {node.uuid for members in turn_groups for node in members}
        for members in sorted(turn_groups, key=lambda group: group[-1].line):
            turn = self._turn(members)
            if turn is not None:
                self.result.append(turn)
        if self.result.notes and self.result:
            last = max(self.result, key=lambda turn: turn.end_line)
            last.warnings.extend(self.result.notes)
        return self.result

    def _add(self, node: Node) -> None:
        """Take one conversation line into the tree (a repeated uuid is a problem, unless it is the same line)."""
        if node.uuid in self.nodes:
            first = self.nodes[node.uuid].line
            if node.data == self.nodes[node.uuid].data:
                return  # resumed sessions copy lines verbatim: the same line twice is one line
            self.result.problems.append(
                TranscriptError(self.uri, f"uuid {node.uuid} repeats line {first}", node.line)
            )
            return
        self.nodes[node.uuid] = node
        if node.parent is not None:
            self.children[node.parent].append(node)
        if node.type == "assistant":
            if node.message_id:
                self._message_ids.add(node.message_id)
            for block in blocks(node.message.get("content")):
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    self.tool_names[block["id"]] = str(block.get("name") or "")

    def _ends_session(self, members: list[Node]) -> bool:
        """Nothing follows this message: no line under its last line, or it holds the session's last reply (a call
        with only progress lines under it: a dispatched sub-agent still running when the log ends)."""
        return not self.children.get(members[-1].uuid) or members[-1].line >= self._last_reply_line

    def _has_tool_use(self, members: list[Node]) -> bool:
        return any(b.get("type") == "tool_use" for n in members for b in blocks(n.message.get("content")))

    def _is_turn(self, members: list[Node]) -> bool:
        if self.trace:
            return True
        # An intermediate tool-calling step belongs to the exchange whose final reply comes later.
        return not self._has_tool_use(members) or self._ends_session(members)

    # -- conversations -----------------------------------------------------------------------------------------

    def _is_prompt(self, node: Node) -> bool:
        """A user line that starts a new exchange (typed text or a compaction summary): merging by message.id never
        crosses one, so the conversation up to it is cached."""
        if node.type != "user" or node.data.get("isMeta"):
            return False
        return any(
            item.kind == "message" and item.message and item.message.role == "user"
            for item in self._items(node)
        )

    def _conversation(self, leaf: Node) -> tuple[_Prefix, list[Message], list[str]]:
        """The conversation behind `leaf`: the cached prefix through the nearest prompt line above it, then the
        messages (and warnings) of the lines from there to `leaf`."""
        segment: list[Node] = []
        base = _EMPTY
        seen: set[str] = set()
        current: Node | None = leaf
        below = leaf
        while current is not None:
            if current.uuid in seen:
                base = _Prefix(
                    (), (f"line {current.line}: lines form a cycle; the conversation starts here",)
                )
                break
            seen.add(current.uuid)
            if current is not leaf and self._is_prompt(current):
                base = self._prefix_through(current)
                break
            segment.append(current)
            below = current
            if current.parent is None:
                break
            parent = self.nodes.get(current.parent)
            if parent is None:
                base = _Prefix(
                    (),
                    (
                        f"line {below.line}: parent line {current.parent} is not in the file; the conversation starts here",
                    ),
                )
                break
            current = parent
        messages, warnings = self._apply(reversed(segment))
        return base, messages, warnings

    def _prefix_through(self, prompt: Node) -> _Prefix:
        cached = self.prompt_prefix.get(prompt.uuid)
        if cached is None:
            base, messages, warnings = self._conversation(prompt)
            cached = self.prompt_prefix[prompt.uuid] = _Prefix(
                base.messages + tuple(messages),
                tuple(_unique([*base.warnings, *warnings])),
                base.plain + tuple(text_turns(messages)),
            )
        return cached

    def _apply(self, nodes: Any) -> tuple[list[Message], list[str]]:
        """The messages of `nodes` (root -> leaf order, none of them before a prompt line but the first).

        Parallel tool calls branch the tree: each `tool_use` line of one message can be the parent of its own
        `tool_result` line, so a path holds only some of them. As the harness does, the first line of a message
        brings every line sharing its `message.id`, and the first tool result after it brings the results of all
        of that message's calls, in the order the harness wrote them (the order they finished, which is the order
        it sends them in; calls without a result last)."""
        out: list[Message | AssistantBuilder] = []
        warnings: list[str] = []
        done_groups: set[str] = set()
        pending_calls: list[str] = []
        emitted_results: set[str] = set()
        for node in nodes:
            if node.type == "assistant" and node.message_id in done_groups:
                continue
            for item in self._items(node):
                if item.kind == "assistant" and item.node is not None:
                    if item.node.message_id in done_groups:
                        continue  # (lines a compaction preserved come through the summary line, grouped too)
                    builder = AssistantBuilder()
                    members = self.groups.get(item.node.message_id or "", [item.node])
                    for member in members:
                        add_blocks(builder, member, self.thinking, warnings)
                    if item.node.message_id:
                        done_groups.add(item.node.message_id)
                    out.append(builder)
                    pending_calls = [call.id for call in builder.tool_calls]
                elif item.message is not None and item.message.role == "tool":
                    call_id = item.message.tool_call_id or ""
                    if call_id in emitted_results:
                        continue
                    if call_id in pending_calls:
                        for pending in self._in_result_order(pending_calls):
                            result = self._result_message(pending)
                            if result is not None and pending not in emitted_results:
                                out.append(result)
                                emitted_results.add(pending)
                        pending_calls = []
                    if call_id not in emitted_results:
                        out.append(item.message)
                        emitted_results.add(call_id)
                elif item.message is not None:
                    out.append(item.message)
            warnings.extend(self.item_warnings.get(node.uuid, ()))
        messages = [entry.build() if isinstance(entry, AssistantBuilder) else entry for entry in out]
        return messages, _unique(warnings)

    def _in_result_order(self, call_ids: list[str]) -> list[str]:
        def line_of(call_id: str) -> float:
            node = self.result_nodes.get(call_id)
            return node.line if node is not None else float("inf")

        return sorted(call_ids, key=line_of)

    def _result_message(self, call_id: str) -> Message | None:
        node = self.result_nodes.get(call_id)
        if node is None:
            return None
        return next(
            (
                item.message
                for item in self._items(node)
                if item.message is not None
                and item.message.role == "tool"
                and item.message.tool_call_id == call_id
            ),
            None,
        )

    def _items(self, node: Node) -> tuple[Item, ...]:
        cached = self.items.get(node.uuid)
        if cached is None:
            warnings: list[str] = []
            cached = self.items[node.uuid] = tuple(self._convert(node, warnings))
            if warnings:
                self.item_warnings[node.uuid] = tuple(warnings)
        return cached

    def _convert(self, node: Node, warnings: list[str]) -> list[Item]:
        kind = node.type
        if kind == "assistant":
            return [] if node.is_api_error else [Item("assistant", node=node)]
        if kind == "attachment":
            rendered = node.data.get("rendered")
            texts = [
                str(r.get("content")) for r in rendered or [] if isinstance(r, dict) and r.get("content")
            ]
            return [Item("message", Message(role="system", content="\n".join(texts)))] if texts else []
        if kind != "user":
            return []  # system lines (compact_boundary, local commands, errors) and progress: not sent as turns
        content = node.message.get("content")
        if node.data.get("isCompactSummary"):
            # The summary starts the new context; messages the compaction preserved follow it, as the harness
            # sends them (compact_boundary.compactMetadata.preservedMessages, anchored on this line).
            items = [Item("message", Message(role="user", content=plain_text(content)))]
            for kept in self._preserved(node):
                items.extend(self._items(kept))
            return items
        if node.data.get("isMeta"):
            parent = self.nodes.get(node.parent or "")
            if parent is not None and self._command_expansion(parent) is not None:
                return []  # a slash command's expanded text: part of the command's user turn
            text = plain_text(content)
            return [Item("message", Message(role="system", content=text))] if text else []
        return user_items(node, content, self.tool_names, warnings, self._command_expansion(node))

    def _command_expansion(self, node: Node) -> str | None:
        return command_expansion(node, self.children.get(node.uuid, []))

    def _preserved(self, summary: Node) -> list[Node]:
        boundary = self.nodes.get(summary.parent or "")
        metadata = boundary.data.get("compactMetadata") if boundary is not None else None
        preserved = metadata.get("preservedMessages") if isinstance(metadata, dict) else None
        if not isinstance(preserved, dict) or preserved.get("anchorUuid") not in (None, summary.uuid):
            return []
        uuids = preserved.get("uuids") or []
        return [self.nodes[uuid] for uuid in uuids if isinstance(uuid, str) and uuid in self.nodes]

    # -- turns -------------------------------------------------------------------------------------------------

    def _turn(self, members: list[Node]) -> Turn | None:
        last = members[-1]
        base, segment, segment_warnings = self._conversation(last)
        warnings = _unique([*base.warnings, *segment_warnings])
        if self._has_tool_use(members) and self._ends_session(members):
            warnings.append(unanswered_calls(members, self.result_nodes))
        if last.is_api_error:
            # The error line adds nothing to later context; it is still the answer of its own (blocked) turn.
            history = segment
            answer = Message(role="assistant", content=plain_text(last.message.get("content")))
        elif segment and segment[-1].role == "assistant":
            history, answer = segment[:-1], segment[-1]
        else:
            return None
        if self.trace:
            messages = [*base.messages, *history, answer]
        else:
            # The plain view: user text and final text replies before; the reply's text alone as the answer.
            if not last.is_api_error:
                builder = AssistantBuilder()
                for node in members:
                    add_blocks(builder, node, self.thinking, [])
                builder.tool_calls = []
                answer = builder.build()
            messages = [*base.plain, *text_turns(history), answer]
        return Turn(
            line=self._span_start(members),
            end_line=last.line,
            messages=messages,
            answer_index=len(messages) - 1,
            source=answer_source(
                self.uri,
                HARNESS,
                self.session_id,
                last.line,
                last.uuid,
                model=last.message.get("model"),
                provider="anthropic",
            ),
            tags_blocked=self._blocked(members, messages[-1]),
            warnings=warnings,
        )

    def _span_start(self, members: list[Node]) -> int:
        """First line of the lines between the previous turn on the path and this one (prompt, tool results)."""
        start = min(node.line for node in members)
        member_ids = {node.uuid for node in members}
        seen: set[str] = set()
        current = members[0].parent
        while current is not None and current not in seen:
            node = self.nodes.get(current)
            if node is None or (node.uuid not in member_ids and node.uuid in self.turn_nodes):
                break
            seen.add(current)
            start = min(start, node.line)
            current = node.parent
        return start

    def _blocked(self, members: list[Node], answer: Message) -> str | None:
        last = members[-1]
        if any(node.is_api_error for node in members):
            detail = plain_text(last.message.get("content"))[:120]
            return f"the reply is an API error ({detail}): cannot be tagged good"
        if any(node.message.get("stop_reason") == "max_tokens" for node in members):
            return "the reply was cut off at the token limit (stop_reason max_tokens): cannot be tagged good"
        for child in self.children.get(last.uuid, []):
            if child.type == "user" and plain_text(child.message.get("content")).lstrip().startswith(
                _INTERRUPTED
            ):
                return "the reply was interrupted by the user: cannot be tagged good"
        has_text = bool(
            answer.content
            if isinstance(answer.content, str)
            else any(isinstance(part, TextPart) and part.text for part in answer.content)
        )
        if self.trace:
            return None if has_text or answer.tool_calls else "the reply is empty: nothing to train on"
        if self._has_tool_use(members):
            return reply_with_calls_blocked(has_text)
        if has_text:
            return None
        return "the reply has no text: nothing to train on"


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
