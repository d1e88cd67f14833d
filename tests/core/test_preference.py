"""Preference data: DPO pairs and KTO examples built from a real store, and the checks of pairs and KTO files."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from machine_lsp.cli.main import main
from machine_lsp.core import validate
from machine_lsp.core.export import build_kto, build_pairs
from machine_lsp.core.preference import ComparisonRow, KtoRow
from machine_lsp.core.store import Store
from machine_lsp.core.tagging import tag
from machine_lsp.core.transcripts import load_turns, turn_at

USER = [{"role": "user", "content": "What is 2 plus 2?"}]
GOOD = [{"role": "assistant", "content": "answer: 4"}]
BAD = [{"role": "assistant", "content": "Sure! 2 plus 2 is 4."}]


def _answers(tmp_path: Path) -> Path:
    """Two prompts: 7*8 answered four ways, 12+30 answered once (to be rewritten)."""
    rows = [("What is 7 * 8?", a) for a in ("answer: 56", "It is 56, I think.", "answer: 54")] + [
        ("What is 12 + 30?", "The answer is 42.")
    ]
    path = tmp_path / "answers.jsonl"
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": u}, {"role": "assistant", "content": a}]})
            + "\n"
            for u, a in rows
        )
    )
    return path


def _tag_answers(store: Store, tmp_path: Path) -> None:
    turns = load_turns(_answers(tmp_path))
    tag(store, turn_at(turns, 1), "good")
    tag(store, turn_at(turns, 2), "bad", note="chatty")
    tag(store, turn_at(turns, 3), "bad", note="wrong")
    tag(store, turn_at(turns, 4), "good", rewrite="answer: 42")


def test_pairs_from_a_store_name_how_they_were_built(store: Store, tmp_path: Path) -> None:
    _tag_answers(store, tmp_path)
    pairs, counts = build_pairs(store.records())
    sides = sorted(
        (p.comparison.completion_A[0]["content"], p.comparison.completion_B[0]["content"]) for p in pairs
    )
    assert sides == [
        ("answer: 42", "The answer is 42."),  # the rewrite over the model's original
        ("answer: 56", "It is 56, I think."),  # a good and a bad tag on one prompt
        ("answer: 56", "answer: 54"),
    ]
    assert all(p.label == "A" for p in pairs)
    assert (counts.pairs, counts.from_rewrites, counts.from_tags) == (3, 1, 2)
    # Every exported pair is a valid pairs file row.
    text = "".join(msgspec.json.encode(p).decode() + "\n" for p in pairs)
    report = validate.validate_text(text)
    assert report.ok and report.rows == 3, report.findings


def test_every_good_and_bad_tag_is_a_kto_example(store: Store, tmp_path: Path) -> None:
    _tag_answers(store, tmp_path)
    rows, counts = build_kto(store.records())
    got = sorted((r.completion[0]["content"], r.label) for r in rows)
    assert got == [
        ("It is 56, I think.", False),
        ("The answer is 42.", False),  # the original a rewrite replaced: undesirable
        ("answer: 42", True),
        ("answer: 54", False),
        ("answer: 56", True),
    ]
    assert (counts.desirable, counts.undesirable) == (2, 3)
    assert rows[0].prompt[-1]["role"] == "user"
    text = "".join(msgspec.json.encode(r).decode() + "\n" for r in rows)
    assert validate.validate_text(text).ok


def test_export_pairs_and_kto_from_the_cli(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tag_answers(store, tmp_path)
    assert main(["export", "pairs"]) == 0
    pairs = [msgspec.json.decode(line, type=ComparisonRow) for line in capsys.readouterr().out.splitlines()]
    assert len(pairs) == 3
    assert main(["export", "kto", "--out", str(tmp_path / "kto.jsonl")]) == 0
    assert "Wrote 5 KTO examples" in capsys.readouterr().err
    rows = [
        msgspec.json.decode(line, type=KtoRow) for line in (tmp_path / "kto.jsonl").read_bytes().splitlines()
    ]
    assert sum(r.label for r in rows) == 2


def _pair(prompt: list, a: list, b: list, label: object = "A", **extra: object) -> str:
    row = {
        "comparison": {"prompt_conversation": prompt, "completion_A": a, "completion_B": b},
        "label": label,
    }
    return json.dumps({**row, **extra})


PAIR_DEFECTS = [
    (_pair(USER, GOOD, BAD), []),
    (
        _pair(USER, GOOD, GOOD),
        [("pair-same-sides", "error", '[{"role": "assistant", "content": "answer: 4"}]}')],
    ),
    (_pair(USER, GOOD, GOOD, "Tie"), [("pair-same-sides", "warning", '{"prompt_conversation"')]),
    (_pair(USER, [], BAD, "B"), [("pair-empty-side", "error", '[], "completion_B"')]),
    (
        _pair(USER, [{"role": "assistant", "content": "  "}], BAD),
        [("pair-empty-side", "error", '[{"role": "assistant", "content": "  "}]')],
    ),
    (_pair(USER + GOOD, GOOD, BAD), [("pair-prompt-mismatch", "error", '[{"role": "user"')]),
    (
        _pair(USER, USER + GOOD, BAD),
        [
            (
                "pair-prompt-mismatch",
                "error",
                '[{"role": "user", "content": "What is 2 plus 2?"}, {"role": "assistant"',
            )
        ],
    ),
    (_pair(USER, GOOD, BAD, "C"), [("pair-label", "error", '"C"')]),
    (_pair(USER, GOOD, BAD, extra=1), [("pair-shape", "error", '"extra"')]),
    (
        json.dumps({"comparison": {"prompt_conversation": USER, "completion_A": GOOD}, "label": "A"}),
        [("pair-shape", "error", '{"prompt_conversation"')],
    ),
    (_pair(USER, [{"role": "robot", "content": "x"}], BAD), [("pair-shape", "error", '{"role": "robot"')]),
    (json.dumps({"prompt": USER, "chosen": GOOD, "rejected": BAD}), None),  # many findings: not this format
]


def test_a_pairs_file_with_every_kind_of_defect_gets_the_right_findings(tmp_path: Path) -> None:
    lines = [line for line, _ in PAIR_DEFECTS]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = validate.validate_path(path)  # picked as a pairs file by its first row
    by_line: dict[int, list] = {}
    for f in report.findings:
        by_line.setdefault(f.line, []).append(f)
    for number, (line, expected) in enumerate(PAIR_DEFECTS, start=1):
        found = by_line.get(number, [])
        if expected is None:
            assert {f.code for f in found} >= {"pair-shape", "pair-label"}, found
            continue
        assert [(f.code, f.severity) for f in found] == [(c, s) for c, s, _ in expected], (number, found)
        for f, (_, _, at) in zip(found, expected, strict=True):
            assert line[f.column - 1 :].startswith(at), (number, f, line[f.column - 1 : f.column + 30])
    assert not report.ok


def _kto(prompt: object, completion: object, label: object = True) -> str:
    return json.dumps({"prompt": prompt, "completion": completion, "label": label})


def test_a_kto_file_with_every_kind_of_defect_gets_the_right_findings(tmp_path: Path) -> None:
    cases = [
        (_kto(USER, GOOD), None),
        (_kto(USER, BAD, False), None),
        (_kto(USER, GOOD, "yes"), "kto-label"),
        (_kto(USER, []), "kto-empty-completion"),
        (_kto(USER + GOOD, BAD), "kto-prompt-mismatch"),
        (_kto(USER, USER), "kto-prompt-mismatch"),
        (_kto("What is 2 plus 2?", GOOD), "kto-shape"),
        (json.dumps({"prompt": USER, "label": True}), "kto-shape"),
    ]
    path = tmp_path / "kto.jsonl"
    path.write_text("\n".join(line for line, _ in cases) + "\n")
    report = validate.validate_path(path)
    got = {f.line: f.code for f in report.findings}
    assert got == {n: code for n, (_, code) in enumerate(cases, start=1) if code}, report.findings


def test_train_validate_reports_pairs_findings_as_file_line_col(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text(_pair(USER, GOOD, BAD) + "\n" + _pair(USER, GOOD, GOOD) + "\n")
    assert main(["train", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    column = _pair(USER, GOOD, GOOD).index('"completion_B"') + len('"completion_B": ') + 1
    assert f"pairs.jsonl:2:{column}" in out and "pair-same-sides" in out, out


def test_eval_pairs_needs_a_pairs_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "eval", "pairs", "latest", "--data", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such pairs data file" in capsys.readouterr().err
