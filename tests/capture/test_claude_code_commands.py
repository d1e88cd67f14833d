"""Slash commands and skills, written by the real Claude Code: the user's request is the user turn of the row.

Claude Code writes a typed `/mycmd args` as a user line of `<command-message>`/`<command-name>`/`<command-args>`
tags, then an `isMeta` line with the command's expanded text, and sends the model both in one user message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from capture_agents import AgentRun
from capture_compare import record_conversation, sent_conversation, text_turns
from capture_helpers import AgentSession, Cli, json_lines
from harness_runs import require
from model_endpoint import ModelEndpoint

COMMAND_BODY = "Review the code named in the arguments and list its bugs.\n\nARGUMENTS: $ARGUMENTS\n"
SKILL_BODY = "When asked to tidy a file, say which lines you would change and why."


@pytest.fixture(scope="module")
def commands_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    """A project command `/mycmd` (`.claude/commands/mycmd.md`) and a project skill `/tidy`, each typed once."""
    require("claude-code")
    with ModelEndpoint() as served:
        run = AgentRun("claude-code", tmp_path_factory.mktemp("claude-commands"), served)
        commands = run.project / ".claude" / "commands"
        commands.mkdir(parents=True)
        (commands / "mycmd.md").write_text(COMMAND_BODY)
        skill = run.project / ".claude" / "skills" / "tidy"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(f"---\nname: tidy\ndescription: Tidy a file.\n---\n\n{SKILL_BODY}\n")
        run.run("/mycmd check file a.py")
        run.run("/tidy b.py", resume=True)
        yield AgentSession(run, served, run.log())


def _answered(session: AgentSession, marker: str):
    """The first request that held `marker` (the one answering the command)."""
    return next(
        r for r in session.endpoint.model_requests("anthropic") if marker in json.dumps(r.body["messages"])
    )


def test_a_slash_command_is_the_user_turn_with_its_expanded_text(
    commands_session: AgentSession, cli: Cli
) -> None:
    log = commands_session.log
    command_line = next(
        i
        for i, o in enumerate(json_lines(log), start=1)
        if o.get("type") == "user" and "<command-name>/mycmd" in str(o["message"]["content"])
    )
    request = _answered(commands_session, "<command-name>/mycmd")
    answer_line = next(
        i
        for i, o in enumerate(json_lines(log), start=1)
        if o.get("type") == "assistant"
        and any(b.get("text") == request.reply.text for b in o["message"]["content"])
    )
    assert answer_line > command_line
    code, _, err = cli("bad", "--from", f"{log}:{answer_line}")
    assert code == 0, err
    [record] = cli.records()
    user = record["messages"][0]
    assert user["role"] == "user" and user["content"].startswith("/mycmd check file a.py\n")
    assert "ARGUMENTS: check file a.py" in user["content"]  # the expanded command, as it was sent
    assert record["messages"] == text_turns(sent_conversation(request))
    code, _, err = cli("good", "--trace", "--from", f"{log}:{answer_line}")
    assert code == 0, err
    traced = cli.records()[-1]
    assert record_conversation(traced["messages"]) == sent_conversation(request)


def test_a_skill_typed_as_a_command_keeps_its_request_and_the_earlier_command(
    commands_session: AgentSession, cli: Cli
) -> None:
    request = _answered(commands_session, "<command-name>/tidy")
    code, _, err = cli("good", "--from", str(commands_session.log))  # the last turn
    assert code == 0, err
    [record] = cli.records()
    users = [m["content"] for m in record["messages"] if m["role"] == "user"]
    assert [u.split("\n")[0] for u in users] == ["/mycmd check file a.py", "/tidy b.py"]
    assert SKILL_BODY in users[1]
    assert record["messages"] == text_turns(sent_conversation(request))


def test_the_command_rows_validate_as_trainers_read_them(commands_session: AgentSession, cli: Cli) -> None:
    """`machine train validate` (the store's good rows as exported): each command's row has its user turn."""
    for objects_line in _answer_lines(commands_session):
        code, _, err = cli("good", "--from", f"{commands_session.log}:{objects_line}")
        assert code == 0, err
    assert len(cli.records()) == 2
    code, out, err = cli("train", "validate")
    assert code == 0, out + err


def _answer_lines(session: AgentSession) -> list[int]:
    texts = {r.reply.text for r in session.endpoint.model_requests("anthropic") if r.reply and r.reply.text}
    return [
        i
        for i, o in enumerate(json_lines(session.log), start=1)
        if o.get("type") == "assistant" and any(b.get("text") in texts for b in o["message"]["content"])
    ]
