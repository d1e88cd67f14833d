"""The rules about the order of a row's messages: a tool message answers an earlier call, a row ends as its kind
requires, and a trained answer has a user message before it (the per-message rules are in `rules`)."""

from __future__ import annotations

from typing import Any

from machine_lsp.core.validate.line_checks import LineChecker
from machine_lsp.core.validate.spans import _item_span, _Span, _span_of, _value_span


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


def check_tool_answer(
    ck: LineChecker,
    message: dict[str, Any],
    mspan: _Span | None,
    mrange: tuple[int, int],
    index: int,
    tool_ids: set[str],
    any_call: bool,
) -> None:
    """A tool message must answer a call an earlier assistant message made."""
    call_id = message.get("tool_call_id")
    if call_id is None:
        if not any_call:
            ck.add(
                "tool-unmatched",
                f"tool message {index + 1} answers no tool call (no assistant tool_calls before it)",
                *mrange,
            )
    elif isinstance(call_id, str) and call_id not in tool_ids:
        ck.add(
            "tool-unmatched",
            f"tool message {index + 1} answers tool call `{call_id}`, which no earlier assistant message made",
            *_span_of(_value_span(mspan, "tool_call_id"), mrange),
        )


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
