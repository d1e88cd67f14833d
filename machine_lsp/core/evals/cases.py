"""Eval data: held-out rows read into `EvalCase`s (the prompt messages and what the answer must match)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from machine_lsp.core.evals.grading import EvalError, Grader, compile_pattern
from machine_lsp.core.lines import split_lines
from machine_lsp.core.safe_files import read_input_text
from machine_lsp.core.schema import EvalRow, Message, TrainingRow, text_of, training_row_from_obj


class EvalCase(msgspec.Struct):
    """One held-out row ready to sample: the prompt messages and what the answer must match."""

    id: str
    messages: list[Message]
    expected: str
    match: Grader = "exact"

    @property
    def prompt(self) -> str:
        users = [m for m in self.messages if m.role == "user"]
        return text_of(users[-1]) if users else text_of(self.messages[-1])


def case_from_obj(obj: object, index: int, *, where: str = "") -> EvalCase:
    """An eval row ``{"messages", "expected", "match"?, "id"?}``, or a chat row whose last message is the
    assistant's answer (prompt = the messages before it, expected = its text, exact match)."""
    loc = where or f"row {index + 1}"
    if not isinstance(obj, dict):
        raise EvalError(f"{loc}: expected a JSON object, got {type(obj).__name__}")
    if "expected" in obj:
        try:
            row = msgspec.convert(obj, EvalRow)
        except msgspec.ValidationError as exc:
            raise EvalError(f"{loc}: not an eval row: {exc}") from None
        if not row.messages:
            raise EvalError(f"{loc}: eval row has no messages")
        if row.messages[-1].role == "assistant":
            raise EvalError(
                f"{loc}: an eval row's messages must end before the answer (last message is assistant)"
            )
        if row.match == "regex":
            compile_pattern(row.expected, f"regex in {loc}")
        return EvalCase(
            id=row.id or f"row-{index + 1}", messages=row.messages, expected=row.expected, match=row.match
        )
    try:
        train: TrainingRow = training_row_from_obj(obj)
    except msgspec.ValidationError as exc:
        raise EvalError(f"{loc}: neither an eval row (no `expected`) nor a chat row: {exc}") from None
    if not train.messages or train.messages[-1].role != "assistant":
        raise EvalError(f"{loc}: a chat row used for eval must end with the assistant's answer")
    if len(train.messages) < 2:
        raise EvalError(f"{loc}: a chat row used for eval needs a prompt before the answer")
    row_id = train.extra.get("id")
    return EvalCase(
        id=str(row_id) if row_id is not None else f"row-{index + 1}",
        messages=list(train.messages[:-1]),
        expected=text_of(train.messages[-1]),
    )


def load_cases(path: Path) -> list[EvalCase]:
    """Eval rows from a JSONL file; raises EvalError naming the file and line of the first bad row."""
    text = read_input_text(path, EvalError, "a JSONL file")
    cases: list[EvalCase] = []
    for line_no, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalError(f"{path}:{line_no}: invalid JSON: {exc.msg} (column {exc.colno})") from None
        cases.append(case_from_obj(obj, len(cases), where=f"{path}:{line_no}"))
    if not cases:
        raise EvalError(f"{path}: no eval rows")
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise EvalError(f"{path}: duplicate row id {dup!r}")
    return cases
