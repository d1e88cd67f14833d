"""Codex and Pi sessions that end mid-call: the last reply made tool calls that were never answered (the agent was
killed while its tool ran, or the model never answered the results). The session's last turn is that reply, named
with a warning, never "no assistant turn" or an older turn: a plain `good` is refused with a pointer to --trace,
`bad` and `--trace` tag it with the warning (as Claude Code's, tests/capture/test_dangling_calls.py).

The real agents are killed during a slow shell call the scripted endpoint asks for; the shapes an agent cannot be
made to write here (a reply with text before its call, results the model never answered) are small logs of ours.
"""

from __future__ import annotations

import json
from pathlib import Path

from capture_helpers import TEXT_PROMPT, Cli, line_where
from model_endpoint import SLOW_TOOL_MARKER

SLOW_PROMPT = f"Please run `{SLOW_TOOL_MARKER}` in the shell."


def _check_mid_call(cli: Cli, log: Path, call_line: int, tool: str) -> None:
    """The real agents' reply is the call alone (no text): plain tags are refused, a good one because the agent
    never gave a final reply, a bad one because it would store an empty answer; both with --trace keep the call."""
    code, _, err = cli("good", "--from", str(log))
    assert code == 1 and "--trace" in err and f"{log.name}:{call_line}" in err and not cli.records(), err
    code, _, err = cli("bad", "--from", str(log))
    assert code == 1 and "no text" in err and "--trace" in err and not cli.records(), err
    for verdict in ("bad", "good"):
        code, out, err = cli(verdict, "--trace", "--from", str(log))
        assert code == 0, err
        assert f"{log.name}:{call_line}" in out
        assert f"the session ends on an unanswered {tool} call (line {call_line})" in err
        record = cli.records()[-1]
        assert record["verdict"] == verdict
        assert [m["content"] for m in record["messages"] if m["role"] == "user"][-1] == SLOW_PROMPT
        [call] = record["messages"][-1]["tool_calls"]
        assert call["function"]["name"] == tool and SLOW_TOOL_MARKER in call["function"]["arguments"]


def test_a_codex_session_killed_during_a_call_ends_on_that_call(agent_run, cli: Cli) -> None:
    run = agent_run("codex")
    run.run(TEXT_PROMPT)
    run.killed_during_call(SLOW_PROMPT, SLOW_TOOL_MARKER, resume=True)
    log = run.log()
    call_line = line_where(
        log, lambda o: o["type"] == "response_item" and o["payload"]["type"] == "function_call"
    )
    _check_mid_call(cli, log, call_line, "exec_command")


def test_a_pi_session_killed_during_a_call_ends_on_that_call(agent_run, cli: Cli) -> None:
    run = agent_run("pi")
    run.run(TEXT_PROMPT)
    run.killed_during_call(SLOW_PROMPT, SLOW_TOOL_MARKER, resume=True)
    log = run.log()
    call_line = line_where(log, lambda o: o.get("message", {}).get("stopReason") == "toolUse")
    _check_mid_call(cli, log, call_line, "bash")


