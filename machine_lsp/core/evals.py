"""Held-out evaluation: graders, format compliance, the result schema, compare() and the style-bleed probe (pure).

* Graders: ``exact`` (whitespace-trimmed equality), ``contains`` (expected text occurs in the output), ``regex``
  (``expected`` is a Python regular expression searched in the output).
* Format compliance: the output (trimmed) matches ``format_pattern`` (default ``^answer: -?\\d+$``).
* :class:`EvalResult` is the one schema of ``eval_results/*.json``.
* :func:`compare` pairs the rows of two results and reports accuracy, delta, flips each way, the exact two-sided
  McNemar p-value (binomial test on the discordant pairs), format rates and the rows that changed.
* The style-bleed probe asks off-distribution questions; a row *bleeds* when its answer takes the trained format
  (``answer: Paris``). The bleed pattern defaults to the literal prefix of the format pattern (``^\\s*answer:``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from machine_lsp.core.lines import split_lines
from machine_lsp.core.schema import EvalRow, Message, TrainingRow, text_of, training_row_from_obj

Grader = Literal["exact", "contains", "regex"]
GRADERS: tuple[str, ...] = ("exact", "contains", "regex")
DEFAULT_FORMAT_PATTERN = r"^answer: -?\d+$"
SCHEMA_VERSION = 1


class EvalError(ValueError):
    """Bad eval input (unreadable file, malformed row, invalid pattern): the message names file and line."""


# ---------------------------------------------------------------------------------------------------------------
# Graders and format


def compile_pattern(pattern: str, what: str = "pattern") -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise EvalError(f"invalid {what} {pattern!r}: {exc}") from None


def grade(output: str, expected: str, match: Grader = "exact") -> bool:
    """Whether ``output`` is correct for ``expected`` under grader ``match``."""
    if match == "exact":
        return output.strip() == expected.strip()
    if match == "contains":
        return expected.strip() in output
    if match == "regex":
        return compile_pattern(expected, "regex in expected").search(output) is not None
    raise EvalError(f"unknown grader {match!r}: choose one of {', '.join(GRADERS)}")


def format_ok(output: str, pattern: str | re.Pattern[str] = DEFAULT_FORMAT_PATTERN) -> bool:
    """Whether the trimmed output has the trained format."""
    rx = pattern if isinstance(pattern, re.Pattern) else compile_pattern(pattern, "format pattern")
    return rx.search(output.strip()) is not None


_META = set(".^$*+?{}[]\\|()")


def literal_prefix(pattern: str) -> str:
    """The literal text a regex starts with (after ``^``), up to its first metacharacter: ``^answer: -?\\d+$`` ->
    ``answer: -`` is cut back to ``answer: `` because the ``-`` is made optional by ``?``."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and not body[i + 1].isalnum():
            nxt, step = body[i + 1], 2
        elif ch in _META:
            break
        else:
            nxt, step = ch, 1
        # a quantifier after this character makes it optional or repeated: stop before it
        if i + step < len(body) and body[i + step] in "?*{":
            break
        out.append(nxt)
        i += step
    return "".join(out)


def default_bleed_pattern(format_pattern: str = DEFAULT_FORMAT_PATTERN) -> str:
    """The pattern a probe answer "bleeds" on: the format's literal prefix at the start of a line, else the format."""
    prefix = literal_prefix(format_pattern).strip()
    if len(prefix) >= 3:
        return r"^\s*" + re.escape(prefix)
    return format_pattern


def bleeds(output: str, bleed_pattern: str | re.Pattern[str]) -> bool:
    rx = (
        bleed_pattern
        if isinstance(bleed_pattern, re.Pattern)
        else compile_pattern(bleed_pattern, "bleed pattern")
    )
    return rx.search(output.strip()) is not None


# ---------------------------------------------------------------------------------------------------------------
# Eval data


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
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise EvalError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise EvalError(f"{path}: is a directory, expected a JSONL file") from None
    except OSError as exc:
        raise EvalError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EvalError(f"{path}: not UTF-8 text (byte {exc.start})") from None
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


