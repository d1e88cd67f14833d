"""The slow path: the rules of a row that is a JSON object, each finding with its exact position and, where
mechanical, a fix (a line that is not a JSON object: `line_checks`)."""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

from machine_lsp.core.validate.fast import (
    MATCHES,
    ROLES,
    _any_decoder,
    _double_encoded,
    _json_ok,
    _regex_error,
)
from machine_lsp.core.validate.findings import Fix, Kind, LineResult
from machine_lsp.core.validate.line_checks import LineChecker, describe, json_error, not_an_object
from machine_lsp.core.validate.order import (
    check_ending,
    check_prompted,
    check_results_follow_calls,
    check_tool_answer,
)
from machine_lsp.core.validate.spans import MessageAt, _item_span, _Span, _span_of, _spans, _value_span

# Roles that other chat formats use, mapped to ours (ShareGPT, Gemini, ...); offered as fixes.
ROLE_SYNONYMS = {
    "human": "user",
    "gpt": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "ai": "assistant",
}


# Content part types of multimodal chat formats (OpenAI chat, OpenAI responses, tinker-cookbook).
IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})


def _text_of_content(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return None


def _slow_check(text: str, line_no: int, kind: Kind) -> LineResult:
    ck = LineChecker(text, line_no)
    width = len(text)
    try:
        obj = _any_decoder.decode(text)
    except RecursionError:
        ck.add("json-too-deep", "JSON is nested too deeply to be a chat row", *ck.whole())
        return LineResult(ck.findings, None, None, width)
    except msgspec.DecodeError as exc:
        json_error(ck, exc)
        return LineResult(ck.findings, None, None, width)

    if not isinstance(obj, dict):
        not_an_object(ck, obj)
        return LineResult(ck.findings, None, None, width)

    root = _spans(text)
    expected = obj.get("expected")
    is_eval = kind == "eval" or (kind == "auto" and expected is not None)
    row_kind: Literal["train", "eval"] = "eval" if is_eval else "train"
    messages = obj.get("messages")
    prompt_key: str | None = None
    n_messages = 0
    messages_span = _value_span(root, "messages")
    if isinstance(messages, list) and messages:
        n_messages = len(messages)
        prompt_key = _check_messages(ck, messages, messages_span, is_eval)
    else:
        _no_messages(ck, obj, messages_span)

    _check_row_tools(ck, obj, root)
    if is_eval:
        _check_eval_keys(ck, obj, root)
    return LineResult(ck.findings, hash(text), prompt_key, width, row_kind, n_messages)


def _check_row_tools(ck: LineChecker, obj: dict[str, Any], root: _Span | None) -> None:
    """Top-level `tools` (OpenAI tool definitions, declared to the renderer) and the legacy `functions`."""
    whole = ck.whole()
    if obj.get("functions") is not None:
        ck.add(
            "functions-legacy",
            "`functions` is OpenAI's deprecated function-calling format, which tinker-cookbook renderers do not "
            'read; declare them as `"tools": [{"type": "function", "function": {"name": ..., "description": ..., '
            '"parameters": {...}}}]`',
            *_span_of(_value_span(root, "functions"), whole),
        )
    tools = obj.get("tools")
    if tools is None:
        return
    tspan = _value_span(root, "tools")
    trange = _span_of(tspan, whole)
    if not isinstance(tools, list):
        ck.add("tools-invalid", f"`tools` must be a list of tool definitions, not {describe(tools)}", *trange)
        return
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
            or not isinstance(function.get("description", ""), str)
            or not isinstance(function.get("parameters", {}), dict)
        ):
            ck.add(
                "tools-invalid",
                f'tool {index + 1} must look like {{"type": "function", "function": {{"name": "...", '
                '"description": "...", "parameters": {<JSON schema>}}}',
                *_span_of(_item_span(tspan, index), trange),
            )


def _no_messages(ck: LineChecker, obj: dict[str, Any], messages_span: _Span | None) -> None:
    """A row whose `messages` is missing, not a list, or empty."""
    messages = obj.get("messages")
    if "messages" not in obj:
        hint = (
            " (this looks like ShareGPT: rename `conversations` and use role/content)"
            if "conversations" in obj
            else ""
        )
        ck.add("messages-missing", f"row has no `messages` key{hint}", *ck.whole())
    elif not isinstance(messages, list):
        ck.add(
            "messages-not-list",
            f"`messages` must be a list of messages, not {describe(messages)}",
            *_span_of(messages_span, ck.whole()),
        )
    else:
        ck.add("messages-empty", "`messages` is empty", *_span_of(messages_span, ck.whole()))


