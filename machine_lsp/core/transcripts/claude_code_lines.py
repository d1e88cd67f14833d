"""Claude Code log lines -> messages: the line node, its content blocks, a user line's parts, an assistant reply's
blocks (the line-level half of `claude_code`; the tree, the conversations and the turns are read there)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from machine_lsp.core.schema import ContentPart, Message, TextPart, ThinkingPart, ToolCall
from machine_lsp.core.transcripts.base import (
    LogLine,
    assistant_message,
    dropped,
    logged_call,
    unanswered_calls_warning,
)

INJECTED_PREFIXES = (
    "<system-reminder>",
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<task-notification>",
    "[Request interrupted by user",
)
#: A slash command the user typed (`/review-pr args`), as Claude Code writes it: `<command-message>`,
#: `<command-name>` and `<command-args>` tags in one text, in either order (1.0.x put the name first).
_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>", re.DOTALL)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
_COMMAND_TAGS = re.compile(r"\s*(<command-(message|name|args)>.*?</command-\2>\s*)+", re.DOTALL)
_LOCAL_OUTPUT = ("<local-command-stdout>", "<local-command-stderr>")


def typed_command(text: str) -> str | None:
    """The slash command a `<command-name>` text stands for, as the user typed it (`/review-pr check PR 141`),
    or None when the text is not only command tags."""
    name = _COMMAND_NAME.search(text)
    if name is None or _COMMAND_TAGS.fullmatch(text) is None:
        return None
    args = _COMMAND_ARGS.search(text)
    command = name.group(1).strip()
    command = command if command.startswith("/") else "/" + command
    arguments = args.group(1).strip() if args is not None else ""
    return f"{command} {arguments}" if arguments else command


def is_local_output(text: str) -> bool:
    """The output of a command Claude Code ran itself (`/compact`, `/exit`, `/model`): never sent as a prompt."""
    return text.lstrip().startswith(_LOCAL_OUTPUT)


def command_expansion(node: Node, children: list[Node]) -> str | None:
    """For a user line holding a slash command that was sent to the model (a custom command or a skill): the text
    it expanded to (the `isMeta` line under it; "" when there is none). None for any other line and for a command
    Claude Code ran itself (`/compact`, `/exit`: a `<local-command-stdout>` line follows it)."""
    if node.type != "user" or node.data.get("isMeta"):
        return None
    texts = [str(b.get("text") or "") for b in blocks(node.message.get("content")) if b.get("type") == "text"]
    if not any(typed_command(text) is not None for text in texts):
        return None
    users = [child for child in children if child.type == "user"]
    if any(is_local_output(plain_text(child.message.get("content"))) for child in users):
        return None
    expansion = next((child for child in users if child.data.get("isMeta")), None)
    return plain_text(expansion.message.get("content")) if expansion is not None else ""


def unanswered_calls(members: list[Node], answered: dict[str, Any]) -> str:
    """The warning for a reply the session ended on: its tool calls whose results never came back (not in
    `answered`), by name and line, or that the model never answered their results."""
    return unanswered_calls_warning(
        [
            f"{block.get('name') or 'a tool'} call (line {node.line})"
            for node in members
            for block in blocks(node.message.get("content"))
            if block.get("type") == "tool_use" and block.get("id") not in answered
        ]
    )


@dataclass
class Node(LogLine):
    uuid: str
    parent: str | None
    line: int
    data: dict[str, Any]

    @property
    def message_id(self) -> str | None:
        value = self.message.get("id")
        return value if isinstance(value, str) and value else None

    @property
    def is_api_error(self) -> bool:
        return bool(self.data.get("isApiErrorMessage")) or self.message.get("model") == "<synthetic>"


class Item(NamedTuple):
    """What one line adds to the conversation: a finished message, or an assistant line to merge by message.id."""

    kind: str  # "message" | "assistant"
    message: Message | None = None
    node: Node | None = None


@dataclass
class AssistantBuilder:
    parts: list[ContentPart] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)

    def build(self) -> Message:
        return assistant_message(self.parts, self.tool_calls)


def blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict)]


def plain_text(content: Any) -> str:
    return "\n".join(str(block.get("text") or "") for block in blocks(content) if block.get("type") == "text")


def text_turns(messages: list[Message]) -> list[Message]:
    """Typed user text and the assistant's final text replies: no injected context, tool calls or results."""
    kept = []
    for message in messages:
        if message.role == "user":
            kept.append(message)
        elif message.role == "assistant" and not message.tool_calls:
            content = message.content
            if (
                isinstance(content, str)
                and content
                or not isinstance(content, str)
                and any(isinstance(part, TextPart) and part.text for part in content)
            ):
                kept.append(message)
    return kept