# ---------------------------------------------------------------------------------------------------------------
# Result schema


class RowResult(msgspec.Struct):
    id: str
    prompt: str
    expected: str
    output: str
    correct: bool
    format_ok: bool
    match: Grader = "exact"


class ProbeRow(msgspec.Struct):
    id: str
    question: str
    output: str
    bleeds: bool
    source: Literal["builtin", "user"] = "builtin"


class ProbeResult(msgspec.Struct):
    bleed_pattern: str
    n: int
    bled: int
    bleed_rate: float
    rows: list[ProbeRow]


class Timings(msgspec.Struct):
    load_seconds: float = 0.0
    sample_seconds: float = 0.0
    total_seconds: float = 0.0
    rows_per_second: float = 0.0


class EvalResult(msgspec.Struct, omit_defaults=False):
    name: str
    model: str
    checkpoint: str | None
    engine: str
    data_path: str | None
    data_sha256: str | None
    grader: str  # the grader of every row, or "per-row" when rows differ
    format_pattern: str
    n: int
    correct: int
    accuracy: float
    format_ok: int
    format_rate: float
    rows: list[RowResult]
    timings: Timings
    created_at: str = ""
    max_tokens: int = 0
    probe: ProbeResult | None = None
    run_id: str | None = None
    schema_version: int = SCHEMA_VERSION


def score_rows(
    cases: Sequence[EvalCase],
    outputs: Sequence[str],
    *,
    format_pattern: str = DEFAULT_FORMAT_PATTERN,
    grader: Grader | None = None,
) -> list[RowResult]:
    """Grade outputs against their cases; ``grader`` overrides every row's own match kind."""
    if len(cases) != len(outputs):
        raise EvalError(f"{len(outputs)} outputs for {len(cases)} rows")
    rx = compile_pattern(format_pattern, "format pattern")
    rows: list[RowResult] = []
    for case, output in zip(cases, outputs, strict=True):
        match = grader or case.match
        rows.append(
            RowResult(
                id=case.id,
                prompt=case.prompt,
                expected=case.expected,
                output=output,
                correct=grade(output, case.expected, match),
                format_ok=format_ok(output, rx),
                match=match,
            )
        )
    return rows


def build_result(
    rows: Sequence[RowResult],
    *,
    name: str,
    model: str,
    checkpoint: str | None,
    engine: str,
    data_path: str | None,
    data_sha256: str | None,
    format_pattern: str = DEFAULT_FORMAT_PATTERN,
    timings: Timings | None = None,
    created_at: str = "",
    max_tokens: int = 0,
    probe: ProbeResult | None = None,
    run_id: str | None = None,
) -> EvalResult:
    n = len(rows)
    correct = sum(r.correct for r in rows)
    fmt = sum(r.format_ok for r in rows)
    kinds = {r.match for r in rows}
    return EvalResult(
        name=name,
        model=model,
        checkpoint=checkpoint,
        engine=engine,
        data_path=data_path,
        data_sha256=data_sha256,
        grader=kinds.pop() if len(kinds) == 1 else ("per-row" if kinds else "exact"),
        format_pattern=format_pattern,
        n=n,
        correct=correct,
        accuracy=correct / n if n else 0.0,
        format_ok=fmt,
        format_rate=fmt / n if n else 0.0,
        rows=list(rows),
        timings=timings or Timings(),
        created_at=created_at,
        max_tokens=max_tokens,
        probe=probe,
        run_id=run_id,
    )


class ProbeReport(msgspec.Struct):
    """``eval_results/probe-<name>.json``: a probe run on its own (``train eval probe``)."""

    name: str
    model: str
    checkpoint: str | None
    engine: str
    probe: ProbeResult
    timings: Timings
    created_at: str = ""
    max_tokens: int = 0
    run_id: str | None = None
    kind: Literal["probe"] = "probe"
    schema_version: int = SCHEMA_VERSION


