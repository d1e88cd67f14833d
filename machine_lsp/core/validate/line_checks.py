"""A line's checker (findings at exact columns) and the rules for a line that is not a JSON object: where and why
its JSON is invalid (with fixes for trailing commas and two rows on one line), a bare list of messages (with a fix
that wraps it), anything else. The rules of a row that is a JSON object are in `rules`."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from machine_lsp.core.validate.fast import _json_ok
from machine_lsp.core.validate.findings import Finding, Fix, Severity, TextEdit

MAX_JSON_RELOCATE_CHARS = 4_000_000


class LineChecker:
    def __init__(self, text: str, line_no: int) -> None:
        self.text = text
        self.line_no = line_no
        self.findings: list[Finding] = []
        body = text.rstrip()
        self.value_start = len(body) - len(body.lstrip())
        self.value_end = len(body)

    def add(
        self,
        code: str,
        message: str,
        start: int,
        end: int,
        severity: Severity = "error",
        fix: Fix | None = None,
    ) -> None:
        end = max(end, start)
        self.findings.append(
            Finding(self.line_no, start + 1, self.line_no, end + 1, severity, code, message, fix)
        )

    def edit(self, start: int, end: int, new_text: str) -> TextEdit:
        return TextEdit(self.line_no, start + 1, self.line_no, end + 1, new_text)

    def whole(self) -> tuple[int, int]:
        return self.value_start, self.value_end


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _looks_like_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(item, dict) and "role" in item for item in value)
    )


def not_an_object(ck: LineChecker, obj: Any) -> None:
    """A line that is JSON but not a row: a bare list of messages (with a fix that wraps it), or anything else."""
    if _looks_like_messages(obj):
        start, end = ck.whole()
        fix = Fix(
            'Wrap the list into {"messages": ...}',
            [ck.edit(end, end, "}"), ck.edit(start, start, '{"messages": ')],
        )
        ck.add(
            "bare-messages",
            'line is a bare list of messages; a row is an object: {"messages": [...]}',
            start,
            end,
            fix=fix,
        )
    else:
        ck.add(
            "not-object",
            f'a row must be a JSON object like {{"messages": [...]}}, not {describe(obj)}',
            *ck.whole(),
        )


_JSON_ERROR_POS = re.compile(r"\(byte (\d+)\)")


def json_error(ck: LineChecker, exc: msgspec.DecodeError) -> None:
    text = ck.text
    pos, reason = _json_error_position(text, exc)
    body_end = ck.value_end
    if ck.value_start == body_end:
        ck.add("json-invalid", "line is not JSON", 0, len(text))
        return
    if reason == "Extra data":
        _extra_data(ck, pos, body_end)
        return
    if pos >= body_end:
        ck.add(
            "json-invalid",
            "line ends before the JSON value is complete (unclosed string, list or object?)",
            max(body_end - 1, 0),
            body_end,
        )
        return
    if text[pos] in "]}":
        before = text[:pos].rstrip()
        if before.endswith(","):
            comma = len(before) - 1
            ck.add(
                "trailing-comma",
                f"trailing comma before `{text[pos]}`",
                comma,
                comma + 1,
                fix=Fix("Remove the trailing comma", [ck.edit(comma, comma + 1, "")]),
            )
            return
    ck.add("json-invalid", f"not valid JSON: {reason[:1].lower() + reason[1:]}", pos, pos + 1)


def _json_error_position(text: str, exc: msgspec.DecodeError) -> tuple[int, str]:
    """Where the line's JSON breaks (a code-point position) and why."""
    # Python's json gives code-point positions and plain messages; msgspec stays the judge of validity. On huge
    # lines json would build the whole (broken) value first, so take msgspec's byte offset there instead.
    if len(text) <= MAX_JSON_RELOCATE_CHARS:
        try:
            json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as err:
            return err.pos, err.msg.removesuffix(" starting at")
        except (ValueError, RecursionError):
            pass
    return _msgspec_error_position(text, str(exc))


def _extra_data(ck: LineChecker, pos: int, body_end: int) -> None:
    """Something after the row's value: a trailing comma, another row on the same line, or junk."""
    rest = ck.text[pos:body_end]
    if rest == ",":
        ck.add(
            "trailing-comma",
            "trailing comma after the row (JSONL has one object per line, no separators)",
            pos,
            body_end,
            fix=Fix("Remove the trailing comma", [ck.edit(pos, body_end, "")]),
        )
        return
    fix = None
    if _json_ok(rest):
        gap_start = len(ck.text[:pos].rstrip())
        fix = Fix("Split into one row per line", [ck.edit(gap_start, pos, "\n")])
    ck.add("json-trailing-data", "unexpected data after the JSON value", pos, body_end, fix=fix)


def _msgspec_error_position(text: str, message: str) -> tuple[int, str]:
    """Code-point position and reason of a msgspec decode error (its byte offsets differ by error kind)."""
    reason = message.removeprefix("JSON is malformed: ").split(" (byte")[0]
    if "truncated" in message:
        return len(text), "truncated"
    found = _JSON_ERROR_POS.search(message)
    byte = int(found.group(1)) if found else 0
    if reason == "trailing characters":
        byte, reason = byte - 1, "Extra data"  # msgspec points one past the first trailing character
    prefix = text.encode("utf-8", "surrogatepass")[: max(byte, 0)]
    return len(prefix.decode("utf-8", "ignore")), reason


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
