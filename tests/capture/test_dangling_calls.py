"""A session that ends on a call nothing answered (a dispatched Task/Agent sub-agent still running, with `progress`
lines under the call, after a compaction; a Qwen Code call whose result the model never saw): the last turn is
that reply, with a warning naming the call; a plain `good` of it is refused (its text announces a call that never
came back), `--trace` keeps the call. Never an older turn, silently.

Small logs of our own in the harnesses' shapes: a real agent cannot be stopped reliably mid-sub-agent.
"""

from __future__ import annotations

import json
from pathlib import Path

from capture_helpers import Cli


def _claude(uuid: str, parent: str | None, kind: str, **fields) -> dict:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": kind,
        "sessionId": "s",
        "uuid": uuid,
        **fields,
    }


def _assistant(uuid: str, parent: str, message_id: str, *blocks: dict) -> dict:
    message = {"id": message_id, "role": "assistant", "model": "claude-x", "content": list(blocks)}
    return _claude(uuid, parent, "assistant", message=message)


def _user(uuid: str, parent: str | None, text: str, **fields) -> dict:
    return _claude(uuid, parent, "user", message={"role": "user", "content": text}, **fields)


DISPATCH = "Now I'll dispatch a subagent for task 2:"
CLAUDE_LOG = [
    _user("u1", None, "write the plan"),
    _assistant("a1", "u1", "m1", {"type": "text", "text": "Plan written. Which approach?"}),
    _claude("c1", None, "system", subtype="compact_boundary", logicalParentUuid="a1"),
    _user("s1", "c1", "This session is being continued: the plan is written.", isCompactSummary=True),
    _user("u2", "s1", "1"),
    _assistant("a2", "u2", "m2", {"type": "text", "text": DISPATCH}),
    _assistant(
        "a3", "a2", "m2", {"type": "tool_use", "id": "toolu_1", "name": "Task", "input": {"prompt": "go"}}
    ),
    _claude("p1", "a3", "progress", data={"type": "agent_progress"}, toolUseID="toolu_1"),
    _claude("p2", "p1", "progress", data={"type": "agent_progress"}, toolUseID="toolu_1"),
]


def _write(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return path


def test_a_claude_session_ending_on_a_dispatched_task_ends_on_that_turn(tmp_path: Path, cli: Cli) -> None:
    log = _write(tmp_path / "dangling.jsonl", CLAUDE_LOG)
    code, _, err = cli("good", "--from", str(log))
    assert code == 1 and "unanswered" in err and "--trace" in err and not cli.records()
    code, out, err = cli("bad", "--from", str(log))
    assert code == 0, err
    assert "dangling.jsonl:7" in out  # the Task call's line, not the older answer on line 2
    assert "unanswered Task call (line 7)" in err
    [record] = cli.records()
    assert record["messages"][-1] == {"role": "assistant", "content": DISPATCH}
    assert record["messages"][-2] == {"role": "user", "content": "1"}
    code, _, err = cli("good", "--trace", "--from", str(log))
    assert code == 0, err
    answer = cli.records()[-1]["messages"][-1]
    assert answer["content"] == DISPATCH and answer["tool_calls"][0]["function"]["name"] == "Task"
    # The older turn is still there for whoever names its line.
    code, _, err = cli("good", "--from", f"{log}:2")
    assert code == 0, err


def _qwen(uuid: str, parent: str | None, kind: str, role: str, *parts: dict) -> dict:
    return {
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "q",
        "type": kind,
        "cwd": "/p",
        "version": "0.24.4",
        "message": {"role": role, "parts": list(parts)},
    }


def test_a_qwen_session_ending_on_a_result_the_model_never_saw_ends_on_the_call(
    tmp_path: Path, cli: Cli
) -> None:
    call = {"functionCall": {"id": "c1", "name": "run_shell_command", "args": {"command": "make"}}}
    result = {"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "ok"}}}
    log = _write(
        tmp_path / "qwen.jsonl",
        [
            _qwen("u1", None, "user", "user", {"text": "hi"}),
            _qwen("a1", "u1", "assistant", "model", {"text": "Hello."}),
            _qwen("u2", "a1", "user", "user", {"text": "build it"}),
            _qwen("a2", "u2", "assistant", "model", {"text": "Building."}, call),
            _qwen("t1", "a2", "tool_result", "user", result),
        ],
    )
    code, _, err = cli("good", "--from", str(log))
    assert code == 1 and "unanswered" in err and not cli.records()
    code, out, err = cli("good", "--trace", "--from", str(log))
    assert code == 0 and "qwen.jsonl:4" in out and "no reply to their results" in err, out + err
    [record] = cli.records()
    assert record["messages"][-1]["tool_calls"][0]["function"]["name"] == "run_shell_command"
    assert record["source"]["harness"] == "qwen-code"
