"""Hypothesis fuzz of the validator: no exception on any input, every finding inside the file, fast and slow
paths agree."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from machine_lsp.core import validate as v

ROLES = st.sampled_from(["system", "user", "assistant", "tool", "Assistant", "USER", "bot", "", 3])
CONTENT = st.one_of(
    st.text(max_size=12),
    st.none(),
    st.integers(),
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=6)}),
            st.fixed_dictionaries({"type": st.just("thinking"), "thinking": st.text(max_size=6)}),
            st.fixed_dictionaries({"type": st.text(max_size=5)}),
        ),
        max_size=3,
    ),
)
CALL = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["c1", "c2"]),
        "function": st.fixed_dictionaries(
            {"name": st.just("f"), "arguments": st.sampled_from(["{}", "{", "[1]"])}
        ),
    }
)
MESSAGE = st.fixed_dictionaries(
    {"role": ROLES},
    optional={
        "content": CONTENT,
        "tool_calls": st.one_of(st.none(), st.lists(CALL, max_size=2), st.just("x")),
        "tool_call_id": st.one_of(st.sampled_from(["c1", "c2", "c3"]), st.integers()),
        "name": st.one_of(st.text(max_size=3), st.integers()),
    },
)
ROW = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.one_of(st.lists(MESSAGE, max_size=4), st.text(max_size=3), st.none()),
        "expected": st.one_of(
            st.text(max_size=6), st.integers(), st.none(), st.sampled_from(["(", "a+", "[x"])
        ),
        "match": st.one_of(st.sampled_from(["exact", "contains", "regex", "Regex", "x"]), st.integers()),
        "id": st.one_of(st.text(max_size=3), st.integers()),
    },
)
# Rows that are valid or one step from valid, so that the fast path is exercised too.
GOOD_PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=4)}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": st.text(max_size=4)}),
)
GOOD_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.one_of(st.text(min_size=1, max_size=8), st.just(""), st.lists(GOOD_PART, max_size=2)),
    },
    optional={
        "tool_calls": st.lists(CALL, max_size=2),
        "tool_call_id": st.sampled_from(["c1", "c2"]),
        "name": st.text(max_size=3),
    },
)
LAST = st.sampled_from([{"role": "assistant", "content": "ok"}, {"role": "user", "content": "q?"}])
NEAR_ROW = st.builds(
    lambda messages, last, extra: {"messages": messages + [last], **extra},
    st.lists(GOOD_MESSAGE, max_size=3),
    LAST,
    st.fixed_dictionaries(
        {},
        optional={
            "expected": st.sampled_from(["4", "a+", "(", "answer: \\d+"]),
            "match": st.sampled_from(["exact", "contains", "regex"]),
            "id": st.text(max_size=2),
            "meta": st.integers(),
        },
    ),
)
ANY_ROW = st.one_of(ROW, NEAR_ROW)
KINDS = st.sampled_from(["train", "eval", "auto"])


def lines_of(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def assert_inside(text: str, report: v.Report) -> None:
    lines = lines_of(text)
    for finding in report.findings:
        assert 1 <= finding.line <= finding.end_line <= len(lines), finding
        assert 1 <= finding.column <= len(lines[finding.line - 1]) + 1, finding
        assert 1 <= finding.end_column <= len(lines[finding.end_line - 1]) + 1, finding
        if finding.line == finding.end_line:
            assert finding.column <= finding.end_column, finding
        assert finding.severity in ("error", "warning") and finding.code and finding.message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ANY_ROW, max_size=4), KINDS, st.sampled_from(["\n", "\r\n"]))
def test_structured_rows_never_raise_and_findings_stay_inside(
    rows: list[dict], kind: v.Kind, eol: str
) -> None:
    text = eol.join(json.dumps(row, ensure_ascii=False) for row in rows)
    report = v.validate_text(text, kind)
    assert_inside(text, report)
    bytes_report = v.validate_bytes(text.encode(), kind)
    assert [(f.line, f.column, f.code) for f in bytes_report.findings] == [
        (f.line, f.column, f.code) for f in report.findings
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(ROW.map(json.dumps), st.sampled_from(["", "  ", "null", "[]", "{,"])), max_size=5),
    KINDS,
)
def test_file_loop_agrees_with_check_line_and_dataset_findings(lines: list[str], kind: v.Kind) -> None:
    # The file loop writes check_line's fast path out inline; both must report the same findings.
    lines = lines + lines[:1]  # a duplicate, when there is a row
    text = "".join(line + "\n" for line in lines)
    results = [v.check_line(line, index + 1, kind) for index, line in enumerate(lines)]
    expected = [f for r in results for f in r.findings] + v.dataset_findings(results)
    key = lambda f: (f.line, f.column, f.code, f.message)  # noqa: E731
    assert sorted(map(key, v.validate_text(text, kind).findings)) == sorted(map(key, expected))
    assert sorted(map(key, v.validate_bytes(text.encode(), kind).findings)) == sorted(map(key, expected))


@settings(max_examples=400, deadline=None)
@given(ANY_ROW, KINDS)
def test_fast_path_accepts_only_rows_the_slow_path_finds_clean(row: dict, kind: v.Kind) -> None:
    text = json.dumps(row)
    if v._fast_check(text, kind) is not None or v._plain_check(text, kind, True) is not None:
        assert v._slow_check(text, 1, kind).findings == []


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from('{}[]":,\\ \t\r\nab0-eE.🙂\ufeffnultrsfa'), max_size=60), KINDS)
def test_arbitrary_text_never_raises(text: str, kind: v.Kind) -> None:
    assert_inside(text, v.validate_text(text, kind))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    try:
        report = v.validate_bytes(data)
    except v.UnreadableFile as exc:
        assert "binary" in str(exc) or "UTF-16" in str(exc)
        return
    text = data.decode("utf-8", "surrogateescape")
    assert_inside(text, report)


MATCHES_FUZZ = ["exact", "contains", "regex"]
PLAIN_CONTENT = st.one_of(
    st.text(min_size=1, max_size=6),
    st.lists(GOOD_PART, min_size=1, max_size=2),
)
PLAIN_ROW = st.builds(
    lambda first, last, extra: {"messages": [first, last], **extra},
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": PLAIN_CONTENT}),
    st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user"]), "content": PLAIN_CONTENT}),
    st.fixed_dictionaries(
        {}, optional={"expected": st.sampled_from(["4", "(", "a+"]), "match": st.sampled_from(MATCHES_FUZZ)}
    ),
)
LINE = st.one_of(
    PLAIN_ROW.map(json.dumps),
    PLAIN_ROW.map(lambda row: json.dumps(row, ensure_ascii=False)),
    NEAR_ROW.map(json.dumps),
    ROW.map(json.dumps),
    st.sampled_from(["", "  ", "null", "[]", "{,", '{"messages": [{"role": "user", "content": "q?"}]},']),
)


def _key(finding: v.Finding) -> bytes:
    return msgspec.json.encode(finding)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(LINE, max_size=14),
    KINDS,
    st.sampled_from([1, 2, 3, 7, 200]),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.booleans(),
)
def test_batched_file_pass_equals_per_line_path(
    lines: list[str], kind: v.Kind, batch: int, eol: str, leak: bool
) -> None:
    # The file pass decodes lines a batch at a time and sends only the lines it rejects to the per-line path:
    # findings (fixes included), row counts and leakage must be exactly those of check_line line by line.
    lines = lines + lines[:1]  # a duplicate, when there is a row
    text = "".join(line + eol for line in lines)
    results = [v.check_line(line, index + 1, kind) for index, line in enumerate(lines)]
    other = {"q?", "ok"} if leak else None
    expected = [f for r in results for f in r.findings] + v.dataset_findings(results, other)
    batch_before = v._BATCH
    v._BATCH = batch
    try:
        reports = [
            v.validate_text(text, kind, other_prompts=other),
            v.validate_bytes(text.encode(), kind, other_prompts=other),
        ]
    finally:
        v._BATCH = batch_before
    for report in reports:
        assert sorted(map(_key, report.findings)) == sorted(map(_key, expected))
        assert report.stats["train_rows"] == sum(r.row_kind == "train" for r in results)
        assert report.stats["eval_rows"] == sum(r.row_kind == "eval" for r in results)
        assert report.stats["messages"] == sum(r.messages for r in results)


# check_lines: the batched per-line API of the language server's open pass, against check_line line by line.

TOOL_ROW = json.dumps(
    {
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
        ]
    }
)
SPECIAL = st.sampled_from(
    [
        "",
        "  ",
        "\t",
        "null",
        "[]",
        "{,",
        "{not json",
        "\ufeff"
        + json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}),
        "\ufeff",
        json.dumps({"messages": [{"role": "assistant", "content": "only"}]}),  # one message: no prompt key
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "  padded 😀 漢字  "},
                    {"role": "assistant", "content": "ok"},
                ]
            }
        ),
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": " parts "}]},
                    {"role": "assistant", "content": "ok"},
                ]
            }
        ),
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "system", "content": "s"},
                    {"role": "assistant", "content": "a"},
                ]
            }
        ),
        json.dumps({"messages": [{"role": "user", "content": "q?"}], "expected": "4"}),
        json.dumps({"messages": [{"role": "user", "content": "q?"}], "expected": "(", "match": "regex"}),
        TOOL_ROW,
        '  {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}  ',
    ]
)
UNICODE_LINE = st.text(max_size=20)  # arbitrary text, surrogates and separators included
ANY_LINE = st.one_of(LINE, SPECIAL, UNICODE_LINE, ROW.map(json.dumps), NEAR_ROW.map(json.dumps))
# Batches of training rows of the common shape take the C prompt-key route; mix them in long runs too.
COMMON_LINE = PLAIN_ROW.map(json.dumps)


def assert_same(lines: list[str], kind: v.Kind, start_line: int) -> None:
    expected = [v.check_line(line, start_line + index, kind) for index, line in enumerate(lines)]
    got = v.check_lines(lines, kind, start_line)
    assert len(got) == len(expected)
    for index, (a, b) in enumerate(zip(got, expected, strict=True)):
        # Field for field (msgspec Structs compare every field; findings compared as lists of Findings).
        assert list(a.findings) == list(b.findings), (index, lines[index])
        assert (a.fingerprint, a.prompt_key, a.width, a.row_kind, a.messages) == (
            b.fingerprint,
            b.prompt_key,
            b.width,
            b.row_kind,
            b.messages,
        ), (index, lines[index])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(ANY_LINE, max_size=16),
    st.lists(COMMON_LINE, max_size=8),
    KINDS,
    st.sampled_from([1, 2, 3, 5, 200]),
    st.sampled_from([1, 1, 2, 41]),
    st.randoms(use_true_random=False),
)
def test_check_lines_equals_check_line_line_by_line(
    mixed: list[str], common: list[str], kind: v.Kind, batch: int, start_line: int, rnd
) -> None:
    lines = common + mixed + common
    rnd.shuffle(mixed)
    lines += mixed + lines[:2]  # repeated lines: equal fingerprints
    before = v._BATCH
    v._BATCH = batch  # batch boundaries anywhere
    try:
        assert_same(lines, kind, start_line)
    finally:
        v._BATCH = before


@pytest.mark.parametrize("kind", ["train", "eval", "auto"])
def test_check_lines_on_a_large_clean_file_and_with_breaks(kind: v.Kind) -> None:
    rows = [
        json.dumps(
            {
                "messages": [
                    {"role": "system", "content": "Reply briefly."},
                    {"role": "user", "content": f" What is {i} + 1? "},
                    {"role": "assistant", "content": f"answer: {i + 1}"},
                ],
                **({"expected": str(i + 1)} if kind != "train" and i % 3 == 0 else {}),
            }
        )
        for i in range(1000)
    ]
    assert_same(rows, kind, 1)
    broken = list(rows)
    broken[5] = ""
    broken[250] = "{not json"
    broken[401] = broken[400]
    broken[999] = rows[0].replace('"assistant"', '"Assistant"')
    assert_same(broken, kind, 7)


def test_check_lines_clean_results_and_fallback() -> None:
    good = json.dumps(
        {"messages": [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}]}
    )
    lines = [good, "{broken", "", TOOL_ROW, good]
    seen: list[tuple[str, int, str]] = []

    def fallback(text: str, line_no: int, kind: v.Kind) -> v.LineResult:
        seen.append((text, line_no, kind))
        return v.check_line(text, 1, kind)  # every line numbered 1, as the language server caches them

    results = v.check_lines(lines, "train", 10, fallback=fallback)
    # The plain rows never reach the fallback; everything else does, with its own line number.
    assert seen == [("{broken", 11, "train"), ("", 12, "train"), (TOOL_ROW, 13, "train")]
    assert results[0].findings == () and results[0].prompt_key == "hi" and results[0].row_kind == "train"
    assert results[0].fingerprint == results[4].fingerprint == hash(good)
    assert results[1].findings[0].line == 1 and results[1].findings[0].code == "json-invalid"
    assert results[2].findings[0].code == "blank-line"
    assert results[3] == v.check_line(TOOL_ROW, 1, "train")
    assert v.check_lines([], "auto") == []
