"""`compare` two eval results over the same rows: accuracy, delta, flips each way, the exact two-sided McNemar
p-value (binomial test on the discordant pairs), format rates and the rows that changed."""

from __future__ import annotations

import math

import msgspec

from machine_lsp.core.evals.grading import EvalError
from machine_lsp.core.evals.results import EvalResult, RowResult


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


def _flipped(pairs: list[tuple[RowResult, RowResult]]) -> list[ChangedRow]:
    """The rows one result got right and the other wrong."""
    return [
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
        changed=_flipped(pairs),
        outputs_changed=sum(ra.output != rb.output for ra, rb in pairs),
        only_in_a=[i for i in a_rows if i not in b_rows],
        only_in_b=[i for i in b_rows if i not in a_rows],
        same_data=a.data_sha256 is not None and a.data_sha256 == b.data_sha256,
        a_bleed_rate=a.probe.bleed_rate if a.probe else None,
        b_bleed_rate=b.probe.bleed_rate if b.probe else None,
    )
