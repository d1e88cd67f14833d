"""Transcript adapters: chat JSONL and Pi session logs (v3 tree with a branch, tool calls, thinking, failures)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from machine_lsp.core.schema import Message, TextPart, ThinkingPart, text_of
from machine_lsp.core.transcripts import TranscriptError, load_turns, turn_at

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PI_SESSION = FIXTURES / "pi_session_v3.jsonl"
CHAT = FIXTURES / "chat.jsonl"


def roles(messages: list[Message]) -> list[str]:
    return [message.role for message in messages]


# -- chat JSONL ---------------------------------------------------------------------------------------------


def test_chat_jsonl_each_row_with_an_assistant_is_a_turn() -> None:
    turns = load_turns(CHAT)
    assert turns.adapter == "chat_jsonl"
    assert turns.problems == []
    # Line 3 is blank and line 5 is an eval row without an answer: neither is a turn.
    assert [turn.line for turn in turns] == [1, 2, 4, 6]
    first = turns[0]
    assert first.source.kind == "chat_jsonl" and first.source.uri == CHAT.absolute().as_uri()
    assert (first.source.line, first.end_line) == (1, 1)
    assert text_of(first.messages[first.answer_index]) == "answer: 56"


def test_chat_jsonl_answer_is_the_last_assistant_message() -> None:
    turn = turn_at(load_turns(CHAT), 4)
    assert roles(turn.messages) == ["user", "assistant", "user", "assistant"]
    assert turn.answer_index == 3
    assert turn.messages[3].content == [ThinkingPart("Rome is the capital."), TextPart("Rome.")]


def test_chat_jsonl_plain_tag_strips_tool_calls_and_trace_keeps_them() -> None:
    plain = turn_at(load_turns(CHAT), 6)
    assert roles(plain.messages) == ["user", "assistant"]
    assert plain.messages[-1].content == "There are 14 files in src/."
    traced = turn_at(load_turns(CHAT, trace=True), 6)
    assert roles(traced.messages) == ["user", "assistant", "tool", "assistant"]
    assert traced.messages[1].tool_calls is not None
    assert traced.messages[2].tool_call_id == "call_1"


def test_turn_at_without_a_line_is_the_last_turn() -> None:
    assert turn_at(load_turns(CHAT), None).line == 6


def test_turn_at_a_line_without_an_answer_says_so() -> None:
    turns = load_turns(CHAT)
    with pytest.raises(TranscriptError, match=r"chat\.jsonl:5: no assistant turn at this line"):
        turn_at(turns, 5)
    with pytest.raises(TranscriptError, match=r":40: line 40 is past the end of the file \(6 lines\)"):
        turn_at(turns, 40)
    with pytest.raises(TranscriptError, match="not a line number"):
        turn_at(turns, 0)


def test_bad_json_is_reported_at_file_line_column_and_other_lines_stay_usable(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(
        '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}\n'
        '{"messages":[{"role":"user","content":"é"}, oops]}\n'
        '{"messages":[{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}\n',
        encoding="utf-8",
    )
    turns = load_turns(path)
    assert [turn.line for turn in turns] == [1, 3]
    with pytest.raises(TranscriptError) as error:
        turn_at(turns, 2)
    # Column counts code points: the "é" before the error is one column, not two bytes.
    assert (error.value.line, error.value.column) == (2, 45)  # byte offset would say 46
    assert str(error.value).startswith(f"{path}:2:45: not valid JSON")
    assert turn_at(turns, 3).messages[-1].content == "d"


def test_a_broken_last_line_is_what_an_unnumbered_tag_reports(tmp_path: Path) -> None:
    path = tmp_path / "tail.jsonl"
    path.write_text(
        '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}\n{"messages":[\n'
    )
    with pytest.raises(TranscriptError, match=r"tail\.jsonl:2:\d+: not valid JSON"):
        turn_at(load_turns(path), None)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"null\n", "expected a JSON object"),
        (b'{"prompt": "x"}\n', "looks like prompt/completion rows.*supported: chat JSONL"),
        (b'{"messages":[{"role":"robot","content":"x"},{"role":"assistant","content":"y"}]}\n', "role"),
        (b"[" * 5000 + b"\n", "nested too deeply|not valid JSON"),
    ],
)
def test_rows_of_the_wrong_shape_are_precise_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "shape.jsonl"
    path.write_bytes(content)
    with pytest.raises(TranscriptError, match=message) as error:
        turn_at(load_turns(path), 1)
    assert error.value.line == 1


def test_unreadable_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="no such file"):
        load_turns(tmp_path / "missing.jsonl")
    with pytest.raises(TranscriptError, match="is a directory"):
        load_turns(tmp_path)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(TranscriptError, match="binary"):
        load_turns(binary)
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"messages":[]}\n{"messages":"caf\xe9"}\n')
    with pytest.raises(TranscriptError) as error:
        load_turns(latin1)
    assert (error.value.line, error.value.column) == (2, 17)
    assert "not valid UTF-8" in str(error.value)


def test_bom_and_crlf_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "windows.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}\r\n'
        b'{"messages":[{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}\r\n'
    )
    turns = load_turns(path)
    assert [turn.line for turn in turns] == [1, 2] and turns.problems == []


def test_text_input_with_an_editor_uri() -> None:
    text = '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}\n'
    turns = load_turns(text, "untitled:Untitled-1")
    assert turns[0].source.uri == "untitled:Untitled-1"


# -- Pi session logs ----------------------------------------------------------------------------------------


def test_pi_plain_turns_are_final_replies_of_each_exchange() -> None:
    turns = load_turns(PI_SESSION)
    assert turns.adapter == "pi" and turns.problems == []
    # Assistant entries at 7, 13, 15 (aborted), 19 (branch), 21 (error); 5, 9, 11 only called tools.
    assert [turn.end_line for turn in turns] == [7, 13, 15, 19, 21]
    assert [(turn.line, turn.end_line) for turn in turns][:2] == [(2, 7), (8, 13)]


def test_pi_plain_conversation_is_text_turns_on_the_path() -> None:
    turn = turn_at(load_turns(PI_SESSION), 13)
    assert roles(turn.messages) == ["user", "assistant", "user", "assistant"]
    assert all(not message.tool_calls for message in turn.messages)
    assert turn.messages[1].content.startswith("`text.split")  # the first exchange's final reply, no thinking
    assert turn.messages[2].content == "Please apply the fix and run the tests."
    assert turn.messages[3].content.startswith("Fixed: `parse_amount`")
    source = turn.source
    assert (source.kind, source.harness, source.entry_id) == ("session_log", "pi", "b2f4000a")
    assert source.session_id == "8f2c1a9e-4b7d-4e1a-9c3f-2d6b5e8a1f00"
    assert (source.model, source.provider) == ("claude-sonnet-4-5", "anthropic")
    assert turn.tags_blocked is None


def test_pi_a_line_inside_an_exchange_selects_its_final_reply() -> None:
    turns = load_turns(PI_SESSION)
    for line in (8, 9, 10, 11, 12, 13):  # the prompt, the tool steps and results
        assert turn_at(turns, line).end_line == 13
    assert turn_at(turns, 4).end_line == 7
    with pytest.raises(TranscriptError, match="no assistant turn"):
        turn_at(turns, 1)  # the session header


def test_pi_branch_follows_its_own_path_and_model() -> None:
    turn = turn_at(load_turns(PI_SESSION), 18)
    assert turn.end_line == 19
    assert [text_of(message)[:20] for message in turn.messages] == [
        "Why does `parse_amou",
        '`text.split(",")[0]`',
        "Explain the bug with",
        '`split(",")` breaks ',
    ]  # nothing from the other branch (the edit, the tests, the screenshot)
    assert (turn.source.model, turn.source.provider, turn.source.entry_id) == (
        "gpt-5.1",
        "openai",
        "c3a70003",
    )


def test_pi_aborted_and_error_turns_are_blocked_with_the_reason() -> None:
    turns = load_turns(PI_SESSION)
    aborted = turn_at(turns, 15)
    assert aborted.tags_blocked is not None and "aborted" in aborted.tags_blocked
    error = turn_at(turns, 21)
    assert error.tags_blocked is not None
    assert "stopReason is error" in error.tags_blocked and "429" in error.tags_blocked


def test_pi_images_are_dropped_with_a_warning() -> None:
    turn = turn_at(load_turns(PI_SESSION), 15)
    assert turn.messages[-2].content == "What does the error in this screenshot mean?"
    assert turn.warnings == [
        "line 14: an image (image/png) in a user message was dropped: rows carry text only"
    ]


def test_pi_trace_keeps_tool_calls_and_results_as_one_conversation() -> None:
    turns = load_turns(PI_SESSION, trace=True)
    assert [turn.end_line for turn in turns] == [5, 7, 9, 11, 13, 15, 19, 21]
    turn = turn_at(turns, 13)
    assert turn.line == 12
    assert roles(turn.messages) == [
        "user", "assistant", "tool", "assistant",  # read the file, explain
        "user", "assistant", "tool", "assistant", "tool", "assistant",  # edit, run tests, report
    ]  # fmt: skip
    read_call = turn.messages[1]
    assert read_call.content == "Let me look at the parser."
    assert read_call.tool_calls is not None and len(read_call.tool_calls) == 1
    call = read_call.tool_calls[0]
    assert (call.id, call.function.name) == ("toolu_01KXq7", "read")
    assert msgspec.json.decode(call.function.arguments) == {"path": "invoice/parse.py"}
    result = turn.messages[2]
    assert (result.tool_call_id, result.name) == ("toolu_01KXq7", "read")
    assert "def parse_amount" in result.content
    assert turn.messages[8].content == "....\n4 passed in 0.21s\n"
    # A trace turn may end on a tool call: the agent's next action.
    step = turn_at(turns, 9)
    assert step.messages[-1].tool_calls is not None and step.tags_blocked is None


def test_pi_thinking_only_when_asked() -> None:
    without = turn_at(load_turns(PI_SESSION), 7)
    assert isinstance(without.messages[-1].content, str)
    with_thinking = turn_at(load_turns(PI_SESSION, thinking=True), 7)
    parts = with_thinking.messages[-1].content
    assert isinstance(parts, list) and isinstance(parts[0], ThinkingPart) and isinstance(parts[1], TextPart)
    assert "split" in parts[0].thinking


def test_pi_compaction_replaces_earlier_history_with_the_summary(tmp_path: Path) -> None:
    lines = [
        '{"type":"session","version":3,"id":"s1","timestamp":"2026-11-28T09:00:00Z","cwd":"/p"}',
        '{"type":"message","id":"e1","parentId":null,"timestamp":"t","message":{"role":"user","content":"old question"}}',
        '{"type":"message","id":"e2","parentId":"e1","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"old answer"}],"stopReason":"stop"}}',
        '{"type":"message","id":"e3","parentId":"e2","timestamp":"t","message":{"role":"user","content":"kept question"}}',
        '{"type":"message","id":"e4","parentId":"e3","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"kept answer"}],"stopReason":"stop"}}',
        '{"type":"compaction","id":"e5","parentId":"e4","timestamp":"t","summary":"We discussed X.","firstKeptEntryId":"e3","tokensBefore":9000}',
        '{"type":"message","id":"e6","parentId":"e5","timestamp":"t","message":{"role":"user","content":"new question"}}',
        '{"type":"message","id":"e7","parentId":"e6","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"new answer"}],"stopReason":"stop"}}',
    ]
    path = tmp_path / "compacted.jsonl"
    path.write_text("\n".join(lines) + "\n")
    turn = turn_at(load_turns(path), None)
    texts = [text_of(message) for message in turn.messages]
    assert (
        turn.messages[0].role == "user"
    )  # Pi's own wrapper (pi-coding-agent 0.73.1 COMPACTION_SUMMARY_PREFIX)
    assert texts[0] == (
        "The conversation history before this point was compacted into the following summary:\n\n"
        "<summary>\nWe discussed X.\n</summary>"
    )
    assert texts[1:] == ["kept question", "kept answer", "new question", "new answer"]


def test_pi_v1_linear_log_without_ids(tmp_path: Path) -> None:
    lines = [
        '{"type":"session","id":"old-session","timestamp":"2025-06-01T10:00:00Z","cwd":"/p"}',
        '{"type":"message","timestamp":"t","message":{"role":"user","content":"hi"}}',
        '{"type":"message","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"hello"}],"stopReason":"stop","model":"m1","provider":"p1"}}',
        '{"type":"message","timestamp":"t","message":{"role":"user","content":"bye"}}',
        '{"type":"message","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"see you"}],"stopReason":"stop","model":"m1","provider":"p1"}}',
    ]
    path = tmp_path / "v1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    turns = load_turns(path)
    assert turns.adapter == "pi"
    assert [turn.end_line for turn in turns] == [3, 5]
    last = turn_at(turns, None)
    assert [text_of(message) for message in last.messages] == ["hi", "hello", "bye", "see you"]
    assert last.source.entry_id is None and last.source.session_id == "old-session"


def test_pi_v2_tree_and_hook_message_role(tmp_path: Path) -> None:
    lines = [
        '{"type":"session","version":2,"id":"s2","timestamp":"t","cwd":"/p"}',
        '{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"q1"}}',
        '{"type":"message","id":"h","parentId":"a","timestamp":"t","message":{"role":"hookMessage","content":"hook note"}}',
        '{"type":"message","id":"b","parentId":"h","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"r1"}],"stopReason":"stop"}}',
    ]
    path = tmp_path / "v2.jsonl"
    path.write_text("\n".join(lines) + "\n")
    # Pi sends an extension's (hook/custom) message to the model as a user message: plain tags keep it too.
    assert roles(turn_at(load_turns(path), None).messages) == ["user", "user", "assistant"]
    traced = turn_at(load_turns(path, trace=True), None)
    assert [text_of(message) for message in traced.messages] == ["q1", "hook note", "r1"]


def test_pi_missing_parent_and_bad_lines_do_not_lose_the_rest(tmp_path: Path) -> None:
    lines = [
        '{"type":"session","version":3,"id":"s3","timestamp":"t","cwd":"/p"}',
        '{"type":"message","id":"x2","parentId":"gone","timestamp":"t","message":{"role":"user","content":"orphan q"}}',
        "{broken",
        '{"type":"message","id":"x3","parentId":"x2","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"orphan a"}],"stopReason":"stop"}}',
    ]
    path = tmp_path / "damaged.jsonl"
    path.write_text("\n".join(lines) + "\n")
    turns = load_turns(path)
    assert [problem.line for problem in turns.problems] == [3]
    turn = turn_at(turns, 4)
    assert [text_of(message) for message in turn.messages] == ["orphan q", "orphan a"]
    assert any("parent entry gone is not in the file" in warning for warning in turn.warnings)


def test_a_shape_error_points_at_the_offending_value(tmp_path: Path) -> None:
    path = tmp_path / "role.jsonl"
    path.write_text('{"messages":[{"role":"robot","content":"x"},{"role":"assistant","content":"y"}]}\n')
    with pytest.raises(TranscriptError) as error:
        turn_at(load_turns(path), 1)
    assert (error.value.line, error.value.column) == (1, 22)  # the "robot" value
    assert str(error.value).endswith(
        ': unknown role "robot" (expected system, developer, user, assistant or tool) (role-unknown)'
    )


def test_pi_trace_leaves_out_a_failed_reply_and_the_results_of_its_calls(tmp_path: Path) -> None:
    lines = [
        '{"type":"session","version":3,"id":"s4","timestamp":"t","cwd":"/p"}',
        '{"type":"message","id":"u1","parentId":null,"timestamp":"t","message":{"role":"user","content":"list files"}}',
        '{"type":"message","id":"a1","parentId":"u1","timestamp":"t","message":{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"ls"}}],"stopReason":"aborted"}}',
        '{"type":"message","id":"r1","parentId":"a1","timestamp":"t","message":{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{"type":"text","text":"Operation aborted"}],"isError":true}}',
        '{"type":"message","id":"u2","parentId":"r1","timestamp":"t","message":{"role":"user","content":"try again"}}',
        '{"type":"message","id":"a2","parentId":"u2","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"a.py b.py"}],"stopReason":"stop"}}',
    ]
    path = tmp_path / "retry.jsonl"
    path.write_text("\n".join(lines) + "\n")
    turn = turn_at(load_turns(path, trace=True), None)
    assert [(m.role, text_of(m)) for m in turn.messages] == [
        ("user", "list files"),
        ("user", "try again"),
        ("assistant", "a.py b.py"),
    ]


def test_pi_regenerated_replies_to_one_prompt_are_separate_turns(tmp_path: Path) -> None:
    lines = [
        '{"type":"session","version":3,"id":"s5","timestamp":"t","cwd":"/p"}',
        '{"type":"message","id":"u1","parentId":null,"timestamp":"t","message":{"role":"user","content":"7*8?"}}',
        '{"type":"message","id":"a1","parentId":"u1","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"54"}],"stopReason":"stop"}}',
        '{"type":"message","id":"a2","parentId":"u1","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"56"}],"stopReason":"stop"}}',
    ]
    path = tmp_path / "regen.jsonl"
    path.write_text("\n".join(lines) + "\n")
    turns = load_turns(path)
    assert [[text_of(m) for m in turn.messages] for turn in turns] == [["7*8?", "54"], ["7*8?", "56"]]
