"""Held-out evaluation: graders, format compliance, the result schema, compare() and the style-bleed probe (pure).

* Graders: ``exact`` (whitespace-trimmed equality), ``contains`` (expected text occurs in the output), ``regex``
  (``expected`` is a Python regular expression searched in the output).
* Format compliance: the output (trimmed) matches ``format_pattern`` (default ``^answer: -?\\d+$``).
* :class:`EvalResult` is the one schema of ``eval_results/*.json``.
* :func:`compare` pairs the rows of two results and reports accuracy, delta, flips each way, the exact two-sided
  McNemar p-value (binomial test on the discordant pairs), format rates and the rows that changed.
* The style-bleed probe asks off-distribution questions; a row *bleeds* when its answer takes the trained format
  (``answer: Paris``). The bleed pattern defaults to the literal prefix of the format pattern (``^\\s*answer:``).

A package along those seams: `grading.py`, `cases.py` (eval data), `results.py` (the schema), `compare.py`, `probe.py`;
every name is importable from `machine_lsp.core.evals` as before.
"""

from __future__ import annotations

from machine_lsp.core.evals.cases import (
    EvalCase,
    case_from_obj,
    load_cases,
)
from machine_lsp.core.evals.compare import (
    ChangedRow,
    Comparison,
    compare,
    mcnemar_exact_p,
)
from machine_lsp.core.evals.grading import (
    DEFAULT_FORMAT_PATTERN,
    EvalError,
    Grader,
    bleeds,
    compile_pattern,
    default_bleed_pattern,
    format_ok,
    grade,
    literal_prefix,
)
from machine_lsp.core.evals.probe import (
    BUILTIN_PROBES,
    ProbeContext,
    context_probes,
    distinct_contexts,
    load_probe_questions,
    probe_messages,
    probe_prompts,
    row_context,
    score_probe,
)
from machine_lsp.core.evals.results import (
    SCHEMA_VERSION,
    EvalResult,
    ProbeReport,
    ProbeResult,
    ProbeRow,
    RowResult,
    Timings,
    build_result,
    encode_result,
    load_result,
    score_rows,
)

__all__ = [
    "BUILTIN_PROBES",
    "ChangedRow",
    "Comparison",
    "DEFAULT_FORMAT_PATTERN",
    "EvalCase",
    "EvalError",
    "EvalResult",
    "Grader",
    "ProbeContext",
    "ProbeReport",
    "ProbeResult",
    "ProbeRow",
    "RowResult",
    "SCHEMA_VERSION",
    "Timings",
    "bleeds",
    "build_result",
    "case_from_obj",
    "compare",
    "compile_pattern",
    "context_probes",
    "default_bleed_pattern",
    "distinct_contexts",
    "encode_result",
    "format_ok",
    "grade",
    "literal_prefix",
    "load_cases",
    "load_probe_questions",
    "load_result",
    "mcnemar_exact_p",
    "probe_messages",
    "probe_prompts",
    "row_context",
    "score_probe",
    "score_rows",
]
