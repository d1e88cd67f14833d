"""Public session logs written by real harnesses for other people (tests/fixtures/*/README.md), the logs our own
harness runs wrote (kept so these checks run without the agents), and files no adapter reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.core.transcripts import TranscriptError, load_turns, turn_at

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIDECHAIN = FIXTURES / "claude_code" / "sidechain_integrated-2.0.46.jsonl"
CODEX_040 = FIXTURES / "codex" / "rollout-0.40.0-agentcmd-prefix.jsonl"
CLAUDE_ECHO = FIXTURES / "claude_code" / "claude-code-2.1.332-echo-hi.jsonl"
CODEX_ECHO = FIXTURES / "codex" / "rollout-0.171.0-echo-hi.jsonl"


def test_claude_code_2_0_sidechain_lines_in_the_main_file_stay_out() -> None:
    """Claude Code 2.0.46 wrote sub-agent (Task) lines into the session file itself, interleaved."""
    for trace in (False, True):
        turns = load_turns(SIDECHAIN, trace=trace)
        assert turns.adapter == "claude-code" and not turns.problems
        for turn in turns:
            text = json.dumps([str(m.content) for m in turn.messages])
            assert "I'll research how" not in text and "Grep" not in json.dumps(
                [c.function.name for m in turn.messages for c in m.tool_calls or []]
            )
    trace = turn_at(load_turns(SIDECHAIN, trace=True), None)
    assert [m.role for m in trace.messages] == ["assistant", "tool", "assistant"]
    assert trace.messages[0].tool_calls[0].function.name == "Task"
    assert trace.messages[1].content == "Perfect! Now I have a complete understanding. Let ..."
    assert trace.source.model == "claude-sonnet-4-5-20250929" and trace.source.line == 6
    # The excerpt starts mid-session: the missing parent is said, not hidden.
    assert any("parent line 8ae40e91" in warning for warning in trace.warnings)


def test_codex_0_40_rollout_prefix() -> None:
    """Codex 0.40 (VS Code originator): env context, an IDE-context prompt, event_msg copies, reasoning, shell calls."""
    plain = load_turns(CODEX_040)
    assert plain.adapter == "codex" and not plain.problems
    # The excerpt ends on a reply's calls: that reply is its turn, which a plain good refuses.
    [last_plain] = plain
    assert turn_at(plain, None) is last_plain and last_plain.end_line == 15
    assert last_plain.tags_blocked is not None and "--trace" in last_plain.tags_blocked
    assert any(warning.startswith("the session ends on") for warning in last_plain.warnings)
    traced = load_turns(CODEX_040, trace=True, thinking=True)
    assert [turn.end_line for turn in traced] == [9, 15]
    last = traced[-1]
    roles = [m.role for m in last.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]  # one user turn: event_msg not counted
    assert last.messages[1].content.startswith("# Context from my IDE setup:")
    assert last.messages[0].content.startswith("<environment_context>")
    call = last.messages[2].tool_calls[0]
    assert (
        call.function.name == "shell"
        and json.loads(call.function.arguments)["command"][2] == 'rg "TeamSheet"'
    )
    assert last.messages[3].tool_call_id == call.id
    thinking = [part.thinking for part in last.messages[4].content if hasattr(part, "thinking")]
    assert thinking == ["**Inspecting TeamSheet file**"]
    assert "gAAAA" not in json.dumps([str(m.content) for m in last.messages])
    assert (
        last.source.model == "gpt-5-codex"
        and last.source.session_id == "01997e76-d124-7592-9cac-2ec05abbca08"
    )


def test_stored_harness_logs_read_without_the_agents() -> None:
    claude = turn_at(load_turns(CLAUDE_ECHO), None)
    assert [m.content for m in claude.messages][-2:] == [
        "Please run `echo hi` in the shell and tell me what it printed.",
        "The command printed: hi",
    ]
    codex = turn_at(load_turns(CODEX_ECHO, trace=True), None)
    assert codex.messages[-1].content == "The command printed: hi" and codex.source.harness == "codex"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            [{"foo": 1, "bar": 2}],
            r"unknown JSONL: the first line has keys foo, bar; supported: chat JSONL .*Codex",
        ),
        ([{"conversations": [{"from": "human", "value": "hi"}]}], "looks like ShareGPT rows"),
        (
            [{"type": "summary", "summary": "Old chat", "leafUuid": "x"}],
            "looks like a Claude Code session log but holds no user or assistant messages",
        ),
        (
            [{"timestamp": "t", "type": "brand_new_kind", "payload": {}}],
            "looks like a Codex rollout but of a kind",
        ),
    ],
)
def test_unknown_logs_get_one_message_naming_what_they_look_like(
    tmp_path: Path, lines: list[dict], message: str
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines * 3))
    turns = load_turns(path)
    assert len(turns.problems) == 1  # one message for the file, not one per line
    with pytest.raises(TranscriptError, match=message):
        turn_at(turns, None)
    assert "missing required field" not in str(turns.problems[0])


def test_claude_code_log_starting_with_bookkeeping_lines_is_recognised(tmp_path: Path) -> None:
    """Sniffing looks past summary / file-history-snapshot / queue lines at the top."""
    body = CLAUDE_ECHO.read_text()
    top = [
        {"type": "summary", "summary": "Earlier chat", "leafUuid": "0000"},
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}, "isSnapshotUpdate": False},
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in top) + body)
    turns = load_turns(path)
    assert turns.adapter == "claude-code" and len(turns) == 2 and turns[0].line > 2


def test_codex_turn_abort_blocks_the_reply_before_it(tmp_path: Path) -> None:
    """The stored real rollout, then the abort event Codex writes when the user interrupts."""
    path = tmp_path / "rollout-aborted.jsonl"
    abort = {
        "timestamp": "2026-11-30T18:00:00.000Z",
        "type": "event_msg",
        "payload": {"type": "turn_aborted"},
    }
    path.write_text(CODEX_ECHO.read_text() + json.dumps(abort) + "\n")
    last = turn_at(load_turns(path), None)
    assert last.tags_blocked and "aborted" in last.tags_blocked
    assert turn_at(load_turns(CODEX_ECHO), None).tags_blocked is None


def test_codex_custom_and_local_shell_calls_pair_by_call_id(tmp_path: Path) -> None:
    """The stored real rollout with its function call rewritten as the other two call kinds Codex logs."""
    lines = [json.loads(line) for line in CODEX_ECHO.read_text().splitlines()]
    for kind in ("custom_tool_call", "local_shell_call"):
        rewritten = []
        for obj in lines:
            payload = obj.get("payload", {})
            if obj["type"] == "response_item" and payload.get("type") == "function_call":
                call = {"type": kind, "call_id": payload["call_id"], "status": "completed"}
                if kind == "custom_tool_call":
                    call |= {"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}
                else:
                    call |= {"action": {"type": "exec", "command": ["bash", "-lc", "echo hi"]}}
                obj = {**obj, "payload": call}
            elif obj["type"] == "response_item" and payload.get("type") == "function_call_output":
                out_kind = "custom_tool_call_output" if kind == "custom_tool_call" else "function_call_output"
                obj = {**obj, "payload": {**payload, "type": out_kind}}
            rewritten.append(obj)
        path = tmp_path / f"{kind}.jsonl"
        path.write_text("".join(json.dumps(obj) + "\n" for obj in rewritten))
        last = turn_at(load_turns(path, trace=True), None)
        call_message = next(m for m in last.messages if m.tool_calls)
        tool = next(m for m in last.messages if m.role == "tool")
        assert tool.tool_call_id == call_message.tool_calls[0].id
        expected = "apply_patch" if kind == "custom_tool_call" else "local_shell"
        assert call_message.tool_calls[0].function.name == expected == tool.name
        json.loads(call_message.tool_calls[0].function.arguments)  # arguments stay JSON text


def test_a_big_unchanged_buffer_is_read_once_and_an_edit_is_read_again() -> None:
    body = CLAUDE_ECHO.read_text()
    text = body * (
        1_000_000 // len(body) + 1
    )  # over the 1 MB threshold (repeated lines: same uuids, same turns)
    uri = "file:///editor/session.jsonl"
    first = load_turns(text, uri)
    assert load_turns(text, uri) is first
    assert load_turns(text, uri, trace=True) is not first
    edited = text.replace("The command printed: hi", "The command printed: HI")
    assert turn_at(load_turns(edited, uri), None).messages[-1].content == "The command printed: HI"
    assert load_turns(text, "file:///editor/other.jsonl") is not first
