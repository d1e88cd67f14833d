"""Checks of preference files: DPO pairs (tinker-cookbook comparisons) and KTO examples, with positions.

Kinds "pairs" and "kto" (see machine_lsp.core.preference for the row shapes). `refine_kind` tells them from chat
rows by the first non-blank line, so `machine train validate FILE` and the editor's live diagnostics pick the same
checks for the same file. Findings:
  pair-shape / kto-shape       the row is not the format (missing or extra keys, wrong types, a bad message)
  pair-label / kto-label       label is not "A" | "B" | "Tie" (pairs) or not true | false (KTO)
  pair-empty-side / kto-empty-completion   a completion with no messages, or only empty ones
  pair-same-sides              chosen == rejected: the pair teaches nothing (a Tie: a warning, DPO skips it)
  pair-prompt-mismatch / kto-prompt-mismatch   the completion does not answer the prompt: the prompt ends with an
                               assistant turn, a completion does not start with one, or it repeats the prompt
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from machine_lsp.core.schema import Message
from machine_lsp.core.validate.findings import LineResult
from machine_lsp.core.validate.line_checks import LineChecker, describe, json_error, not_an_object
from machine_lsp.core.validate.spans import _item_span, _Span, _spans, _value_span

PREFERENCE_KINDS = ("pairs", "kto")
PAIR_KEYS = ("prompt_conversation", "completion_A", "completion_B")
LABELS = ("A", "B", "Tie")

_decoder = msgspec.json.Decoder()


def refine_kind(kind: str, lines: Sequence[str]) -> str:
    """ "pairs" or "kto" when the first non-blank line is such a row (and `kind` is not eval); else `kind`."""
    if kind in PREFERENCE_KINDS or kind == "eval":
        return kind
    first = next((line for line in lines[:64] if line.strip()), "")
    head = first[:4096].lstrip("\ufeff \t")
    if '"comparison"' in head:
        return "pairs"
    if '"completion"' in head and '"label"' in head and '"messages"' not in head:
        return "kto"
    return kind


def refine_kind_of_bytes(kind: str, data: bytes) -> str:
    """`refine_kind` on a file's first bytes."""
    from machine_lsp.core.lines import split_lines

    return refine_kind(kind, split_lines(data[:4096].decode("utf-8", "replace")))


class _Row:
    """One line's checker and spans, with the helpers both kinds use."""

    def __init__(self, text: str, line_no: int) -> None:
        self.ck = LineChecker(text, line_no)
        self.root: _Span | None = None

    def at(self, span: _Span | None) -> tuple[int, int]:
        return (span.start, span.end) if span is not None else self.ck.whole()

    def key(self, parent: _Span | None, name: str) -> _Span | None:
        return _value_span(parent, name)

    def messages(self, value: Any, span: _Span | None, what: str, code: str) -> list[Message] | None:
        """`value` as a list of messages, or None after a finding at the offending item."""
        if not isinstance(value, list):
            self.ck.add(code, f"{what} must be a list of messages, got {describe(value)}", *self.at(span))
            return None
        out = []
        for index, item in enumerate(value):
            try:
                out.append(msgspec.convert(item, Message))
            except msgspec.ValidationError as exc:
                where = self.at(_item_span(span, index))
                self.ck.add(code, f"{what}[{index}] is not a chat message: {exc}", *where)
                return None
        return out


def _empty(messages: Sequence[Message]) -> bool:
    return all(not m.tool_calls and not _text(m).strip() for m in messages)


def _text(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(p, "text", "") or getattr(p, "thinking", "") for p in content or [])


def _answers_prompt(
    row: _Row, prompt: list[Message], completion: list[Message], span: _Span | None, what: str, code: str
) -> None:
    """A completion must start with the assistant's answer to a prompt that ends before it."""
    if completion and len(completion) >= len(prompt) and completion[: len(prompt)] == prompt:
        row.ck.add(code, f"{what} repeats the prompt: it must hold only the answer", *row.at(span))
    elif completion and completion[0].role != "assistant":
        row.ck.add(
            code,
            f"{what} starts with a {completion[0].role} message, not the assistant's answer",
            *row.at(span),
        )


def _prompt_ok(row: _Row, prompt: list[Message] | None, span: _Span | None, what: str, code: str) -> bool:
    if prompt is None:
        return False
    if not prompt:
        row.ck.add(code, f"{what} is empty: the completions answer nothing", *row.at(span))
        return False
    if prompt[-1].role == "assistant":
        row.ck.add(
            code, f"{what} ends with an assistant message: it must end with the turn answered", *row.at(span)
        )
        return False
    return True


def _decode(text: str, line_no: int) -> tuple[_Row, Any]:
    row = _Row(text, line_no)
    try:
        obj = _decoder.decode(text)
    except RecursionError:
        row.ck.add("json-too-deep", "JSON is nested too deeply to be a row", *row.ck.whole())
        return row, None
    except msgspec.DecodeError as exc:
        json_error(row.ck, exc)
        return row, None
    if not isinstance(obj, dict):
        not_an_object(row.ck, obj)
        return row, None
    row.root = _spans(text)
    return row, obj