def encode_result(result: EvalResult | ProbeReport) -> bytes:
    return msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n"


def load_result(path: Path) -> EvalResult:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise EvalError(f"{path}: no such file") from None
    except OSError as exc:
        raise EvalError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return msgspec.json.decode(data, type=EvalResult)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise EvalError(f"{path}: not an eval result file: {exc}") from None


# ---------------------------------------------------------------------------------------------------------------
# Compare


def mcnemar_exact_p(gained: int, lost: int) -> float:
    """Exact two-sided McNemar p-value: binomial(n = gained + lost, 1/2) test of the discordant pairs.

    p = min(1, 2 * P[X <= min(gained, lost)]), and 1.0 when there are no discordant pairs.
    """
    if gained < 0 or lost < 0:
        raise ValueError("counts must be non-negative")
    n = gained + lost
    if n == 0:
        return 1.0
    k = min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


class ChangedRow(msgspec.Struct):
    id: str
    prompt: str
    expected: str
    a_output: str
    b_output: str
    a_correct: bool
    b_correct: bool


class Comparison(msgspec.Struct):
    a_name: str
    b_name: str
    n: int  # paired rows
    a_correct: int
    b_correct: int
    a_accuracy: float
    b_accuracy: float
    delta: float  # b_accuracy - a_accuracy
    gained: int  # wrong in A, right in B
    lost: int  # right in A, wrong in B
    both_correct: int
    both_wrong: int
    mcnemar_p: float
    a_format_rate: float
    b_format_rate: float
    changed: list[ChangedRow]  # rows whose correctness flipped
    outputs_changed: int
    only_in_a: list[str]
    only_in_b: list[str]
    same_data: bool  # both results name the same data checksum
    a_bleed_rate: float | None = None
    b_bleed_rate: float | None = None


def compare(a: EvalResult, b: EvalResult) -> Comparison:
    """Pair rows by id (every row of each result has a unique id) and compare B against A."""
    a_rows = {r.id: r for r in a.rows}
    b_rows = {r.id: r for r in b.rows}
    if len(a_rows) != len(a.rows) or len(b_rows) != len(b.rows):
        raise EvalError("cannot pair rows: a result has duplicate row ids")
    ids = [i for i in a_rows if i in b_rows]
    if not ids:
        raise EvalError(f"{a.name} and {b.name} share no row ids: they were not run on the same data")
    pairs = [(a_rows[row_id], b_rows[row_id]) for row_id in ids]
    gained = sum(1 for ra, rb in pairs if not ra.correct and rb.correct)
    lost = sum(1 for ra, rb in pairs if ra.correct and not rb.correct)
    both = sum(1 for ra, rb in pairs if ra.correct and rb.correct)
    changed = [
        ChangedRow(
            id=ra.id,
            prompt=ra.prompt,
            expected=ra.expected,
            a_output=ra.output,
            b_output=rb.output,
            a_correct=ra.correct,
            b_correct=rb.correct,
        )
        for ra, rb in pairs
        if bool(ra.correct) != bool(rb.correct)
    ]
    n = len(ids)
    a_correct, b_correct = both + lost, both + gained
    return Comparison(
        a_name=a.name,
        b_name=b.name,
        n=n,
        a_correct=a_correct,
        b_correct=b_correct,
        a_accuracy=a_correct / n,
        b_accuracy=b_correct / n,
        delta=(b_correct - a_correct) / n,
        gained=gained,
        lost=lost,
        both_correct=both,
        both_wrong=n - both - gained - lost,
        mcnemar_p=mcnemar_exact_p(gained, lost),
        a_format_rate=sum(ra.format_ok for ra, _ in pairs) / n,
        b_format_rate=sum(rb.format_ok for _, rb in pairs) / n,
        changed=changed,
        outputs_changed=sum(ra.output != rb.output for ra, rb in pairs),
        only_in_a=[i for i in a_rows if i not in b_rows],
        only_in_b=[i for i in b_rows if i not in a_rows],
        same_data=a.data_sha256 is not None and a.data_sha256 == b.data_sha256,
        a_bleed_rate=a.probe.bleed_rate if a.probe else None,
        b_bleed_rate=b.probe.bleed_rate if b.probe else None,
    )


