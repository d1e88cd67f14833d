"""The validator's checks, fixes and positions, one behaviour per test."""

from __future__ import annotations

import json

import pytest

from machine_lsp.core import schema
from machine_lsp.core import validate as v
from machine_lsp.core.validate import Finding, TextEdit, check_line, dataset_findings, validate_text

USER = {"role": "user", "content": "What is 2+2?"}
ASSISTANT = {"role": "assistant", "content": "answer: 4"}


def row(*messages: dict, **extra: object) -> str:
    return json.dumps({"messages": list(messages), **extra}, ensure_ascii=False)


def codes(text: str, kind: v.Kind = "auto") -> list[str]:
    return [f.code for f in check_line(text, 1, kind).findings]


def only(text: str, kind: v.Kind = "auto") -> Finding:
    findings = check_line(text, 1, kind).findings
    assert len(findings) == 1, findings
    return findings[0]


def covered(text: str, finding: Finding) -> str:
    """The text a single-line finding points at."""
    assert finding.line == finding.end_line
    return text[finding.column - 1 : finding.end_column - 1]


def apply_edits(text: str, edits: list[TextEdit]) -> str:
    """Apply LSP-style edits (1-based, code-point columns) from last to first."""
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column - 1

    ordered = sorted(edits, key=lambda e: (e.line, e.column), reverse=True)
    for edit in ordered:
        start, end = offset(edit.line, edit.column), offset(edit.end_line, edit.end_column)
        text = text[:start] + edit.new_text + text[end:]
    return text


def assert_fix_cleans(text: str, code: str, kind: v.Kind = "auto") -> str:
    finding = next(f for f in check_line(text, 1, kind).findings if f.code == code)
    assert finding.fix is not None, finding
    fixed = apply_edits(text, finding.fix.edits)
    assert list(check_line(fixed, 1, kind).findings) == [], fixed
    return fixed


# ---------------------------------------------------------------------------------------------------------------
# Clean rows


def test_clean_training_row_has_no_findings_and_reports_its_prompt() -> None:
    result = check_line(row(USER, ASSISTANT), 1, "auto")
    assert list(result.findings) == []
    assert result.row_kind == "train"
    assert result.prompt_key == "What is 2+2?"
    assert result.fingerprint is not None


def test_clean_eval_row_is_detected_by_expected() -> None:
    result = check_line(row(USER, expected="answer: 4", match="exact", id="q1"), 1, "auto")
    assert list(result.findings) == []
    assert result.row_kind == "eval"


def test_unknown_top_level_keys_are_allowed() -> None:
    assert codes(row(USER, ASSISTANT, meta={"source": "x"}, id=7)) == []


def test_content_parts_and_tool_trace_are_clean() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}
    text = row(
        {"role": "user", "content": [{"type": "text", "text": "add 2 and 2"}]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "add"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "ok"}, {"type": "text", "text": "4"}],
        },
    )
    assert codes(text) == []


# ---------------------------------------------------------------------------------------------------------------
# JSON level


def test_not_json_points_at_the_bad_character() -> None:
    text = '{"messages": [' + json.dumps(USER) + " " + json.dumps(ASSISTANT) + "]}"
    finding = only(text)
    assert finding.code == "json-invalid"
    assert covered(text, finding) == "{"
    assert finding.column == text.index("} {") + 3


def test_unterminated_json_points_at_the_end() -> None:
    text = '{"messages": [{"role": "user", "content": "hi'
    finding = only(text)
    assert finding.code == "json-invalid"
    assert finding.end_column <= len(text) + 1


def test_columns_count_code_points_not_bytes() -> None:
    prefix = '{"messages": [{"role": "user", "content": "日本語 🙂"}, {"role": "Assistant", '
    text = prefix + '"content": "ok"}]}'
    finding = only(text)
    assert finding.code == "role-unknown"
    assert covered(text, finding) == '"Assistant"'
    assert finding.column == len(prefix) - len('"Assistant", ') + 1


def test_trailing_data_is_located_and_two_rows_can_be_split() -> None:
    text = row(USER, ASSISTANT) + "  " + row(USER, {"role": "assistant", "content": "4"})
    finding = only(text)
    assert finding.code == "json-trailing-data"
    assert finding.column == len(row(USER, ASSISTANT)) + 3
    assert finding.fix is not None
    fixed = apply_edits(text, finding.fix.edits)
    assert [list(check_line(line, 1, "auto").findings) for line in fixed.split("\n")] == [[], []]


