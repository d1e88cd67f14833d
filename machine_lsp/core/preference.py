"""Preference rows: tinker-cookbook's labelled comparisons (DPO) and TRL's unpaired KTO examples (pure, msgspec).

* A comparison row, as tinker-cookbook's `LabeledComparison` (`preference/types.py`) and its DPO recipe read them:
  `{"comparison": {"prompt_conversation": [...], "completion_A": [...], "completion_B": [...]}, "label": "A"}`.
  `machine export pairs` writes the chosen answer as A (label "A").
* A KTO row, as TRL's `KTOTrainer` reads conversational unpaired data:
  `{"prompt": [...], "completion": [...], "label": true}` (true: desirable).

Messages are plain dicts in the cookbook's shape (`schema.to_cookbook_messages`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from machine_lsp.core.schema import Message, RowFileError

Label = Literal["A", "B", "Tie"]


class Comparison(msgspec.Struct, forbid_unknown_fields=True):
    prompt_conversation: list[dict[str, Any]]
    completion_A: list[dict[str, Any]]  # noqa: N815 - the cookbook's field names
    completion_B: list[dict[str, Any]]  # noqa: N815


class ComparisonRow(msgspec.Struct):
    comparison: Comparison
    label: Label

    def chosen_rejected(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """(chosen, rejected) completions; None for a Tie (no preference: DPO skips it, as the cookbook does)."""
        c = self.comparison
        if self.label == "A":
            return c.completion_A, c.completion_B
        if self.label == "B":
            return c.completion_B, c.completion_A
        return None


class KtoRow(msgspec.Struct):
    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]]
    label: bool  # True: desirable (a good tag or a rewrite), False: undesirable (a bad tag, a rewritten original)


class PairCounts(msgspec.Struct, kw_only=True):
    """How preference data was built (recorded in a run's manifest)."""

    source: str  # "store" or the file's path
    pairs: int = 0
    from_rewrites: int = 0  # rewrite (chosen) vs the model's original (rejected)
    from_tags: int = 0  # a good tag vs a bad tag on the same prompt
    ties_skipped: int = 0
    desirable: int = 0  # KTO
    undesirable: int = 0


def messages_of(dicts: Sequence[dict[str, Any]]) -> list[Message]:
    """Cookbook message dicts -> schema Messages (raises msgspec.ValidationError naming the field)."""
    return msgspec.convert(list(dicts), list[Message])


def _read_rows(path: Path, row_type: type) -> list[tuple[int, Any]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RowFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    rows = []
    decoder = msgspec.json.Decoder(row_type)
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, decoder.decode(line)))
        except msgspec.DecodeError as exc:
            raise RowFileError(f"{path}:{number}: {exc}") from None
    if not rows:
        raise RowFileError(f"{path}: no rows")
    return rows


def read_comparison_rows(path: Path) -> list[tuple[int, ComparisonRow]]:
    """(line, row) of a pairs file (validate it first for positions: `machine train validate`)."""
    return _read_rows(path, ComparisonRow)


def read_kto_rows(path: Path) -> list[tuple[int, KtoRow]]:
    return _read_rows(path, KtoRow)


class PairScore(msgspec.Struct):
    """One held-out pair scored: each side's completion log-prob under the policy and the reference."""

    line: int
    chosen: float
    rejected: float
    chosen_ref: float
    rejected_ref: float

    def margin(self, beta: float) -> float:
        """The implicit reward margin beta * ((chosen - chosen_ref) - (rejected - rejected_ref))."""
        return beta * ((self.chosen - self.chosen_ref) - (self.rejected - self.rejected_ref))


class PreferenceReport(msgspec.Struct, kw_only=True):
    """Preference accuracy (the policy prefers the chosen side more than the reference does) and the mean reward
    margin, as tinker-cookbook's DPO metrics, on held-out pairs."""

    pairs: int
    beta: float
    accuracy: float
    margin: float
    chosen_reward: float
    rejected_reward: float
    rows: list[PairScore]


def preference_report(scores: Sequence[PairScore], beta: float) -> PreferenceReport:
    n = len(scores)
    if not n:
        raise ValueError("no pairs to score")
    margins = [s.margin(beta) for s in scores]
    return PreferenceReport(
        pairs=n,
        beta=beta,
        accuracy=sum(m > 0 for m in margins) / n,
        margin=sum(margins) / n,
        chosen_reward=sum(beta * (s.chosen - s.chosen_ref) for s in scores) / n,
        rejected_reward=sum(beta * (s.rejected - s.rejected_ref) for s in scores) / n,
        rows=list(scores),
    )
