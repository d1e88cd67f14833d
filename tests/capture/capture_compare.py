"""What an agent really sent the model, in machine-lsp's message shape, to compare with a stored tag record.

`sent_conversation(recorded)` is the request's conversation plus the endpoint's reply, as OpenAI-style dicts
(`role`, `content`, `tool_calls` with parsed arguments, `tool_call_id`), with the harness's injected context
(system/developer messages, `<system-reminder>` parts, `<environment_context>` and the like) left out: the adapters
keep that context only as `system` messages under --trace, which `record_conversation` leaves out the same way.
"""

from __future__ import annotations

import json
import re
from typing import Any

from model_endpoint import Recorded

_CODEX_INJECTED = re.compile(
    r"^\s*(<(environment_context|user_instructions|skills_instructions|permissions instructions|turn_aborted)\b"
    r"|# AGENTS\.md instructions)"
)
# A slash command the user typed, as Claude Code sends it: `<command-message>`/`<command-name>`/`<command-args>`.
_CLAUDE_COMMAND = re.compile(
    r"<command-name>(.*?)</command-name>(?:.*?<command-args>(.*?)</command-args>)?", re.S
)
_CLAUDE_INJECTED = (
    "<system-reminder>",
    "<local-command-caveat>",
    "<command-name>",
    "<local-command-stdout>",
    "<task-notification>",
)


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    return {"id": call_id, "name": name, "arguments": arguments}


def _assistant(text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return message


def _is_command(text: str) -> bool:
    return text.lstrip().startswith(("<command-message>", "<command-name>")) and bool(
        _CLAUDE_COMMAND.search(text)
    )


def _typed(text: str) -> str:
    """A text part as the user typed it: a slash command's tags become `/name args`."""
    if not _is_command(text):
        return text
    match = _CLAUDE_COMMAND.search(text)
    assert match is not None
    name, args = match.group(1).strip(), (match.group(2) or "").strip()
    return f"{name} {args}" if args else name


def sent_conversation(recorded: Recorded) -> list[dict[str, Any]]:
    """The request's conversation followed by the reply the endpoint gave to it."""
    body = recorded.body
    reply = recorded.reply
    assert reply is not None
    out: list[dict[str, Any]] = []
    if recorded.api == "anthropic":
        for message in body["messages"]:
            content = message["content"]
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if message["role"] == "assistant":
                text = "\n".join(p["text"] for p in parts if p["type"] == "text" and p["text"])
                calls = [_call(p["id"], p["name"], p["input"]) for p in parts if p["type"] == "tool_use"]
                out.append(_assistant(text, calls))
            elif message["role"] == "user":
                for part in parts:
                    if part["type"] == "tool_result":
                        result = part.get("content")
                        if isinstance(result, list):
                            result = "\n".join(p.get("text", "") for p in result if p.get("type") == "text")
                        out.append(
                            {"role": "tool", "content": result or "", "tool_call_id": part["tool_use_id"]}
                        )
                # A command Claude Code ran itself (`/compact`) is sent with its output: context, not a request.
                local = any(
                    p["type"] == "text" and p["text"].lstrip().startswith("<local-command-stdout>")
                    for p in parts
                )
                typed = [
                    _typed(p["text"])
                    for p in parts
                    if p["type"] == "text"
                    and p["text"]
                    and (
                        (_is_command(p["text"]) and not local)
                        or not p["text"].lstrip().startswith(_CLAUDE_INJECTED)
                    )
                ]
                if typed:
                    out.append({"role": "user", "content": "\n".join(typed)})
    elif recorded.api == "responses":
        for item in body["input"]:
            kind = item.get("type", "message")
            if kind == "message" and item["role"] == "user":
                text = "\n".join(p["text"] for p in item["content"] if p["type"] == "input_text")
                if not _CODEX_INJECTED.match(text):
                    out.append({"role": "user", "content": text})
            elif kind == "message" and item["role"] == "assistant":
                text = "\n".join(p["text"] for p in item["content"] if p["type"] == "output_text")
                out.append(_assistant(text, []))
            elif kind == "function_call":
                call = _call(item["call_id"], item["name"], item["arguments"])
                if out and out[-1]["role"] == "assistant":
                    out[-1].setdefault("tool_calls", []).append(call)
                else:
                    out.append(_assistant("", [call]))
            elif kind == "function_call_output":
                output = item["output"]
                if isinstance(output, list):
                    output = "\n".join(p.get("text", "") for p in output)
                out.append({"role": "tool", "content": output, "tool_call_id": item["call_id"]})
    elif recorded.api == "chat":
        out.extend(_chat_conversation(body["messages"]))
    else:
        raise ValueError(f"no comparison for {recorded.api}")
    calls = [_call(call_id, name, arguments) for call_id, name, arguments in reply.calls()]
    out.append(_assistant(reply.text, calls))
    return out


def record_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stored record's messages in the same shape (system context left out, tool arguments parsed)."""
    out = []
    for message in messages:
        if message["role"] == "system":
            continue
        item: dict[str, Any] = {"role": message["role"], "content": message["content"]}
        if message.get("tool_calls"):
            item["tool_calls"] = [
                _call(call["id"], call["function"]["name"], call["function"]["arguments"])
                for call in message["tool_calls"]
            ]
        if message["role"] == "tool":
            item["tool_call_id"] = message["tool_call_id"]
        out.append(item)
    return out


def text_turns(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plain-tag view: user text and the assistant's text replies that made no tool call."""
    return [
        {"role": m["role"], "content": m["content"]}
        for m in conversation
        if m["role"] == "user" or (m["role"] == "assistant" and not m.get("tool_calls") and m["content"])
    ]


def _chat_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(
            p["text"]
            for p in content
            if p.get("type") == "text" and not p["text"].lstrip().startswith("<system-reminder>")
        )
    return content or ""


def _chat_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Chat Completions request's conversation (Qwen Code: system prompt and reminder parts left out)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "user":
            out.append({"role": "user", "content": _chat_text(message["content"])})
        elif role == "assistant":
            calls = [
                _call(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in message.get("tool_calls") or []
            ]
            out.append(_assistant(_chat_text(message.get("content")), calls))
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "content": _chat_text(message["content"]),
                    "tool_call_id": message["tool_call_id"],
                }
            )
    return out