def test_trailing_garbage_has_no_fix() -> None:
    text = row(USER, ASSISTANT) + " xyz"
    finding = only(text)
    assert finding.code == "json-trailing-data"
    assert covered(text, finding) == "xyz"
    assert finding.fix is None


def test_trailing_comma_after_row_is_fixed() -> None:
    text = row(USER, ASSISTANT) + ","
    assert covered(text, only(text)) == ","
    assert assert_fix_cleans(text, "trailing-comma") == row(USER, ASSISTANT)


def test_trailing_comma_inside_list_is_fixed() -> None:
    text = '{"messages": [' + json.dumps(USER) + ", " + json.dumps(ASSISTANT) + ",]}"
    finding = only(text)
    assert finding.code == "trailing-comma"
    assert covered(text, finding) == ","
    assert_fix_cleans(text, "trailing-comma")


def test_line_of_null_is_not_an_object() -> None:
    finding = only("null")
    assert (finding.code, finding.column, finding.end_column) == ("not-object", 1, 5)


@pytest.mark.parametrize("text", ['"text"', "42", "true", "[1, 2]", "[]"])
def test_other_non_objects(text: str) -> None:
    assert codes(text) == ["not-object"]


def test_bare_message_list_is_wrapped_by_its_fix() -> None:
    text = json.dumps([USER, ASSISTANT])
    assert codes(text) == ["bare-messages"]
    assert assert_fix_cleans(text, "bare-messages") == '{"messages": ' + text + "}"


def test_deeply_nested_json_is_a_finding_not_an_exception() -> None:
    text = "[" * 100_000 + "]" * 100_000
    finding = only(text)
    assert finding.code == "json-too-deep"
    assert finding.end_column == len(text) + 1


def test_deeply_nested_value_inside_a_valid_row_is_reported() -> None:
    text = '{"messages": [], "meta": ' + "[" * 5000 + "]" * 5000 + "}"
    assert codes(text) == ["json-too-deep"]


def test_blank_and_whitespace_lines_are_warnings_with_a_fix() -> None:
    for text in ("", "   ", "\t"):
        finding = only(text)
        assert (finding.code, finding.severity) == ("blank-line", "warning")
        assert finding.fix is not None
        assert finding.fix.edits == [TextEdit(1, 1, 2, 1, "")]


# ---------------------------------------------------------------------------------------------------------------
# messages, roles, content


def test_messages_missing() -> None:
    text = '{"conversations": []}'
    finding = only(text)
    assert finding.code == "messages-missing"
    assert "ShareGPT" in finding.message
    assert covered(text, finding) == text


def test_messages_not_a_list() -> None:
    text = '{"messages": "hello"}'
    assert covered(text, only(text)) == '"hello"'
    assert only(text).code == "messages-not-list"


def test_messages_empty() -> None:
    text = '{"messages": []}'
    assert (only(text).code, covered(text, only(text))) == ("messages-empty", "[]")


def test_message_not_an_object() -> None:
    text = '{"messages": ["hello", ' + json.dumps(ASSISTANT) + "]}"
    finding = only(text)
    assert (finding.code, covered(text, finding)) == ("message-not-object", '"hello"')


def test_role_missing() -> None:
    text = row({"content": "hi"}, ASSISTANT)
    finding = only(text)
    assert (finding.code, covered(text, finding)) == ("role-missing", '{"content": "hi"}')


@pytest.mark.parametrize(
    ("bad", "good"), [("Assistant", "assistant"), (" USER", "user"), ("gpt", "assistant")]
)
def test_role_case_and_synonyms_are_fixed(bad: str, good: str) -> None:
    role_of = "assistant" if good == "assistant" else "user"
    messages = (
        [USER, {"role": bad, "content": "4"}]
        if role_of == "assistant"
        else [{"role": bad, "content": "q"}, ASSISTANT]
    )
    text = row(*messages)
    finding = only(text)
    assert (finding.code, covered(text, finding)) == ("role-unknown", json.dumps(bad))
    assert_fix_cleans(text, "role-unknown")