def _check_messages(ck: LineChecker, messages: list[Any], span: _Span | None, is_eval: bool) -> str | None:
    tool_ids: set[str] = set()
    any_call = False
    roles: list[str | None] = []
    prompt_key: str | None = None
    whole = _span_of(span, ck.whole())
    for index, message in enumerate(messages):
        mspan = _item_span(span, index)
        mrange = _span_of(mspan, whole)
        if not isinstance(message, dict):
            ck.add(
                "message-not-object",
                f"message {index + 1} must be an object, not {describe(message)}",
                *mrange,
            )
            roles.append(None)
            continue
        at = MessageAt(message, mspan, mrange, index)
        role = _check_role(ck, at)
        roles.append(role)
        calls = message.get("tool_calls")
        has_calls = isinstance(calls, list) and len(calls) > 0
        # Judge the content by the role the writer meant ("Assistant"), so one typo gives one finding.
        intended = role if role is not None else _suggested_role(message.get("role"))
        # An empty tool result is a command that printed nothing: OpenAI and the cookbook train on it as is.
        _check_content(ck, at, intended == "assistant" and has_calls, intended == "tool")
        if calls is not None:
            ids = _check_tool_calls(ck, calls, _value_span(mspan, "tool_calls"), mrange, index, role)
            tool_ids.update(ids)
            any_call = any_call or has_calls
        _check_string_fields(ck, at)
        _check_training_flags(ck, at, intended)
        _check_legacy_function_call(ck, at)
        if role == "tool":
            check_tool_answer(ck, at, tool_ids, any_call)
        if role == "user":
            text = _text_of_content(message.get("content"))
            if text is not None:
                prompt_key = text.strip()

    if all(r is not None for r in roles):
        check_ending(ck, roles, _span_of(_item_span(span, len(messages) - 1), whole), whole, is_eval)
        if not is_eval:
            check_prompted(ck, messages, roles, span, whole)
        check_results_follow_calls(ck, messages, roles, span, whole)
    return prompt_key


def _wrong_type(ck: LineChecker, what: str, must_be: str, value: Any, where: tuple[int, int]) -> None:
    """The finding for a key whose value has the wrong type (`what` names the key and its owner)."""
    ck.add("field-type", f"{what} must be {must_be}, not {describe(value)}", *where)


def _check_string_fields(ck: LineChecker, at: MessageAt) -> None:
    """`tool_call_id` and `name`, when present, are strings."""
    for key in ("tool_call_id", "name"):
        value = at.message.get(key)
        if value is not None and not isinstance(value, str):
            _wrong_type(ck, f"`{key}` of {at.name}", "a string", value, at.value_range(key))


def _check_legacy_function_call(ck: LineChecker, at: MessageAt) -> None:
    """OpenAI's deprecated `function_call`, named with what replaces it."""
    if at.message.get("function_call") is not None:
        ck.add(
            "function-call-legacy",
            f"{at.name} uses `function_call`, OpenAI's deprecated function-calling format, which "
            'tinker-cookbook renderers do not read; use `"tool_calls": [{"id": "call_1", "type": "function", '
            '"function": {"name": ..., "arguments": "<JSON text>"}}]` and answer it with a `tool` message '
            "that has the same `tool_call_id`",
            *at.value_range("function_call"),
        )


def _check_training_flags(ck: LineChecker, at: MessageAt, role: str | None) -> None:
    """OpenAI's `weight` (0 or 1) and tinker-cookbook's `trainable` (a boolean) choose the trained messages."""
    message = at.message
    if "weight" in message:
        weight = message["weight"]
        wrange = at.value_range("weight")
        if weight is not None and (isinstance(weight, bool) or weight not in (0, 1)):
            shown = json.dumps(weight) if isinstance(weight, int | float | str) else describe(weight)
            fix = None
            if isinstance(weight, bool):
                fix = Fix(f"Change weight to {int(weight)}", [ck.edit(*wrange, str(int(weight)))])
            ck.add(
                "weight-invalid",
                f"`weight` of {at.name} must be 0 (do not train on it) or 1 (train on it), not {shown}",
                *wrange,
                fix=fix,
            )
        elif weight is not None and role is not None and role != "assistant":
            ck.add(
                "weight-not-assistant",
                f"`weight` is read only on assistant messages; {at.name} is `{role}`, so it is ignored",
                *wrange,
                severity="warning",
            )
    trainable = message.get("trainable")
    if trainable is not None and not isinstance(trainable, bool):
        _wrong_type(ck, f"`trainable` of {at.name}", "true or false", trainable, at.value_range("trainable"))