def _unknown_keys(row: _Row, obj: dict, parent: _Span | None, allowed: Sequence[str], code: str) -> None:
    for name in obj:
        if name not in allowed:
            entry = parent.keys.get(name) if parent is not None and parent.keys else None
            where = (entry[0], entry[1]) if entry else row.ck.whole()
            row.ck.add(code, f"unknown key {name!r} (expected {', '.join(allowed)})", *where)


def check_pair_line(text: str, line_no: int) -> LineResult:
    row, obj = _decode(text, line_no)
    if obj is None:
        return LineResult(row.ck.findings, None, None, len(text))
    ck, root = row.ck, row.root
    _unknown_keys(row, obj, root, ("comparison", "label"), "pair-shape")
    label = obj.get("label")
    if label not in LABELS:
        shown = repr(label) if isinstance(label, str) else describe(label)
        message = "missing label" if "label" not in obj else f"label must be one of A, B, Tie, got {shown}"
        ck.add("pair-label", message + ' ("A": completion_A is chosen)', *row.at(row.key(root, "label")))
    comparison, span = obj.get("comparison"), row.key(root, "comparison")
    if not isinstance(comparison, dict):
        what = (
            "missing comparison"
            if "comparison" not in obj
            else f"comparison must be an object, got {describe(comparison)}"
        )
        ck.add("pair-shape", what + f" (with {', '.join(PAIR_KEYS)})", *row.at(span))
        return LineResult(ck.findings, hash(text), None, len(text), "train")
    _unknown_keys(row, comparison, span, PAIR_KEYS, "pair-shape")
    sides = _pair_sides(row, comparison, span)
    _same_sides(row, sides, span, label)
    return LineResult(
        ck.findings, hash(text), None, len(text), "train", len(sides["prompt_conversation"] or [])
    )


def _pair_sides(row: _Row, comparison: dict, span: _Span | None) -> dict[str, list[Message] | None]:
    """The comparison's three message lists (None where missing or malformed), each side checked against the prompt."""
    sides: dict[str, list[Message] | None] = {}
    for name in PAIR_KEYS:
        if name not in comparison:
            row.ck.add("pair-shape", f"comparison has no {name}", *row.at(span))
            sides[name] = None
        else:
            sides[name] = row.messages(comparison[name], row.key(span, name), name, "pair-shape")
    prompt = sides["prompt_conversation"]
    where = row.key(span, "prompt_conversation")
    prompt_ok = _prompt_ok(row, prompt, where, "prompt_conversation", "pair-prompt-mismatch")
    for name in PAIR_KEYS[1:]:
        side, side_span = sides[name], row.key(span, name)
        if side is None:
            continue
        if _empty(side):
            message = f"{name} is empty: a pair needs an answer on both sides"
            row.ck.add("pair-empty-side", message, *row.at(side_span))
        elif prompt_ok and prompt is not None:
            _answers_prompt(row, prompt, side, side_span, name, "pair-prompt-mismatch")
    return sides


def _same_sides(row: _Row, sides: dict[str, list[Message] | None], span: _Span | None, label: Any) -> None:
    a, b = sides["completion_A"], sides["completion_B"]
    if a is None or b is None or not a or a != b:
        return
    if label == "Tie":
        message = "completion_A equals completion_B (a Tie: DPO skips it)"
        row.ck.add("pair-same-sides", message, *row.at(span), "warning")
    else:
        where = row.at(row.key(span, "completion_B"))
        row.ck.add("pair-same-sides", "chosen equals rejected: the pair teaches nothing", *where)


def check_kto_line(text: str, line_no: int) -> LineResult:
    row, obj = _decode(text, line_no)
    if obj is None:
        return LineResult(row.ck.findings, None, None, len(text))
    ck, root = row.ck, row.root
    _unknown_keys(row, obj, root, ("prompt", "completion", "label"), "kto-shape")
    label = obj.get("label")
    if not isinstance(label, bool):
        message = (
            "missing label" if "label" not in obj else f"label must be true or false, got {describe(label)}"
        )
        ck.add("kto-label", message + " (true: desirable)", *row.at(row.key(root, "label")))
    parts: dict[str, list[Message] | None] = {}
    for name in ("prompt", "completion"):
        if name not in obj:
            ck.add("kto-shape", f"missing {name} (a list of messages)", *ck.whole())
            parts[name] = None
        else:
            parts[name] = row.messages(obj[name], row.key(root, name), name, "kto-shape")
    prompt, completion = parts["prompt"], parts["completion"]
    prompt_ok = _prompt_ok(row, prompt, row.key(root, "prompt"), "prompt", "kto-prompt-mismatch")
    if completion is not None:
        where = row.key(root, "completion")
        if _empty(completion):
            ck.add("kto-empty-completion", "completion is empty: there is no answer to judge", *row.at(where))
        elif prompt_ok and prompt is not None:
            _answers_prompt(row, prompt, completion, where, "completion", "kto-prompt-mismatch")
    return LineResult(ck.findings, hash(text), None, len(text), "train", len(prompt or []))


def check_preference_line(text: str, line_no: int, kind: str) -> LineResult:
    return check_pair_line(text, line_no) if kind == "pairs" else check_kto_line(text, line_no)