def test_role_typo_on_a_tool_calling_message_gives_one_finding() -> None:
    call = {"id": "c1", "function": {"name": "f", "arguments": "{}"}}
    text = row(
        USER,
        {"role": "Assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "4", "tool_call_id": "c1"},
        ASSISTANT,
    )
    assert codes(text) == ["role-unknown"]
    assert_fix_cleans(text, "role-unknown")


def test_role_unknown_without_fix() -> None:
    text = row(USER, {"role": "narrator", "content": "x"}, ASSISTANT)
    finding = only(text)
    assert finding.code == "role-unknown" and finding.fix is None


def test_role_not_a_string() -> None:
    text = row(USER, {"role": 3, "content": "x"}, ASSISTANT)
    finding = only(text)
    assert (finding.code, covered(text, finding)) == ("role-unknown", "3")


def test_content_missing() -> None:
    assert codes(row(USER, {"role": "assistant"})) == ["content-missing"]


def test_content_empty_string() -> None:
    text = row(USER, {"role": "assistant", "content": ""})
    assert (only(text).code, covered(text, only(text))) == ("content-empty", '""')


def test_content_empty_parts() -> None:
    text = row({"role": "user", "content": [{"type": "text", "text": ""}]}, ASSISTANT)
    assert codes(text) == ["content-empty"]
    assert codes(row({"role": "user", "content": []}, ASSISTANT)) == ["content-empty"]


def test_content_wrong_type() -> None:
    text = row(USER, {"role": "assistant", "content": 42})
    assert (only(text).code, covered(text, only(text))) == ("content-type", "42")


def test_content_part_invalid() -> None:
    text = row({"role": "user", "content": [{"type": "audio", "url": "x"}]}, ASSISTANT)
    finding = only(text)
    assert (finding.code, covered(text, finding)) == (
        "content-part-invalid",
        '{"type": "audio", "url": "x"}',
    )


def test_null_content_with_tool_calls_is_valid() -> None:
    # OpenAI's documented fine-tuning rows: an assistant message that only calls tools has null content.
    call = {"id": "c1", "function": {"name": "f", "arguments": "{}"}}
    text = row(
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1"},
        ASSISTANT,
    )
    assert codes(text) == []


def test_null_content_without_tool_calls_is_fixed_to_empty_string() -> None:
    text = row(USER, {"role": "assistant", "content": None})
    finding = only(text)
    assert finding.code == "content-type" and finding.fix is not None
    assert covered(text, finding) == "null"


# ---------------------------------------------------------------------------------------------------------------
# Conversation shape


def test_no_assistant_turn() -> None:
    text = row(USER)
    finding = only(text)
    assert finding.code == "no-assistant"
    assert covered(text, finding) == json.dumps([USER])


def test_training_row_must_end_with_assistant() -> None:
    text = row(USER, ASSISTANT, {"role": "user", "content": "and 3+3?"})
    finding = only(text)
    assert finding.code == "last-not-assistant"
    assert covered(text, finding) == '{"role": "user", "content": "and 3+3?"}'


def test_tool_message_without_matching_call() -> None:
    text = row(USER, {"role": "tool", "content": "4", "tool_call_id": "c9"}, ASSISTANT)
    finding = only(text)
    assert (finding.code, covered(text, finding)) == ("tool-unmatched", '"c9"')


def test_escaped_keys_and_roles_are_checked_like_plain_ones() -> None:
    text = '{"messages": [{"role": "user", "content": "q"}, {"role": "\\u0074ool", "content": "4"}, ' + (
        '{"role": "assistant", "content": "a"}]}'
    )
    assert json.loads(text)["messages"][1]["role"] == "tool"
    assert codes(text) == ["tool-unmatched"]
    assert [f.code for f in validate_text(text + "\n").findings] == ["tool-unmatched"]
    parts = '{"messages": [{"role": "user", "content": [{"\\u0074ype": "text", "text": ""}]}, ' + (
        '{"role": "assistant", "content": "a"}]}'
    )
    assert codes(parts) == ["content-empty"]


def test_tool_message_without_any_call() -> None:
    assert codes(row(USER, {"role": "tool", "content": "4"}, ASSISTANT)) == ["tool-unmatched"]


def test_tool_call_id_defined_only_later_does_not_count() -> None:
    call = {"id": "c1", "function": {"name": "f", "arguments": "{}"}}
    text = row(
        USER,
        {"role": "tool", "content": "4", "tool_call_id": "c1"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        ASSISTANT,
    )
    assert codes(text) == ["tool-unmatched"]


def test_malformed_tool_call_and_non_json_arguments() -> None:
    bad = {"id": "c1", "function": {"name": "f"}}
    assert "tool-call-invalid" in codes(row(USER, {"role": "assistant", "content": "x", "tool_calls": [bad]}))
    loose = {"id": "c1", "function": {"name": "f", "arguments": "{oops"}}
    text = row(USER, {"role": "assistant", "content": "x", "tool_calls": [loose]})
    finding = only(text)
    assert (finding.code, finding.severity, covered(text, finding)) == (
        "tool-arguments-json",
        "warning",
        '"{oops"',
    )


def test_non_string_optional_fields() -> None:
    assert codes(row(USER, {"role": "assistant", "content": "x", "name": 5})) == ["field-type"]


# ---------------------------------------------------------------------------------------------------------------
# Eval rows


def test_eval_row_must_end_with_user() -> None:
    text = row(USER, ASSISTANT, expected="4")
    assert codes(text) == ["eval-last-not-user"]


def test_eval_kind_requires_expected() -> None:
    assert codes(row(USER), "eval") == ["expected-missing"]


def test_expected_wrong_type_and_empty() -> None:
    text = row(USER, expected=4)
    assert (only(text).code, covered(text, only(text))) == ("expected-type", "4")
    assert codes(row(USER, expected="")) == ["expected-empty"]


def test_match_unknown_with_case_fix() -> None:
    text = row(USER, expected="4", match="Contains")
    finding = only(text)
    assert (finding.code, covered(text, finding)) == ("match-unknown", '"Contains"')
    assert_fix_cleans(text, "match-unknown")
    assert only(row(USER, expected="4", match="fuzzy")).fix is None


def test_uncompilable_regex() -> None:
    text = row(USER, expected="answer: (\\d+", match="regex")
    finding = only(text)
    assert finding.code == "regex-invalid"
    assert covered(text, finding) == json.dumps("answer: (\\d+")
    assert codes(row(USER, expected="answer: (\\d+)", match="regex")) == []


def test_eval_id_must_be_a_string() -> None:
    assert codes(row(USER, expected="4", id=3)) == ["field-type"]


def test_forced_train_kind_ignores_eval_keys() -> None:
    assert codes(row(USER, ASSISTANT, expected=4, match="nope"), "train") == []


# ---------------------------------------------------------------------------------------------------------------
# Dataset level


def test_exact_duplicate_rows_and_their_fix() -> None:
    a, b = (
        row(USER, ASSISTANT),
        row({"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"}),
    )
    text = "\n".join([a, b, a]) + "\n"
    report = validate_text(text)
    assert [(f.line, f.code) for f in report.findings] == [(3, "duplicate-row")]
    assert report.ok  # duplicates are a warning
    fix = report.findings[0].fix
    assert fix is not None
    fixed = apply_edits(text, fix.edits)
    assert fixed == a + "\n" + b + "\n"
    assert validate_text(fixed).findings == []


def test_duplicate_of_last_line_without_newline() -> None:
    a = row(USER, ASSISTANT)
    text = a + "\n" + a
    finding = validate_text(text).findings[0]
    assert finding.fix is not None
    assert apply_edits(text, finding.fix.edits) == a


def test_train_eval_leak_is_flagged_in_both_files() -> None:
    train = (
        row(USER, ASSISTANT)
        + "\n"
        + row({"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"})
    )
    evals = row({"role": "user", "content": "  What is 2+2?\n"}, expected="answer: 4") + "\n"
    train_report = validate_text(train, "train", other=evals)
    assert [(f.line, f.code) for f in train_report.findings] == [(1, "train-eval-leak")]
    eval_report = validate_text(evals, "eval", other=train)
    assert [(f.line, f.code, f.severity) for f in eval_report.findings] == [(1, "train-eval-leak", "error")]


def test_dataset_findings_skip_unchecked_lines() -> None:
    a = check_line(row(USER, ASSISTANT), 1, "auto")
    assert dataset_findings([a, None, a.at_line(3)], None)[0].line == 3


def test_check_line_reports_a_bom_on_line_one() -> None:
    result = check_line("\ufeff" + row(USER, {"role": "Assistant", "content": "4"}), 1, "auto")
    assert [f.code for f in result.findings] == ["role-unknown", "bom"]
    text = "\ufeff" + row(USER, {"role": "Assistant", "content": "4"})
    assert covered(text, result.findings[0]) == '"Assistant"'


def test_at_line_moves_findings_and_fix_edits() -> None:
    result = check_line(row(USER, {"role": "Assistant", "content": "4"}), 1, "auto")
    moved = result.at_line(7)
    assert moved.findings[0].line == 7
    assert moved.findings[0].fix is not None and moved.findings[0].fix.edits[0].line == 7
    assert result.findings[0].line == 1


# ---------------------------------------------------------------------------------------------------------------
# Whole texts


def test_report_counts_rows_and_errors() -> None:
    text = "\n".join([row(USER, ASSISTANT), "null", row(USER, expected="4"), ""]) + "\n"
    report = validate_text(text)
    assert report.rows == 2
    assert not report.ok
    assert report.stats["train_rows"] == 1 and report.stats["eval_rows"] == 1
    assert report.stats["errors"] == 1 and report.stats["warnings"] == 1
    assert [f.line for f in report.findings] == [2, 4]


def test_crlf_text_is_clean_and_positions_ignore_the_cr() -> None:
    text = row(USER, ASSISTANT) + "\r\n" + row(USER, {"role": "Assistant", "content": "4"}) + "\r\n"
    report = validate_text(text)
    assert [(f.line, f.code) for f in report.findings] == [(2, "role-unknown")]
    line2 = text.split("\r\n")[1]
    assert covered(line2, report.findings[0]) == '"Assistant"'


def test_lone_carriage_return_counts_as_a_line_break_like_editors_do() -> None:
    text = row(USER, ASSISTANT) + "\r" + "null"
    assert [(f.line, f.code) for f in validate_text(text).findings] == [(2, "not-object")]


def test_progress_is_reported() -> None:
    seen: list[tuple[int, int]] = []
    validate_text(row(USER, ASSISTANT) + "\n", progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (1, 1)


# ---------------------------------------------------------------------------------------------------------------
# Fast path and schema stay in step


def test_fast_path_structs_mirror_the_schema() -> None:
    def fields(struct: type) -> set[str]:
        return set(struct.__struct_fields__)

    assert fields(v._Message) - {"function_call"} == fields(
        schema.Message
    )  # function_call: only to reject it
    assert fields(v._ToolCall) == fields(schema.ToolCall)
    assert fields(v._Function) == fields(schema.ToolFunction)
    assert fields(v._RowOf) - {"tools", "functions"} == fields(schema.EvalRow)  # row keys of other trainers
    assert fields(v._Text) == fields(schema.TextPart)
    assert fields(v._Thinking) == fields(schema.ThinkingPart)


def test_rows_the_fast_path_accepts_decode_with_the_schema() -> None:
    text = row(USER, ASSISTANT, meta=1)
    assert v._fast_check(text, "auto") is not None
    schema.decode_training_row(text)
    eval_text = row(USER, expected="4", match="regex")
    assert v._fast_check(eval_text, "auto") is not None
    schema.decode_eval_row(eval_text)


def test_slow_path_alone_agrees_on_clean_rows() -> None:
    call = {"id": "c1", "function": {"name": "f", "arguments": "{}"}}
    for text in (
        row(USER, ASSISTANT),
        row(USER, expected="4"),
        row(
            USER,
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "1", "tool_call_id": "c1"},
            ASSISTANT,
        ),
    ):
        assert v._slow_check(text, 1, "auto").findings == []


def test_a_message_between_tool_calls_and_their_results_is_an_error() -> None:
    """Chat Completions refuses a row whose call is not followed directly by its results (Codex logs can put a
    developer message there); one whose result never came has nothing between, and a later result is fine."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    calling = {"role": "assistant", "content": "", "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    note = {"role": "system", "content": "approved"}
    apart = row(USER, calling, note, result, ASSISTANT)
    assert codes(apart) == ["tool-results-apart"]
    assert [f.code for f in validate_text(apart + "\n").findings] == ["tool-results-apart"]
    assert codes(row(USER, calling, result, note, ASSISTANT)) == []
    assert codes(row(USER, calling, note, ASSISTANT)) == []  # never answered: nothing is between
