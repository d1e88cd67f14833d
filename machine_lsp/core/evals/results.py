"""The one schema of `eval_results/*.json` (`EvalResult`, `ProbeReport`): rows scored, results built, read, written."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import msgspec

from machine_lsp.core.evals.cases import EvalCase
from machine_lsp.core.evals.grading import (
    DEFAULT_FORMAT_PATTERN,
    EvalError,
    Grader,
    compile_pattern,
    format_ok,
    grade,
)
from machine_lsp.core.safe_files import read_input

SCHEMA_VERSION = 1


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

    @classmethod
    def measured(cls, started: float, loaded: float, sampled: float, done: float, rows: int) -> Timings:
        """An eval's phases from its `time.perf_counter()` readings, and its rows decoded per second."""
        return cls(
            load_seconds=round(loaded - started, 3),
            sample_seconds=round(sampled - loaded, 3),
            total_seconds=round(done - started, 3),
            rows_per_second=round(rows / (sampled - loaded), 3) if sampled > loaded else 0.0,
        )


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
    data = read_input(path, EvalError, "an eval result file")
    try:
        return msgspec.json.decode(data, type=EvalResult)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise EvalError(f"{path}: not an eval result file: {exc}") from None
