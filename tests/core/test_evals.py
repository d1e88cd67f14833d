"""core/evals/ against hand-computed values: graders, format, compare statistics, result schema, probes."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from machine_lsp.core import evals
from machine_lsp.core.evals import EvalError, RowResult


@pytest.mark.parametrize(
    "output, expected, match, ok",
    [
        ("answer: 62", "answer: 62", "exact", True),
        ("  answer: 62\n", "answer: 62", "exact", True),
        ("answer: 62.", "answer: 62", "exact", False),
        ("Answer: 62", "answer: 62", "exact", False),
        ("The sum is answer: 62, done", "answer: 62", "contains", True),
        ("answer: 61", "answer: 62", "contains", False),
        ("answer: 62", r"answer:\s*6\d", "regex", True),
        ("answer: 72", r"answer:\s*6\d", "regex", False),
    ],
)
def test_graders(output: str, expected: str, match: str, ok: bool) -> None:
    assert evals.grade(output, expected, match) is ok  # type: ignore[arg-type]


def test_bad_regex_and_grader_are_precise() -> None:
    with pytest.raises(EvalError, match=r"invalid regex in expected '\(unclosed'"):
        evals.grade("x", "(unclosed", "regex")
    with pytest.raises(EvalError, match="unknown grader 'fuzzy'"):
        evals.grade("x", "x", "fuzzy")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "output, ok",
    [
        ("answer: 62", True),
        ("answer: -3", True),
        (" answer: 7 \n", True),
        ("answer: Paris", False),
        ("62", False),
        ("answer: 62\nmore", False),
        ("The answer: 62", False),
    ],
)
def test_format_default_pattern(output: str, ok: bool) -> None:
    assert evals.format_ok(output) is ok


def test_format_custom_pattern_and_bleed_pattern_derivation() -> None:
    assert evals.format_ok("Final: yes", r"^Final: (yes|no)$")
    assert evals.literal_prefix(r"^answer: -?\d+$") == "answer: "
    assert evals.literal_prefix(r"^Final\: (yes|no)$") == "Final: "
    assert evals.default_bleed_pattern() == r"^\s*answer:"
    assert evals.default_bleed_pattern(r"^\d+$") == r"^\d+$"  # no literal prefix: the format itself
    rx = evals.default_bleed_pattern()
    assert evals.bleeds("answer: Paris", rx) and evals.bleeds("  answer: 42", rx)
    assert not evals.bleeds("The capital of France is Paris.", rx)


@pytest.mark.parametrize(
    "gained, lost, p",
    [
        (0, 0, 1.0),
        (1, 0, 1.0),  # 2 * 1/2
        (5, 1, 14 / 64),  # 2 * (C(6,0)+C(6,1)) / 2^6
        (1, 5, 14 / 64),  # symmetric
        (10, 0, 2 / 1024),
        (3, 3, 1.0),  # 2 * 42/64 > 1, capped
        (8, 2, 2 * (1 + 10 + 45) / 1024),  # 0.109375
        (14, 0, 2 / 16384),
    ],
)
def test_mcnemar_exact(gained: int, lost: int, p: float) -> None:
    assert evals.mcnemar_exact_p(gained, lost) == pytest.approx(p, rel=1e-12)


def _row(i: int, correct: bool, fmt: bool = True, output: str | None = None) -> RowResult:
    return RowResult(
        id=f"eval-{i:03d}",
        prompt=f"q{i}",
        expected="answer: 1",
        output=output or ("answer: 1" if correct else "x"),
        correct=correct,
        format_ok=fmt,
    )


def _result(name: str, rows: list[RowResult], sha: str = "abc") -> evals.EvalResult:
    return evals.build_result(
        rows, name=name, model="m", checkpoint=None, engine="local", data_path="eval.jsonl", data_sha256=sha
    )


def test_compare_hand_computed() -> None:
    # 10 rows. A correct on 0-3; B correct on 2-9. gained = rows 4..9 (6), lost = rows 0,1 (2), both = 2,3.
    a = _result("baseline", [_row(i, i < 4, fmt=i < 5) for i in range(10)])
    b = _result("step-60", [_row(i, i >= 2) for i in range(10)])
    c = evals.compare(a, b)
    assert (c.n, c.a_correct, c.b_correct) == (10, 4, 8)
    assert c.a_accuracy == 0.4 and c.b_accuracy == 0.8 and c.delta == pytest.approx(0.4)
    assert (c.gained, c.lost, c.both_correct, c.both_wrong) == (6, 2, 2, 0)
    # exact two-sided: n=8, k=2 -> 2 * (1 + 8 + 28) / 256 = 74/256
    assert c.mcnemar_p == pytest.approx(74 / 256)
    assert c.a_format_rate == 0.5 and c.b_format_rate == 1.0
    assert [r.id for r in c.changed] == ["eval-000", "eval-001", *[f"eval-{i:03d}" for i in range(4, 10)]]
    assert c.changed[0].a_correct and not c.changed[0].b_correct
    assert c.outputs_changed == 8 and c.same_data and not c.only_in_a


def test_compare_pairs_by_id_and_reports_unpaired() -> None:
    a = _result("a", [_row(1, True), _row(2, False), _row(3, True)])
    b = _result("b", [_row(3, True), _row(2, True), _row(4, False)], sha="other")
    c = evals.compare(a, b)
    assert c.n == 2 and c.gained == 1 and c.lost == 0
    assert c.only_in_a == ["eval-001"] and c.only_in_b == ["eval-004"] and not c.same_data
    with pytest.raises(EvalError, match="share no row ids"):
        evals.compare(_result("a", [_row(1, True)]), _result("b", [_row(2, True)]))


def test_score_and_build_result_schema_round_trip(tmp_path: Path) -> None:
    data = tmp_path / "eval.jsonl"
    data.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"messages": [{"role": "user", "content": "2+3?"}], "expected": "answer: 5", "id": "a"},
                {"messages": [{"role": "user", "content": "4+4?"}], "expected": "8", "match": "contains"},
                {
                    "messages": [
                        {"role": "user", "content": "1+1?"},
                        {"role": "assistant", "content": "answer: 2"},
                    ]
                },
            ]
        )
        + "\n"
    )
    cases = evals.load_cases(data)
    assert [c.id for c in cases] == ["a", "row-2", "row-3"]
    assert cases[2].expected == "answer: 2" and cases[2].prompt == "1+1?" and len(cases[2].messages) == 1
    rows = evals.score_rows(cases, ["answer: 5", "answer: 9", "answer: 2"])
    assert [r.correct for r in rows] == [True, False, True]
    assert [r.format_ok for r in rows] == [True, True, True]
    result = evals.build_result(
        rows,
        name="baseline",
        model="m",
        checkpoint=None,
        engine="local",
        data_path=str(data),
        data_sha256="00",
    )
    assert (result.n, result.correct, result.grader) == (3, 2, "per-row")
    assert result.accuracy == pytest.approx(2 / 3) and result.format_rate == 1.0
    out = tmp_path / "r.json"
    out.write_bytes(evals.encode_result(result))
    assert evals.load_result(out) == result
    keys = set(json.loads(out.read_text()))
    assert {
        "model",
        "checkpoint",
        "engine",
        "data_path",
        "data_sha256",
        "grader",
        "n",
        "correct",
        "accuracy",
        "rows",
        "timings",
    } <= keys
    assert set(json.loads(out.read_text())["rows"][0]) >= {
        "id",
        "prompt",
        "expected",
        "output",
        "correct",
        "format_ok",
    }
    # grader override applies to every row
    assert evals.score_rows(cases, ["answer: 5 ", "8", "no"], grader="exact")[1].correct is True


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r"eval.jsonl:2: invalid JSON"),
        ('{"messages": [], "expected": "x"}', "eval.jsonl:2: eval row has no messages"),
        (
            '{"messages": [{"role": "user", "content": "q"}]}',
            "eval.jsonl:2: a chat row used for eval must end",
        ),
        (
            '{"messages": [{"role": "robot", "content": "q"}], "expected": "x"}',
            "eval.jsonl:2: not an eval row",
        ),
        (
            '{"messages": [{"role": "user", "content": "q"}], "expected": "(", "match": "regex"}',
            "invalid regex in .*eval.jsonl:2",
        ),
        ("[1, 2]", "eval.jsonl:2: expected a JSON object"),
    ],
)
def test_load_cases_errors_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    data = tmp_path / "eval.jsonl"
    good = {"messages": [{"role": "user", "content": "q"}], "expected": "x"}
    data.write_text(json.dumps(good) + "\n" + line + "\n")
    with pytest.raises(EvalError, match=message):
        evals.load_cases(data)


def test_load_cases_file_errors(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match="no such file"):
        evals.load_cases(tmp_path / "missing.jsonl")
    with pytest.raises(EvalError, match="is a directory"):
        evals.load_cases(tmp_path)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(EvalError, match="no eval rows"):
        evals.load_cases(tmp_path / "empty.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(EvalError, match="not UTF-8"):
        evals.load_cases(tmp_path / "bin.jsonl")
    with pytest.raises(EvalError, match="not an eval result file"):
        evals.load_result(tmp_path / "empty.jsonl")


def test_probe_set_and_scoring(tmp_path: Path) -> None:
    builtin = evals.probe_prompts()
    assert len(builtin) >= 10 and "What is the capital of France?" in builtin
    user = tmp_path / "probes.txt"
    user.write_text("What is 2 plus 2 in words?\nWhat is the capital of France?\n\n")
    extra = evals.load_probe_questions(user)
    questions = evals.probe_prompts(extra)
    assert len(questions) == len(builtin) + 1  # the duplicate capital question is dropped
    outputs = ["answer: Paris"] + ["A sentence."] * (len(questions) - 2) + ["answer: 4"]
    probe = evals.score_probe(
        questions, outputs, bleed_pattern=evals.default_bleed_pattern(), n_builtin=len(builtin)
    )
    assert probe.bled == 2 and probe.n == len(questions)
    assert probe.bleed_rate == pytest.approx(2 / len(questions))
    assert probe.rows[0].bleeds and probe.rows[-1].source == "user" and probe.rows[0].source == "builtin"
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"question": "Q1?"}\n"Q2?"\n{"messages": [{"role": "user", "content": "Q3?"}]}\n')
    assert evals.load_probe_questions(jl) == ["Q1?", "Q2?", "Q3?"]
    jl.write_text('{"foo": 1}\n')
    with pytest.raises(EvalError, match=r"p.jsonl:1: expected a question"):
        evals.load_probe_questions(jl)


def test_result_schema_is_strict_on_types(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"name": "x", "n": "three"}))
    with pytest.raises(EvalError, match="not an eval result file"):
        evals.load_result(bad)
    assert msgspec.json.decode(evals.encode_result(_result("x", [_row(1, True)])))["schema_version"] == 1


def test_the_bleed_probe_is_also_asked_in_the_tagged_rows_contexts() -> None:
    from machine_lsp.core.schema import Message

    pi = Message(role="system", content="You are Pi, a coding agent.")
    other = Message(role="system", content="You are a terse helper.")
    tool = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
    user = Message(role="user", content="What is 2 plus 3?")
    rows = [
        ([pi, user], [tool]),
        ([pi, user], [tool]),
        ([user], None),
        ([other, user], None),
        ([pi, user], None),
    ]
    contexts = evals.distinct_contexts(evals.row_context(m, t) for m, t in rows)
    assert len(contexts) == 3  # Pi with tools, Pi without, the other prompt; the bare row adds none
    assert evals.distinct_contexts(evals.row_context(m, t) for m, t in reversed(rows)) == contexts  # by hash
    probes = evals.context_probes(evals.BUILTIN_PROBES, contexts)
    assert len(probes) == len(evals.BUILTIN_PROBES)
    for i, (messages, tools) in enumerate(probes):
        context = contexts[i % 3]
        assert messages == [*context.system, Message(role="user", content=evals.BUILTIN_PROBES[i])]
        assert tools == (list(context.tools) if context.tools else None)
    assert evals.context_probes(evals.BUILTIN_PROBES, []) == []
    assert evals.row_context([user], []) is None