def result_text(content: Any, line: int, warnings: list[str]) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text") or ""))
        elif isinstance(part, dict) and part.get("type") == "image":
            warnings.append(dropped(line, "an image in a tool result"))
    return "\n".join(texts)


def add_blocks(builder: AssistantBuilder, node: Node, thinking: bool, warnings: list[str]) -> None:
    for block in blocks(node.message.get("content")):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            builder.parts.append(TextPart(block["text"]))
        elif kind == "thinking" and thinking and isinstance(block.get("thinking"), str) and block["thinking"]:
            builder.parts.append(ThinkingPart(block["thinking"]))
        elif kind == "tool_use":
            builder.tool_calls.append(
                logged_call(block, node.line, len(builder.tool_calls), block.get("input"))
            )
        elif kind == "image":
            warnings.append(dropped(node.line, "an image in an assistant reply"))


def user_items(
    node: Node,
    content: Any,
    tool_names: dict[str, str],
    warnings: list[str],
    expansion: str | None = None,
) -> list[Item]:
    """A user line's parts: `tool` messages for its tool results, injected context as one `system` message, typed
    text as one `user` message (images and documents dropped with a warning).

    `expansion`: the text of the slash command this line holds, when the model was sent it (a prompt command or a
    skill, not a local one like `/compact`): the command as typed and its expanded text are then the user turn,
    in one message as Claude Code sends them."""
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    items: list[Item] = []
    user_texts: list[str] = []
    injected: list[str] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        part_type = part.get("type")
        if part_type == "tool_result":
            items.append(Item("message", _tool_result_message(part, node.line, tool_names, warnings)))
        elif part_type == "text" and isinstance(part.get("text"), str):
            text = part["text"]
            command = typed_command(text) if expansion is not None else None
            if command is not None:
                user_texts.append("\n".join(filter(None, [command, expansion])))
            elif text.lstrip().startswith(INJECTED_PREFIXES):
                injected.append(text)
            elif text:
                user_texts.append(text)
        elif part_type in ("image", "document"):
            warnings.append(dropped(node.line, f"an {part_type} in a user message"))
    if injected:
        items.append(Item("message", Message(role="system", content="\n".join(injected))))
    if user_texts:
        items.append(Item("message", Message(role="user", content="\n".join(user_texts))))
    return items


def _tool_result_message(
    part: dict[str, Any], line: int, tool_names: dict[str, str], warnings: list[str]
) -> Message:
    call_id = str(part.get("tool_use_id") or "")
    text = result_text(part.get("content"), line, warnings)
    if part.get("is_error") and not text.startswith("Error"):
        text = text or "(tool error)"
    return Message(role="tool", content=text, tool_call_id=call_id, name=tool_names.get(call_id))


CONVERSATION_TYPES = {"user", "assistant", "attachment", "system", "progress"}
_BOOKKEEPING_TYPES = {
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "last-prompt",
    "custom-title",
    "tag",
    "cost-state",
    "mode",
    "tools-used",
    "atis-latch",
    "api-request",
    "api-request-shape",
    "api-request-blob",
}


def looks_like_claude_code(obj: Any) -> bool:
    """A Claude Code log line: a conversation line of the uuid tree, or a bookkeeping line of a known kind."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        return False
    kind = obj["type"]
    if kind in CONVERSATION_TYPES:
        return "parentUuid" in obj and "uuid" in obj
    if kind == "summary":
        return "leafUuid" in obj
    if kind == "file-history-snapshot":
        return "messageId" in obj and "snapshot" in obj
    # Bookkeeping lines name the session. Only known kinds claim a file: any other object with a `type` and a
    # `sessionId` (another agent's event log) would be named a Claude Code log that then holds nothing. A log that
    # opens with a new kind is still claimed by the conversation lines among the first SNIFF_LINES.
    return kind in _BOOKKEEPING_TYPES and isinstance(obj.get("sessionId"), str)


def tree_answer_line(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The line test of a uuid-tree log (Claude Code's, Qwen Code's): an assistant line is a taggable answer, and
    --trace is offered without scanning the file (it also keeps the harness's injected context)."""
    if obj.get("type") == "assistant" and isinstance(obj.get("message"), dict) and "uuid" in obj:
        return {"tools": True, "stop": None}
    return None