# ---------------------------------------------------------------------------------------------------------------
# Style-bleed probe

BUILTIN_PROBES: tuple[str, ...] = (
    "What is the capital of France?",
    "Which planet is known as the Red Planet?",
    "Who wrote the play Romeo and Juliet?",
    "What is the chemical symbol for gold?",
    "What color do you get by mixing blue and yellow?",
    "What language is mainly spoken in Brazil?",
    "Name the largest ocean on Earth.",
    "What do bees make?",
    "Translate 'thank you' into Spanish.",
    "What is the opposite of 'cold'?",
    "Which animal is known as the king of the jungle?",
    "Write one sentence describing a sunny day.",
)


def probe_prompts(extra: Iterable[str] = ()) -> list[str]:
    """The built-in off-distribution questions followed by the user's (duplicates dropped, order kept)."""
    seen: set[str] = set()
    out: list[str] = []
    for q in (*BUILTIN_PROBES, *extra):
        q = q.strip()
        if q and q not in seen:
            seen.add(q)
            out.append(q)
    return out


def load_probe_questions(path: Path) -> list[str]:
    """User probe questions: a .jsonl of ``{"question": ...}`` / ``{"prompt": ...}`` / chat rows (last user message),
    or plain text with one question per line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise EvalError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalError(f"{path}: cannot read probe questions: {exc}") from None
    questions: list[str] = []
    jsonl = path.suffix == ".jsonl"
    for line_no, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        if not jsonl:
            questions.append(line.strip())
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalError(f"{path}:{line_no}: invalid JSON: {exc.msg}") from None
        if isinstance(obj, str):
            questions.append(obj)
        elif isinstance(obj, dict) and isinstance(obj.get("question") or obj.get("prompt"), str):
            questions.append(obj.get("question") or obj["prompt"])
        elif isinstance(obj, dict) and "messages" in obj:
            try:
                row = training_row_from_obj(obj)
            except msgspec.ValidationError as exc:
                raise EvalError(f"{path}:{line_no}: {exc}") from None
            users = [m for m in row.messages if m.role == "user"]
            if not users:
                raise EvalError(f"{path}:{line_no}: no user message to use as a probe question")
            questions.append(text_of(users[-1]))
        else:
            raise EvalError(
                f"{path}:{line_no}: expected a question string, {{'question': ...}} or a chat row"
            )
    if not questions:
        raise EvalError(f"{path}: no probe questions")
    return questions


def score_probe(
    questions: Sequence[str],
    outputs: Sequence[str],
    *,
    bleed_pattern: str,
    n_builtin: int | None = None,
) -> ProbeResult:
    """``n_builtin``: how many leading questions are built-in (the rest are the user's)."""
    if len(questions) != len(outputs):
        raise EvalError(f"{len(outputs)} outputs for {len(questions)} probe questions")
    rx = compile_pattern(bleed_pattern, "bleed pattern")
    n_builtin = len(questions) if n_builtin is None else n_builtin
    rows = [
        ProbeRow(
            id=f"probe-{i + 1:02d}",
            question=q,
            output=o,
            bleeds=bleeds(o, rx),
            source="builtin" if i < n_builtin else "user",
        )
        for i, (q, o) in enumerate(zip(questions, outputs, strict=True))
    ]
    bled = sum(r.bleeds for r in rows)
    return ProbeResult(
        bleed_pattern=bleed_pattern,
        n=len(rows),
        bled=bled,
        bleed_rate=bled / len(rows) if rows else 0.0,
        rows=rows,
    )


def probe_messages(question: str) -> list[Message]:
    return [Message(role="user", content=question)]
