"""The rules about the order of a row's messages: a tool message answers an earlier call, a row ends as its kind
requires, and a trained answer has a user message before it (the per-message rules are in `rules`)."""

from __future__ import annotations

from typing import Any

from machine_lsp.core.validate.line_checks import LineChecker
from machine_lsp.core.validate.spans import MessageAt, _item_span, _Span, _span_of


def check_prompted(
    ck: LineChecker, messages: list[Any], roles: list[str | None], span: _Span | None, whole: tuple[int, int]
) -> None:
    """The trained answer (the last assistant message not marked `weight` 0 or `trainable` false) needs a user
    message before it: trained on alone, it teaches the model to answer nothing."""
    trained = [
        index
        for index, role in enumerate(roles)
        if role == "assistant"
        and messages[index].get("weight") != 0
        and messages[index].get("trainable") is not False
    ]
    if not trained or "user" in roles[: trained[-1]]:
        return
    index = trained[-1]
    ck.add(
        "no-user-turn",
        f"no user message before the trained assistant message {index + 1}: it would be trained as the "
        "answer to nothing",
        *_span_of(_item_span(span, index), whole),
    )


def check_tool_answer(ck: LineChecker, at: MessageAt, tool_ids: set[str], any_call: bool) -> None:
    """A tool message must answer a call an earlier assistant message made."""
    call_id = at.message.get("tool_call_id")
    if call_id is None:
        if not any_call:
            ck.add(
                "tool-unmatched",
                f"tool {at.name} answers no tool call (no assistant tool_calls before it)",
                *at.range,
            )
    elif isinstance(call_id, str) and call_id not in tool_ids:
        ck.add(
            "tool-unmatched",
            f"tool {at.name} answers tool call `{call_id}`, which no earlier assistant message made",
            *at.value_range("tool_call_id"),
        )


def check_results_follow_calls(
    ck: LineChecker, messages: list[Any], roles: list[str | None], span: _Span | None, whole: tuple[int, int]
) -> None:
    """A call's results come right after the assistant message that made it: Chat Completions refuses anything in
    between (400: tool_calls "must be followed by tool messages") and the cookbook renderers expect the same."""
    pending: set[str] = set()
    caller = 0
    for index, (message, role) in enumerate(zip(messages, roles, strict=True)):
        if role == "tool":
            pending.discard(_call_id(message.get("tool_call_id")))
            continue
        if pending and role != "assistant":
            if not _answered_later(messages, roles, index, pending):
                pending = set()  # the results never come: nothing is between the calls and them
                continue
            ck.add(
                "tool-results-apart",
                f"message {index + 1} ({role}) sits between assistant message {caller + 1}'s tool calls and their "
                "results: chat-format trainers need the results right after the calls; move it after them "
                "(`machine export sft` does)",
                *_span_of(_item_span(span, index), whole),
            )
            return
        pending = set()
        calls = message.get("tool_calls") if role == "assistant" else None
        if isinstance(calls, list):
            pending = {_call_id(call.get("id")) for call in calls if isinstance(call, dict)} - {""}
            caller = index


def _call_id(value: Any) -> str:
    """A call id as written, or "" when it is not a string (another rule reports that)."""
    return value if isinstance(value, str) else ""


def _answered_later(messages: list[Any], roles: list[str | None], start: int, pending: set[str]) -> bool:
    """Whether a result of one of the `pending` calls comes after message `start`, before the next assistant one."""
    for message, role in zip(messages[start + 1 :], roles[start + 1 :], strict=True):
        if role == "assistant":
            return False
        if role == "tool" and _call_id(message.get("tool_call_id")) in pending:
            return True
    return False


def check_ending(
    ck: LineChecker,
    roles: list[str | None],
    last_range: tuple[int, int],
    whole: tuple[int, int],
    is_eval: bool,
) -> None:
    """An eval row ends with the user turn the model answers; a training row with an assistant message."""
    if is_eval:
        if roles[-1] != "user":
            ck.add(
                "eval-last-not-user",
                f"an eval row must end with the user turn the model answers; it ends with `{roles[-1]}`",
                *last_range,
            )
    elif "assistant" not in roles:
        ck.add("no-assistant", "no assistant message: nothing to train on", *whole)
    elif roles[-1] != "assistant":
        ck.add(
            "last-not-assistant",
            f"a training row must end with an assistant message; it ends with `{roles[-1]}`",
            *last_range,
        )
