"""Chat JSONL as real trainers accept it: OpenAI's and tinker-cookbook's published rows validate clean and render
through the cookbook renderer for SmolLM2; tools, developer, weight/trainable, legacy rows, image parts, double
encoded arguments and whole files in other formats get what issue 11 asks for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from machine_lsp.core.schema import decode_training_row, encode_training_row, read_training_rows
from machine_lsp.core.validate import check_line, diagnose_lines, validate_bytes, validate_path, validate_text
from machine_lsp.core.validate.findings import TextEdit

FIXTURES = Path(__file__).parent.parent / "fixtures" / "trainer_rows"
FILES = sorted(FIXTURES.glob("*.jsonl"))
USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "hello"}


def row(*messages: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"messages": list(messages), **extra})


def codes(text: str) -> list[str]:
    return [f.code for f in check_line(text, 1, "train").findings]


def apply(text: str, edits: list[TextEdit]) -> str:
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    for edit in sorted(edits, key=lambda e: (e.line, e.column), reverse=True):
        start = offsets[edit.line - 1] + edit.column - 1
        end = offsets[edit.end_line - 1] + edit.end_column - 1
        text = text[:start] + edit.new_text + text[end:]
    return text


def test_fixtures_exist() -> None:
    assert len(FILES) >= 6


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_published_rows_validate_clean(path: Path) -> None:
    report = validate_path(path)
    assert [f for f in report.findings if f.severity == "error"] == []
    assert report.findings == []
    assert report.rows == len([line for line in path.read_text().splitlines() if line.strip()])
    # The line-at-a-time path (the language server's) agrees with the file pass.
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        assert list(check_line(line, line_no, "train").findings) == [], (path.name, line_no)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_published_rows_round_trip_with_top_level_keys(path: Path) -> None:
    for _, training_row in read_training_rows(path):
        again = decode_training_row(encode_training_row(training_row))
        assert again == training_row
    tools_rows = [r for _, r in read_training_rows(FIXTURES / "openai_tools.jsonl")]
    assert all("tools" in r.extra for r in tools_rows)
    assert tools_rows[1].extra["parallel_tool_calls"] is True


# -- item 1: tool calls without content ---------------------------------------------------------------------------

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}


def test_assistant_tool_call_may_omit_content_or_set_null() -> None:
    assert codes(row(USER, {"role": "assistant", "tool_calls": [CALL]})) == []
    assert codes(row(USER, {"role": "assistant", "content": None, "tool_calls": [CALL]})) == []


def test_missing_content_without_tool_calls_is_still_an_error() -> None:
    assert codes(row(USER, {"role": "assistant"})) == ["content-missing"]
    assert codes(row({"role": "user", "content": None, "tool_calls": [CALL]}, ASSISTANT)) != []


# -- item 2: developer ---------------------------------------------------------------------------------------------


def test_developer_role_is_accepted() -> None:
    assert codes(row({"role": "developer", "content": "be brief"}, USER, ASSISTANT)) == []
    finding = check_line(row({"role": "wizard", "content": "x"}, USER, ASSISTANT), 1).findings[0]
    assert "developer" in finding.message


# -- item 3: weight / trainable ------------------------------------------------------------------------------------


def test_weight_zero_and_one_are_valid() -> None:
    assert codes(row(USER, {**ASSISTANT, "weight": 0}, USER, {**ASSISTANT, "weight": 1})) == []


@pytest.mark.parametrize("weight", [2, -1, 0.5, "1", [1]])
def test_invalid_weight_is_an_error(weight: Any) -> None:
    assert codes(row(USER, {**ASSISTANT, "weight": weight})) == ["weight-invalid"]


def test_boolean_weight_gets_a_fix() -> None:
    text = row(USER, {**ASSISTANT, "weight": True})
    finding = check_line(text, 1).findings[0]
    assert finding.code == "weight-invalid" and finding.fix is not None
    assert codes(apply(text, finding.fix.edits)) == []


def test_weight_on_a_user_message_is_a_warning() -> None:
    findings = check_line(row({**USER, "weight": 1}, ASSISTANT), 1).findings
    assert [(f.code, f.severity) for f in findings] == [("weight-not-assistant", "warning")]


def test_trainable_must_be_boolean() -> None:
    assert codes(row(USER, {**ASSISTANT, "trainable": True})) == []
    assert codes(row(USER, {**ASSISTANT, "trainable": "yes"})) == ["field-type"]


# -- item 4: double-encoded arguments, legacy rows, images ----------------------------------------------------------


def test_double_encoded_arguments_get_a_warning_and_a_fix() -> None:
    arguments = json.dumps(json.dumps({"x": 1}))  # a JSON string whose text is the object's JSON
    call = {**CALL, "function": {"name": "f", "arguments": arguments}}
    text = row(USER, {"role": "assistant", "tool_calls": [call]})
    findings = check_line(text, 1).findings
    assert [(f.code, f.severity) for f in findings] == [("tool-arguments-double-encoded", "warning")]
    fixed = apply(text, findings[0].fix.edits)
    assert codes(fixed) == []
    assert json.loads(json.loads(fixed)["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"x": 1}


def test_a_plain_string_argument_is_not_double_encoded() -> None:
    call = {**CALL, "function": {"name": "f", "arguments": json.dumps("just text")}}
    assert codes(row(USER, {"role": "assistant", "tool_calls": [call]})) == []


def test_legacy_function_call_and_function_role_say_what_to_use() -> None:
    legacy = row(
        USER,
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": "ok"},
        ASSISTANT,
        functions=[{"name": "f", "parameters": {}}],
    )
    findings = check_line(legacy, 1).findings
    by_code = {f.code: f.message for f in findings}
    assert "function-call-legacy" in by_code and "tool_calls" in by_code["function-call-legacy"]
    assert "function-role-legacy" in by_code and 'role "tool"' in by_code["function-role-legacy"]
    # the legacy key on an assistant message with text must not slip through the fast path
    assert "function-call-legacy" in codes(
        row(USER, {**ASSISTANT, "function_call": {"name": "f", "arguments": "{}"}})
    )


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
        {"type": "image", "image": "https://example.com/a.png"},
    ],
)
def test_image_parts_are_unsupported_with_a_clear_message(part: dict[str, Any]) -> None:
    text = row({"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}, ASSISTANT)
    findings = check_line(text, 1).findings
    assert [f.code for f in findings] == ["image-unsupported"]
    assert part["type"] in findings[0].message and "text-only" in findings[0].message


# -- item 5: whole files in other formats ----------------------------------------------------------------------------

ROWS = [json.loads(row(USER, ASSISTANT)), json.loads(row({"role": "user", "content": "2+2?"}, ASSISTANT))]


def _file_cases() -> list[tuple[str, str]]:
    sharegpt = "\n".join(
        json.dumps(
            {"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}]}
        )
        for i in range(500)
    )
    prompt_completion = "\n".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) for i in range(500))
    chat_pc = json.dumps({"prompt": [USER], "completion": [ASSISTANT]}) + "\n"
    return [
        ("array-of-rows", json.dumps(ROWS * 200, indent=2) + "\n"),
        ("array-of-messages", json.dumps([USER, ASSISTANT], indent=2)),
        ("sharegpt", sharegpt + "\n"),
        ("prompt-completion", prompt_completion),
        ("chat-prompt-completion", chat_pc),
    ]


@pytest.mark.parametrize(("name", "text"), _file_cases(), ids=[name for name, _ in _file_cases()])
def test_other_formats_get_one_file_finding_whose_fix_converts(name: str, text: str) -> None:
    report = validate_text(text)
    assert [(f.code, f.line) for f in report.findings] == [("file-format", 1)], name
    fix = report.findings[0].fix
    assert fix is not None
    converted = apply(text, fix.edits)
    again = validate_text(converted)
    assert again.ok and again.findings == [] or {f.code for f in again.findings} == {"duplicate-row"}
    assert again.rows >= 1
    # the bytes path (the CLI's) says the same
    assert [f.code for f in validate_bytes(text.encode()).findings] == ["file-format"]


def test_sharegpt_with_an_unknown_speaker_gets_the_finding_without_a_fix() -> None:
    text = json.dumps({"conversations": [{"from": "narrator", "value": "x"}, {"from": "gpt", "value": "y"}]})
    finding = diagnose_lines([text, text])
    assert finding is not None and finding.fix is None and "cannot be converted" in finding.message


def test_chat_jsonl_is_not_diagnosed_and_one_line_message_list_keeps_its_line_fix() -> None:
    assert diagnose_lines([row(USER, ASSISTANT)]) is None
    assert diagnose_lines([json.dumps({"messages": [USER, ASSISTANT], "prompt": "x"})]) is None
    single = json.dumps([USER, ASSISTANT])
    assert diagnose_lines([single]) is None
    assert [f.code for f in validate_text(single).findings] == ["bare-messages"]


def test_cli_json_shows_the_file_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from machine_lsp.cli.main import main

    path = tmp_path / "data.json"
    path.write_text(json.dumps(ROWS, indent=2))
    code = main(["train", "validate", str(path), "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 1
    findings = payload["findings"]
    assert [f["code"] for f in findings] == ["file-format"]
    assert findings[0]["fix"]["edits"][0]["new_text"].count("\n") == 1


# -- tools and other top-level keys survive tagging and export ------------------------------------------------------


def test_tools_survive_tagging_and_export() -> None:
    from machine_lsp.core.export import export_sft
    from machine_lsp.core.tagging import build_record
    from machine_lsp.core.transcripts.chat_jsonl import ChatJsonlAdapter

    path = FIXTURES / "openai_tools.jsonl"
    lines = path.read_text().splitlines()
    text = "\n".join([*lines, row(USER, ASSISTANT, meta={"source": "x"}, expected=None)]) + "\n"
    turns = ChatJsonlAdapter().turns(text, path.as_uri(), trace=True)
    records = [build_record(turn, "good", trace=True) for turn in turns]
    exported = export_sft(records)
    assert len(exported) == 4
    for line, training_row in zip(lines, exported[:3], strict=True):
        source = json.loads(line)
        assert training_row.extra == {k: v for k, v in source.items() if k != "messages"}
    assert exported[3].extra == {"meta": {"source": "x"}}  # eval keys are not carried into a training row
    # the exported rows validate clean again, tools and all
    out = "\n".join(encode_training_row(r).decode() for r in exported)
    assert validate_text(out).findings == []


def test_tools_are_dropped_with_the_tool_calls_when_tagged_without_trace() -> None:
    from machine_lsp.core.transcripts.chat_jsonl import ChatJsonlAdapter

    line = (FIXTURES / "openai_tools.jsonl").read_text().splitlines()[2]
    (turn,) = ChatJsonlAdapter().turns(line, "file:///t.jsonl")
    assert not any(m.tool_calls for m in turn.messages)
    assert turn.extra == {}


def test_top_level_functions_is_legacy() -> None:
    text = row(USER, ASSISTANT, functions=[{"name": "f", "parameters": {}}])
    findings = check_line(text, 1).findings
    assert [f.code for f in findings] == ["functions-legacy"]
    assert '"tools"' in findings[0].message


@pytest.mark.parametrize(
    "tools",
    [
        {"type": "function"},
        [{"name": "f", "parameters": {}}],  # a bare function, not wrapped
        [{"type": "function", "function": {"description": "no name"}}],
        [{"type": "function", "function": {"name": "f", "parameters": "{}"}}],
    ],
)
def test_malformed_tools_are_errors(tools: Any) -> None:
    assert codes(row(USER, ASSISTANT, tools=tools)) == ["tools-invalid"]


def test_a_bare_message_list_on_line_1_of_a_jsonl_file_is_a_line_finding() -> None:
    text = json.dumps([USER, ASSISTANT]) + "\n" + row(USER, ASSISTANT) + "\n"
    assert diagnose_lines(text.splitlines()) is None
    assert [f.code for f in validate_text(text).findings] == ["bare-messages"]


def test_an_array_of_rows_on_one_line_is_a_file_finding() -> None:
    text = json.dumps(ROWS)
    finding = diagnose_lines([text])
    assert finding is not None and finding.code == "file-format" and finding.fix is not None


TRUE_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd": "true"}'}}
    ],
}


def test_an_empty_tool_result_is_accepted_as_trainers_accept_it() -> None:
    """A command that printed nothing: OpenAI's format and the cookbook take `"content": ""` on a tool message."""
    silent = row(USER, TRUE_CALL, {"role": "tool", "tool_call_id": "c1", "content": ""}, ASSISTANT)
    assert codes(silent) == []
    report = validate_text(silent + "\n" + silent.replace("hello", "bye") + "\n")
    assert report.ok and not [f for f in report.findings if f.severity == "error"]
    # Null is still not content, and other roles still need text.
    assert codes(
        row(USER, TRUE_CALL, {"role": "tool", "tool_call_id": "c1", "content": None}, ASSISTANT)
    ) == ["content-type"]
    assert codes(row({"role": "user", "content": ""}, ASSISTANT)) == ["content-empty"]


def test_a_trained_answer_with_no_user_message_before_it_is_an_error_at_that_message() -> None:
    system = {"role": "system", "content": "Be brief."}
    unprompted = row(system, ASSISTANT)
    [finding] = check_line(unprompted, 3, "train").findings
    assert finding.code == "no-user-turn" and finding.severity == "error"
    assert (finding.line, finding.column) == (3, unprompted.index('{"role": "assistant"') + 1)
    assert "no user message before the trained assistant message 2" in finding.message
    # The file pass (its batched plain-row shortcut) finds it too, on the right line.
    report = validate_text(row(USER, ASSISTANT) + "\n" + unprompted + "\n")
    assert [(f.line, f.code) for f in report.findings] == [(2, "no-user-turn")]
    # With tools (the lenient fast path) and when only a later answer is trained, as the trainer reads weights.
    assert codes(
        row(system, TRUE_CALL, {"role": "tool", "tool_call_id": "c1", "content": "x"}, ASSISTANT)
    ) == ["no-user-turn"]
    assert codes(row({**ASSISTANT, "weight": 0}, USER, {**ASSISTANT, "weight": 1})) == []
    assert codes(row(USER, {**ASSISTANT, "weight": 1})) == []