def _write(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return path


def _codex(kind: str, **payload) -> dict:
    return {"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload}


def _codex_message(role: str, text: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return _codex("response_item", type="message", role=role, content=[{"type": kind, "text": text}])


CODEX_CALL = _codex("response_item", type="function_call", name="shell", arguments="{}", call_id="c1")


def test_a_codex_reply_announcing_a_call_is_not_a_final_answer(tmp_path: Path, cli: Cli) -> None:
    log = _write(
        tmp_path / "rollout.jsonl",
        [
            _codex("session_meta", id="s1"),
            _codex_message("user", "hi"),
            _codex_message("assistant", "Hello."),
            _codex("event_msg", type="task_complete"),
            _codex_message("user", "build it"),
            _codex_message("assistant", "I'll build it now:"),
            CODEX_CALL,
            _codex("response_item", type="function_call_output", call_id="c1", output="built"),
        ],
    )
    code, _, err = cli("good", "--from", str(log))
    assert code == 1 and "unanswered: tag it with --trace" in err and not cli.records(), err
    code, out, err = cli("bad", "--from", str(log))
    assert code == 0 and "rollout.jsonl:7" in out, out + err
    assert "the session ends on tool results the model never answered" in err
    assert cli.records()[-1]["messages"][-2:] == [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": "I'll build it now:"},
    ]
    code, _, err = cli("good", "--trace", "--from", str(log))
    assert code == 0 and "never answered" in err, err
    assert cli.records()[-1]["messages"][-1]["tool_calls"][0]["id"] == "c1"
    # A call the exchange went on from is an intermediate step, as before: its final reply is the turn.
    longer = _write(tmp_path / "longer.jsonl", [*json_objects(log), _codex_message("assistant", "Built.")])
    code, out, err = cli("good", "--from", str(longer))
    assert code == 0 and "longer.jsonl:9" in out and "never answered" not in err, out + err


def json_objects(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _pi(entry_id: str, parent: str | None, role: str, content: list[dict], **fields) -> dict:
    message = {"role": role, "content": content, **fields}
    return {"type": "message", "id": entry_id, "parentId": parent, "message": message}


def test_a_pi_session_ending_on_results_the_model_never_answered(tmp_path: Path, cli: Cli) -> None:
    call = {"type": "toolCall", "id": "t1", "name": "bash", "arguments": {"command": "make"}}
    log = _write(
        tmp_path / "pi.jsonl",
        [
            {"type": "session", "version": 3, "id": "s"},
            _pi("u1", None, "user", [{"type": "text", "text": "build it"}]),
            _pi("a1", "u1", "assistant", [{"type": "text", "text": "Building:"}, call], stopReason="toolUse"),
            _pi("r1", "a1", "toolResult", [{"type": "text", "text": "ok"}], toolCallId="t1", toolName="bash"),
        ],
    )
    code, _, err = cli("good", "--from", str(log))
    assert code == 1 and "unanswered: tag it with --trace" in err, err
    code, out, err = cli("bad", "--from", str(log))
    assert code == 0 and "pi.jsonl:3" in out and "never answered" in err, out + err
    assert cli.records()[-1]["messages"][-1] == {"role": "assistant", "content": "Building:"}


def _gemini(message_id: str, kind: str, content, **fields) -> dict:
    return {"id": message_id, "timestamp": "2026-04-29T21:39:33Z", "type": kind, "content": content, **fields}


def test_a_gemini_reply_announcing_a_call_is_not_a_final_answer(tmp_path: Path, cli: Cli) -> None:
    """Gemini CLI makes every reply a turn: one that went on to call tools is refused as a plain good (before, its
    announcing text was taken as a final answer), and the session's last one names its unanswered call."""
    call = {"id": "c1", "name": "run_shell_command", "args": {"command": "make"}}
    log = _write(
        tmp_path / "session.jsonl",
        [
            {"sessionId": "g1", "projectHash": "0" * 64, "startTime": "2026-04-29T21:39:22Z", "kind": "main"},
            _gemini("u1", "user", [{"text": "build it"}]),
            _gemini("g1", "gemini", "I'll build it now:", model="gemini-2.5-flash", toolCalls=[call]),
        ],
    )
    code, _, err = cli("good", "--from", str(log))
    assert code == 1 and "unanswered: tag it with --trace" in err and not cli.records(), err
    code, out, err = cli("bad", "--from", str(log))
    assert code == 0 and "session.jsonl:3" in out, out + err
    assert "the session ends on an unanswered run_shell_command call (line 3)" in err
    assert cli.records()[-1]["messages"][-1] == {"role": "assistant", "content": "I'll build it now:"}
    code, _, err = cli("good", "--trace", "--from", str(log))
    assert code == 0 and "unanswered run_shell_command call" in err, err
    assert cli.records()[-1]["messages"][-1]["tool_calls"][0]["id"] == "c1"
