"""Row schemas: strict decoding, unknown keys kept on round trip, cookbook-shaped messages."""

from __future__ import annotations

import msgspec
import pytest

from machine_lsp.core.schema import (
    EvalRow,
    Message,
    Source,
    TagRecord,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolFunction,
    decode_eval_row,
    decode_tag_record,
    decode_training_row,
    encode,
    encode_training_row,
    text_of,
    to_cookbook_messages,
)


def test_training_row_round_trip_keeps_unknown_top_level_keys() -> None:
    line = (
        b'{"id":"row-7","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}],'
        b'"meta":{"split":"train","weights":[1,2]},"score":0.5}'
    )
    row = decode_training_row(line)
    assert row.extra == {"id": "row-7", "meta": {"split": "train", "weights": [1, 2]}, "score": 0.5}
    again = decode_training_row(encode_training_row(row))
    assert again == row
    assert msgspec.json.decode(encode(row)) == msgspec.json.decode(line)


def test_training_row_rejects_bad_role_with_a_path() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.messages\[1\]\.role"):
        decode_training_row(
            b'{"messages":[{"role":"user","content":"a"},{"role":"Assistant","content":"b"}]}'
        )
    with pytest.raises(msgspec.ValidationError, match="messages"):
        decode_training_row(b'{"prompt":"x"}')
    with pytest.raises(msgspec.ValidationError, match="object"):
        decode_training_row(b"null")


def test_content_parts_and_tool_calls_decode() -> None:
    row = decode_training_row(
        b'{"messages":[{"role":"user","content":"ls?"},'
        b'{"role":"assistant","content":[{"type":"thinking","thinking":"run ls"},{"type":"text","text":"Running."}],'
        b'"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\\"cmd\\": \\"ls\\"}"}}]},'
        b'{"role":"tool","tool_call_id":"c1","name":"bash","content":"a.py"}]}'
    )
    assistant = row.messages[1]
    assert assistant.content == [ThinkingPart("run ls"), TextPart("Running.")]
    assert assistant.tool_calls == [ToolCall(id="c1", function=ToolFunction("bash", '{"cmd": "ls"}'))]
    assert text_of(assistant) == "Running."
    assert row.messages[2].tool_call_id == "c1"


def test_unknown_content_part_type_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_training_row(b'{"messages":[{"role":"user","content":[{"type":"image","image":"x"}]}]}')


def test_to_cookbook_messages_gives_plain_dicts_with_optional_fields_only_when_present() -> None:
    messages = [
        Message(role="user", content="2+2?"),
        Message(
            role="assistant",
            content=[ThinkingPart("add"), TextPart("4")],
            tool_calls=[ToolCall(id="t1", function=ToolFunction("calc", '{"x": 2}'))],
        ),
        Message(role="tool", content="4", tool_call_id="t1", name="calc"),
    ]
    out = to_cookbook_messages(messages)
    assert out == [
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "add"}, {"type": "text", "text": "4"}],
            "tool_calls": [
                {"type": "function", "id": "t1", "function": {"name": "calc", "arguments": '{"x": 2}'}}
            ],
        },
        {"role": "tool", "content": "4", "tool_call_id": "t1", "name": "calc"},
    ]
    # Plain builtins only: JSON-serialisable as is.
    assert msgspec.json.decode(msgspec.json.encode(out)) == out


def test_eval_row_defaults_and_match_validation() -> None:
    row = decode_eval_row(b'{"messages":[{"role":"user","content":"9-4?"}],"expected":"answer: 5"}')
    assert row == EvalRow(messages=[Message(role="user", content="9-4?")], expected="answer: 5")
    assert row.match == "exact"
    with pytest.raises(msgspec.ValidationError, match="match"):
        decode_eval_row(b'{"messages":[],"expected":"x","match":"fuzzy"}')


def test_tag_record_round_trip_omits_defaults() -> None:
    record = TagRecord(
        id="abc",
        verdict="good",
        messages=[Message(role="user", content="q"), Message(role="assistant", content="a")],
        source=Source(kind="chat_jsonl", uri="file:///tmp/x.jsonl", line=3, end_line=3),
        created_at="2026-11-30T10:00:00.000Z",
        tool_version="0.1.0",
    )
    data = encode(record)
    assert b"original" not in data and b"trace" not in data and b"tool_calls" not in data
    assert decode_tag_record(data) == record


def test_read_training_rows_numbers_lines_and_names_the_bad_one(tmp_path) -> None:
    from machine_lsp.core.schema import RowFileError, read_training_rows

    good = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "tag": 1}'
    path = tmp_path / "rows.jsonl"
    path.write_text("\ufeff" + good + "\n\n" + good + "\n")
    rows = read_training_rows(path)
    assert [line for line, _ in rows] == [1, 3]
    assert rows[0][1].extra == {"tag": 1}
    path.write_text(good + "\n{oops\n")
    with pytest.raises(RowFileError, match=r"rows\.jsonl:2: not a chat row"):
        read_training_rows(path)
    path.write_text("\n")
    with pytest.raises(RowFileError, match="no rows"):
        read_training_rows(path)
    with pytest.raises(RowFileError, match="no such file"):
        read_training_rows(tmp_path / "missing.jsonl")