def _check_role(ck: LineChecker, at: MessageAt) -> str | None:
    message = at.message
    if "role" not in message:
        ck.add("role-missing", f"{at.name} has no `role`", *at.range)
        return None
    role = message["role"]
    if role in ROLES:
        return role
    rrange = at.value_range("role")
    if not isinstance(role, str):
        ck.add("role-unknown", f"`role` must be a string, not {describe(role)}", *rrange)
        return None
    if role.strip().lower() == "function":
        ck.add(
            "function-role-legacy",
            f'{at.name} has role "function", OpenAI\'s deprecated function-result format, which '
            'tinker-cookbook renderers do not read; use role "tool" with the `tool_call_id` of the assistant\'s '
            "`tool_calls` entry it answers",
            *rrange,
        )
        return None
    wanted = _suggested_role(role)
    fix = None
    hint = ""
    if wanted is not None:
        fix = Fix(f'Change role to "{wanted}"', [ck.edit(*rrange, f'"{wanted}"')])
        hint = f'; did you mean "{wanted}"?'
    ck.add(
        "role-unknown",
        f'unknown role "{role}" (expected system, developer, user, assistant or tool){hint}',
        *rrange,
        fix=fix,
    )
    return None


def _suggested_role(role: Any) -> str | None:
    """The role a misspelt one most likely means ("Assistant", " USER", "gpt"), or None."""
    if not isinstance(role, str):
        return None
    wanted = role.strip().lower()
    wanted = ROLE_SYNONYMS.get(wanted, wanted)
    return wanted if wanted in ROLES else None


def _check_content(ck: LineChecker, at: MessageAt, may_be_null: bool, may_be_empty: bool = False) -> None:
    message, mspan, mrange, where = at.message, at.span, at.range, at.name
    may_be_empty = may_be_empty or may_be_null
    content = message.get("content")
    if content is None and may_be_null:
        return  # OpenAI's rows: an assistant message that only calls tools has no content, or null
    if "content" not in message:
        ck.add("content-missing", f"{where} has no `content`", *mrange)
        return
    cspan = _value_span(mspan, "content")
    crange = _span_of(cspan, mrange)
    if isinstance(content, str):
        if not content and not may_be_empty:
            ck.add("content-empty", f"{where} has empty content", *crange)
        return
    if isinstance(content, list):
        if _check_parts(ck, content, cspan, crange, where) and not may_be_empty:
            ck.add("content-empty", f"{where} has empty content", *crange)
        return
    fix = None
    if content is None:
        fix = Fix('Replace null with ""', [ck.edit(*crange, '""')])
    ck.add(
        "content-type",
        f"`content` of {where} must be a string or a list of parts, not {describe(content)}"
        + (
            " (only an assistant message that makes tool calls may have null content)"
            if content is None
            else ""
        ),
        *crange,
        fix=fix,
    )


def _check_parts(
    ck: LineChecker, content: list[Any], cspan: _Span | None, crange: tuple[int, int], where: str
) -> bool:
    """Check a list of content parts (text or thinking, never images); True when all are valid and none has text."""
    any_text = False
    valid = True
    for part_index, part in enumerate(content):
        prange = _span_of(_item_span(cspan, part_index), crange)
        kind = part.get("type") if isinstance(part, dict) else None
        field = {"text": "text", "thinking": "thinking"}.get(kind) if isinstance(kind, str) else None
        if kind in IMAGE_PARTS:
            valid = False
            ck.add(
                "image-unsupported",
                f'part {part_index + 1} of {where} is an image (`"type": "{kind}"`); machine-lsp trains '
                "text-only chat models, so images are not supported: remove the part or describe the image "
                'in a {"type": "text", "text": ...} part',
                *prange,
            )
        elif field is None or not isinstance(part.get(field), str):
            valid = False
            ck.add(
                "content-part-invalid",
                f'part {part_index + 1} of {where} must be {{"type": "text", "text": ...}} or '
                '{"type": "thinking", "thinking": ...}',
                *prange,
            )
        elif part[field]:
            any_text = True
    return valid and not any_text


