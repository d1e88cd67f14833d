"""Bad input, each its own test: findings or a clean UnreadableFile, never an exception from the validator."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest

from machine_lsp.core.validate import UnreadableFile, check_line, validate_bytes, validate_path

GOOD = json.dumps({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})
OTHER = json.dumps({"messages": [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"}]})


def found(report) -> list[tuple[int, int, str]]:
    return [(f.line, f.column, f.code) for f in report.findings]


def test_invalid_utf8_is_found_at_the_exact_byte_and_the_row_is_still_checked() -> None:
    line2 = (
        '{"messages": [{"role": "user", "content": "caf\u00e9 \xff"}, {"role": "Assistant", "content": "x"}]}'
    )
    data = (GOOD + "\n").encode() + line2.encode("utf-8").replace("\xff".encode(), b"\xff") + b"\n"
    report = validate_bytes(data)
    column = line2.index("\xff") + 1  # code points before the bad byte, plus one
    role_column = line2.index('"Assistant"') + 1
    assert found(report) == [(2, column, "invalid-utf8"), (2, role_column, "role-unknown")]
    assert "ff" in report.findings[0].message


def test_a_truncated_multibyte_sequence_counts_each_bad_byte() -> None:
    data = b'{"messages": [{"role": "user", "content": "\xe6\x97"}]}\n'
    report = validate_bytes(data)
    assert [f.code for f in report.findings] == ["no-assistant", "invalid-utf8"]
    bad = report.findings[1]
    assert (bad.column, bad.end_column) == (44, 46)


def test_bom_is_a_finding_with_a_fix_and_columns_on_line_one_count_it() -> None:
    text = '\ufeff{"messages": [{"role": "user", "content": "q"}, {"role": "Assistant", "content": "a"}]}\n'
    report = validate_bytes(text.encode("utf-8"))
    assert [f.code for f in report.findings] == ["bom", "role-unknown"]
    bom, role = report.findings
    assert bom.fix is not None and bom.fix.edits[0].column == 1 and bom.fix.edits[0].end_column == 2
    assert text[role.column - 1 : role.end_column - 1] == '"Assistant"'
    assert role.fix is not None and role.fix.edits[0].column == role.column


def test_bom_fix_leaves_a_clean_file() -> None:
    data = ("\ufeff" + GOOD + "\n").encode()
    report = validate_bytes(data)
    assert found(report) == [(1, 1, "bom")]
    assert validate_bytes(data[3:]).findings == []


def test_crlf_file_is_clean() -> None:
    data = (GOOD + "\r\n" + OTHER + "\r\n").encode()
    report = validate_bytes(data)
    assert report.findings == [] and report.rows == 2


def test_blank_lines_are_warnings_and_do_not_fail_the_file() -> None:
    data = (GOOD + "\n\n   \n" + OTHER + "\n").encode()
    report = validate_bytes(data)
    assert found(report) == [(2, 1, "blank-line"), (3, 1, "blank-line")]
    assert report.ok and report.rows == 2


def test_whitespace_last_line_without_newline_is_removed_from_the_previous_line() -> None:
    report = validate_bytes((GOOD + "\n  ").encode())
    (finding,) = report.findings
    assert finding.fix is not None
    edit = finding.fix.edits[0]
    assert (edit.line, edit.column, edit.end_line, edit.end_column) == (1, len(GOOD) + 1, 2, 3)


def test_a_50_mb_single_line_is_validated_quickly_in_bounded_memory() -> None:
    big = "x" * 50_000_000
    clean = json.dumps(
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": big}]}
    )
    bad = json.dumps({"messages": [{"role": "user", "content": big}, {"role": "Assistant", "content": "a"}]})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    assert list(check_line(clean, 1, "auto").findings) == []
    (finding,) = check_line(bad, 1, "auto").findings
    elapsed = time.perf_counter() - started
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert finding.code == "role-unknown"
    assert bad[finding.column - 1 : finding.end_column - 1] == '"Assistant"'
    assert elapsed < 60  # the feature: seconds, not minutes (bench/validate.py measures the speed)
    assert grown_mb < 600  # the lines themselves are 2 x 50 MB; a decoded copy each is expected


def test_a_50_mb_line_of_tiny_tokens_still_gets_a_precise_error() -> None:
    line = '{"messages": [' + "1," * 25_000_000 + "]}"
    started = time.perf_counter()
    (finding,) = check_line(line, 1, "auto").findings
    assert time.perf_counter() - started < 60  # MAX_SPAN_TOKENS: seconds, not minutes
    assert finding.code == "trailing-comma"
    assert finding.column == len(line) - 2


def test_binary_file_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(UnreadableFile, match="binary"):
        validate_path(path)


def test_utf16_file_is_unreadable_with_advice(tmp_path: Path) -> None:
    path = tmp_path / "utf16.jsonl"
    path.write_bytes((GOOD + "\n").encode("utf-16"))
    with pytest.raises(UnreadableFile, match="UTF-16.*save it as UTF-8"):
        validate_path(path)


def test_directory_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match="is a directory"):
        validate_path(tmp_path)


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match="no such file"):
        validate_path(tmp_path / "nope.jsonl")


def test_missing_eval_file_is_unreadable(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text(GOOD + "\n")
    with pytest.raises(UnreadableFile, match="eval.jsonl: no such file"):
        validate_path(train, tmp_path / "eval.jsonl")


def test_deeply_nested_json_line_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(GOOD + "\n" + "{" * 0 + "[" * 200_000 + "]" * 200_000 + "\n")
    assert found(validate_path(path)) == [(2, 1, "json-too-deep")]


def test_line_of_null_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "null.jsonl"
    path.write_text("null\n" + GOOD + "\n")
    report = validate_path(path)
    assert found(report) == [(1, 1, "not-object")]
    assert report.rows == 1 and not report.ok


def test_empty_file_is_clean_with_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    report = validate_path(path)
    assert (report.rows, report.findings, report.ok) == (0, [], True)


def test_path_with_eval_reports_both_files_and_leakage(tmp_path: Path) -> None:
    train, evals = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    train.write_text(GOOD + "\n" + OTHER + "\n")
    evals.write_text(
        json.dumps({"messages": [{"role": "user", "content": "3+3?"}], "expected": "6"})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "5+5?"}], "expected": "10", "match": "bogus"})
        + "\n"
    )
    report = validate_path(train, evals)
    assert found(report) == [(2, 1, "train-eval-leak")]
    assert report.eval_report is not None
    assert [(f.line, f.code) for f in report.eval_report.findings] == [
        (1, "train-eval-leak"),
        (2, "match-unknown"),
    ]
    assert str(evals) in report.findings[0].message


def test_duplicate_row_fix_counts_code_points_on_the_bytes_path() -> None:
    row = json.dumps(
        {"messages": [{"role": "user", "content": "日本"}, {"role": "assistant", "content": "🙂"}]},
        ensure_ascii=False,
    )
    report = validate_bytes((row + "\n" + row).encode())
    (finding,) = report.findings
    assert finding.end_column == len(row) + 1
    assert finding.fix is not None and finding.fix.edits[0].column == len(row) + 1
