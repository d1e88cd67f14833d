"""Pi sessions read as Pi sends them (pi-coding-agent 0.73.1): v1 compactions, cut-off replies, `!command` and
extension messages, summary wrappers; Letta Code's copy of the format is named as Letta Code."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from machine_lsp.core.schema import text_of
from machine_lsp.core.store import Store
from machine_lsp.core.tagging import TagRefused, tag
from machine_lsp.core.transcripts import load_turns, turn_at


def write_log(path: Path, *entries: dict) -> Path:
    path.write_text("\n".join(msgspec.json.encode(entry).decode() for entry in entries) + "\n")
    return path


def user(text: str, **extra: object) -> dict:
    return {"type": "message", "timestamp": "t", "message": {"role": "user", "content": text}, **extra}


def reply(text: str, stop: str = "stop", **extra: object) -> dict:
    message = {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": stop}
    return {"type": "message", "timestamp": "t", "message": message, **extra}


def texts(turn) -> list[str]:
    return [text_of(message) for message in turn.messages]


V1_HEADER = {"type": "session", "id": "v1-session", "timestamp": "2025-06-01T10:00:00Z", "cwd": "/p"}


def test_v1_compaction_keeps_the_entries_from_first_kept_entry_index(tmp_path: Path) -> None:
    # JSON lines are indexed from the header (0), as Pi's migrateV1ToV2 does: index 3 is "kept question".
    path = write_log(
        tmp_path / "v1.jsonl",
        V1_HEADER,
        user("old question"),
        reply("old answer"),
        user("kept question"),
        reply("kept answer"),
        {
            "type": "compaction",
            "timestamp": "t",
            "summary": "Talked about X.",
            "firstKeptEntryIndex": 3,
            "tokensBefore": 5000,
        },  # fmt: skip
        user("new question"),
        reply("new answer"),
    )
    turn = turn_at(load_turns(path), None)
    assert texts(turn) == [
        "The conversation history before this point was compacted into the following summary:\n\n"
        "<summary>\nTalked about X.\n</summary>",
        "kept question",
        "kept answer",
        "new question",
        "new answer",
    ]


def test_v1_index_counts_json_lines_not_file_lines_and_the_header_keeps_nothing(tmp_path: Path) -> None:
    lines = [
        msgspec.json.encode(V1_HEADER).decode(),
        "",  # a blank line is not counted
        msgspec.json.encode(user("q1")).decode(),
        msgspec.json.encode(reply("a1")).decode(),
        msgspec.json.encode(
            {
                "type": "compaction",
                "timestamp": "t",
                "summary": "S",
                "firstKeptEntryIndex": 2,
                "tokensBefore": 1,
            }
        ).decode(),
        msgspec.json.encode(user("q2")).decode(),
        msgspec.json.encode(reply("a2")).decode(),
        msgspec.json.encode(
            {
                "type": "compaction",
                "timestamp": "t",
                "summary": "T",
                "firstKeptEntryIndex": 0,
                "tokensBefore": 1,
            }
        ).decode(),
        msgspec.json.encode(user("q3")).decode(),
        msgspec.json.encode(reply("a3")).decode(),
    ]
    path = tmp_path / "v1b.jsonl"
    path.write_text("\n".join(lines) + "\n")
    turns = load_turns(path)
    second = turn_at(turns, 7)
    assert texts(second)[1:] == ["a1", "q2", "a2"]  # index 2 = the reply "a1" (the header is 0, q1 is 1)
    last = turn_at(turns, None)
    assert texts(last)[0].endswith("<summary>\nT\n</summary>") and texts(last)[1:] == ["q3", "a3"]


def test_a_reply_cut_off_at_the_token_limit_cannot_be_tagged_good(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "s.jsonl",
        {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/p"},
        user("explain", id="a1", parentId=None),
        reply("It works because the", stop="length", id="a2", parentId="a1"),
    )
    turn = turn_at(load_turns(path), None)
    assert turn.tags_blocked is not None and "stopReason is length" in turn.tags_blocked
    store = Store.open(tmp_path)
    with pytest.raises(TagRefused, match="cut off at the token limit"):
        tag(store, turn, "good")
    assert tag(store, turn, "bad").record.verdict == "bad"  # saying it is bad is fine


def test_plain_tags_keep_bash_and_extension_messages_as_pi_sends_them(tmp_path: Path) -> None:
    bash = {
        "role": "bashExecution", "command": "ls", "output": "a.txt", "exitCode": 2, "cancelled": False,
        "truncated": True, "fullOutputPath": "/tmp/out.txt", "timestamp": 1,
    }  # fmt: skip
    silent = {"role": "bashExecution", "command": "pwd", "output": "", "exitCode": 0, "cancelled": False,
              "truncated": False, "excludeFromContext": True, "timestamp": 2}  # fmt: skip
    path = write_log(
        tmp_path / "s.jsonl",
        {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/p"},
        {"type": "message", "id": "b1", "parentId": None, "timestamp": "t", "message": bash},
        {"type": "message", "id": "b2", "parentId": "b1", "timestamp": "t", "message": silent},
        {
            "type": "custom_message",
            "id": "c1",
            "parentId": "b2",
            "timestamp": "t",
            "customType": "note",
            "content": [{"type": "text", "text": "extension says hi"}],
            "display": False,
        },  # fmt: skip
        {"type": "custom", "id": "c2", "parentId": "c1", "timestamp": "t", "customType": "state", "data": {}},
        user("what failed?", id="u1", parentId="c2"),
        reply("ls exited with 2.", id="r1", parentId="u1"),
    )
    turn = turn_at(load_turns(path), None)
    assert [m.role for m in turn.messages] == ["user", "user", "user", "assistant"]
    assert texts(turn) == [
        "Ran `ls`\n```\na.txt\n```\n\nCommand exited with code 2\n\n[Output truncated. Full output: /tmp/out.txt]",
        "extension says hi",
        "what failed?",
        "ls exited with 2.",
    ]


def test_a_bash_run_without_output_and_a_branch_summary_read_as_pi_writes_them(tmp_path: Path) -> None:
    empty = {"role": "bashExecution", "command": "true", "output": "", "exitCode": 0, "cancelled": True,
             "truncated": False, "timestamp": 1}  # fmt: skip
    path = write_log(
        tmp_path / "s.jsonl",
        {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/p"},
        {
            "type": "branch_summary",
            "id": "s1",
            "parentId": None,
            "timestamp": "t",
            "fromId": "x",
            "summary": "B",
        },
        {"type": "message", "id": "b1", "parentId": "s1", "timestamp": "t", "message": empty},
        reply("ok", id="r1", parentId="b1"),
    )
    assert texts(turn_at(load_turns(path), None))[:2] == [
        "The following is a summary of a branch that this conversation came back from:\n\n<summary>\nB</summary>",
        "Ran `true`\n(no output)\n\n(command cancelled)",
    ]


LETTA_HEADER = {"type": "session", "version": 3, "id": "local-conv-1", "timestamp": "t", "cwd": "/p"}


def test_letta_code_transcripts_are_named_letta_code_and_reminders_are_not_what_the_user_typed(
    tmp_path: Path,
) -> None:
    typed = {
        "role": "user",
        "id": "letta-msg-1",
        "content": [
            {"type": "text", "text": "<system-reminder>\nMemory: the user likes tests.\n</system-reminder>"},
            {"type": "text", "text": "say hi"},
        ],
    }
    answer = {"role": "assistant", "id": "letta-msg-2", "content": [{"type": "text", "text": "hi"}],
              "stopReason": "stop", "model": "m", "provider": "openai-compatible"}  # fmt: skip
    path = write_log(
        tmp_path / "messages.jsonl",
        LETTA_HEADER,
        {"type": "message", "id": "e1", "parentId": None, "timestamp": "t", "message": typed},
        {"type": "message", "id": "e2", "parentId": "e1", "timestamp": "t", "message": answer},
    )
    turns = load_turns(path)
    assert turns.adapter == "letta-code"
    turn = turn_at(turns, None)
    assert turn.source.harness == "letta-code" and turn.source.session_id == "local-conv-1"
    assert texts(turn) == ["say hi", "hi"]
    traced = turn_at(load_turns(path, trace=True), None)  # --trace keeps the context, as a system message
    assert [m.role for m in traced.messages] == ["system", "user", "assistant"]
    assert texts(traced) == [
        "<system-reminder>\nMemory: the user likes tests.\n</system-reminder>",
        "say hi",
        "hi",
    ]


def test_a_letta_log_is_recognised_by_its_message_ids_whatever_its_conversation_id(tmp_path: Path) -> None:
    header = {**LETTA_HEADER, "id": "3f1c2a9e-0000-4000-8000-000000000000"}
    message = {"role": "user", "id": "letta-msg-9", "content": "q"}
    answer = {
        "role": "assistant",
        "id": "letta-msg-10",
        "content": [{"type": "text", "text": "a"}],
        "stopReason": "stop",
    }
    path = write_log(
        tmp_path / "messages.jsonl",
        header,
        {"type": "message", "id": "e1", "parentId": None, "timestamp": "t", "message": message},
        {"type": "message", "id": "e2", "parentId": "e1", "timestamp": "t", "message": answer},
    )
    assert turn_at(load_turns(path), None).source.harness == "letta-code"
    pi_path = write_log(
        tmp_path / "pi.jsonl", header, user("q", id="e1", parentId=None), reply("a", id="e2", parentId="e1")
    )
    assert turn_at(load_turns(pi_path), None).source.harness == "pi"


def test_a_half_written_last_line_is_skipped_with_a_note(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "s.jsonl",
        {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/p"},
        user("q", id="u1", parentId=None),
        reply("a", id="r1", parentId="u1"),
    )
    path.write_text(path.read_text() + '{"type":"message","id":"u2","parentId":"r1","message":{"role":"us')
    turns = load_turns(path)
    assert turns.problems == [] and "half-written last line" in turns.notes[0]
    assert text_of(turn_at(turns, None).messages[-1]) == "a"


def test_a_letta_compaction_uses_the_summary_message_letta_stored(tmp_path: Path) -> None:
    # The shape Letta Code 0.32.18 writes (appendConversationSessionCompactionEntry): the summary message it puts
    # in context rides on the compaction entry. Not yet seen in a real run (it needs context pressure).
    summary_message = {
        "role": "user",
        "id": "letta-msg-9",
        "content": [{"type": "text", "text": "(summary) X"}],
    }
    first = {"role": "user", "id": "letta-msg-1", "content": "old"}
    path = write_log(
        tmp_path / "messages.jsonl",
        LETTA_HEADER,
        {"type": "message", "id": "e1", "parentId": None, "timestamp": "t", "message": first},
        reply("old answer", id="e2", parentId="e1"),
        {
            "type": "compaction",
            "id": "e3",
            "parentId": "e2",
            "timestamp": "t",
            "summary": "X",
            "firstKeptEntryId": None,
            "tokensBefore": 10,
            "message": summary_message,
        },  # fmt: skip
        user("new", id="e4", parentId="e3"),
        reply("new answer", id="e5", parentId="e4"),
    )
    assert texts(turn_at(load_turns(path), None)) == ["(summary) X", "new", "new answer"]