def _check_tool_calls(
    ck: LineChecker, calls: Any, span: _Span | None, mrange: tuple[int, int], index: int, role: str | None
) -> list[str]:
    where = f"message {index + 1}"
    crange = _span_of(span, mrange)
    if not isinstance(calls, list):
        ck.add("tool-call-invalid", f"`tool_calls` of {where} must be a list, not {describe(calls)}", *crange)
        return []
    if calls and role is not None and role != "assistant":
        ck.add("tool-call-invalid", f"only assistant messages make tool calls ({where} is `{role}`)", *crange)
    ids: list[str] = []
    for call_index, call in enumerate(calls):
        call_id = _check_one_tool_call(ck, call, _item_span(span, call_index), crange, call_index, where)
        if call_id is not None:
            ids.append(call_id)
    return ids


def _check_one_tool_call(
    ck: LineChecker, call: Any, cspan: _Span | None, crange: tuple[int, int], call_index: int, where: str
) -> str | None:
    """One entry of `tool_calls`: its shape, then its arguments; its id when the shape is right."""
    one = _span_of(cspan, crange)
    function = call.get("function") if isinstance(call, dict) else None
    if (
        not isinstance(call, dict)
        or not isinstance(call.get("id"), str)
        or not isinstance(function, dict)
        or not isinstance(function.get("name"), str)
        or not isinstance(function.get("arguments"), str)
        or not isinstance(call.get("type", "function"), str)
    ):
        ck.add(
            "tool-call-invalid",
            f'tool call {call_index + 1} of {where} must look like {{"id": "...", "type": "function", '
            '"function": {"name": "...", "arguments": "<JSON text>"}}',
            *one,
        )
        return None
    arguments = function["arguments"]
    arange = _span_of(_value_span(_value_span(cspan, "function"), "arguments"), one)
    if not _json_ok(arguments):
        ck.add(
            "tool-arguments-json",
            f"`arguments` of tool call {call_index + 1} is not JSON text",
            *arange,
            severity="warning",
        )
        return call["id"]
    inner = _any_decoder.decode(arguments)
    if isinstance(inner, str) and _double_encoded(inner):
        ck.add(
            "tool-arguments-double-encoded",
            f"`arguments` of tool call {call_index + 1} is JSON-encoded twice: it holds a JSON string whose "
            "text is the JSON object; the model would learn to write the escaped string",
            *arange,
            severity="warning",
            fix=Fix("Decode the arguments once", [ck.edit(*arange, json.dumps(inner, ensure_ascii=False))]),
        )
    return call["id"]


def _check_eval_keys(ck: LineChecker, obj: dict[str, Any], root: _Span | None) -> None:
    whole = ck.whole()
    expected = obj.get("expected")
    erange = _span_of(_value_span(root, "expected"), whole)
    if expected is None:
        ck.add(
            "expected-missing", 'eval row has no `expected` answer (e.g. "expected": "answer: 62")', *whole
        )
    elif not isinstance(expected, str):
        ck.add("expected-type", f"`expected` must be a string, not {describe(expected)}", *erange)
    elif not expected:
        ck.add("expected-empty", "`expected` is empty", *erange)
    match = obj.get("match", "exact")
    mrange = _span_of(_value_span(root, "match"), whole)
    if match not in MATCHES:
        fix = None
        if isinstance(match, str) and match.strip().lower() in MATCHES:
            fix = Fix(
                f'Change match to "{match.strip().lower()}"', [ck.edit(*mrange, f'"{match.strip().lower()}"')]
            )
        shown = f'"{match}"' if isinstance(match, str) else describe(match)
        ck.add(
            "match-unknown", f"unknown match {shown} (expected exact, contains or regex)", *mrange, fix=fix
        )
    elif match == "regex" and isinstance(expected, str) and expected:
        error = _regex_error(expected)
        if error is not None:
            ck.add("regex-invalid", f"`expected` is not a valid regular expression: {error}", *erange)
    row_id = obj.get("id")
    if row_id is not None and not isinstance(row_id, str):
        _wrong_type(ck, "`id`", "a string", row_id, _span_of(_value_span(root, "id"), whole))
