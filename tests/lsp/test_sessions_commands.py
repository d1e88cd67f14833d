"""machine.sessions, machine.sessions.turns and machine.tag {from, preview}, through the real server, on session logs
Claude Code and Codex wrote (tests/fixtures/claude_code, tests/fixtures/codex), each placed where its harness keeps it
in a temporary HOME with the recorded directory rewritten to the test project."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import pytest_asyncio
from lsp_helpers import SERVER, WAIT, close, start
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient
from test_replies import matches

from machine_lsp.cli.main import main
from machine_lsp.core.transcripts import load_turns

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class Log(msgspec.Struct):
    """A log a real harness wrote (see the fixtures' READMEs), and where that harness keeps it under HOME."""

    harness: str
    fixture: Path
    recorded_cwd: str
    session_id: str
    home_path: str  # relative to HOME; {project_slug} is filled in


LOGS = [
    Log(
        "claude-code",
        FIXTURES / "claude_code" / "claude-code-2.1.332-echo-hi.jsonl",
        "/tmp/dump-claude-code-4ea0g9cl/project",
        "a5ba8927-dfb7-46cd-9dd3-b127c2b2f3ac",
        ".claude/projects/{project_slug}/a5ba8927-dfb7-46cd-9dd3-b127c2b2f3ac.jsonl",
    ),
    Log(
        "codex",
        FIXTURES / "codex" / "rollout-0.171.0-echo-hi.jsonl",
        "/tmp/dump-codex-8pc_n4bz/project",
        "01a22d9b-6395-7bb2-9925-f6f25def3352",
        ".codex/sessions/2026/11/30/rollout-2026-11-30T17-58-08-01a22d9b-6395-7bb2-9925-f6f25def3352.jsonl",
    ),
]


class World(msgspec.Struct):
    harness: str
    session_id: str
    home: Path
    project: Path
    log: Path
    env: dict[str, str]


@pytest.fixture(params=LOGS, ids=lambda log: log.harness)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    spec: Log = request.param
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / ".machine").mkdir()
    log = home / spec.home_path.format(project_slug="-" + str(project).strip("/").replace("/", "-"))
    log.parent.mkdir(parents=True)
    text = spec.fixture.read_text(encoding="utf-8")
    assert spec.recorded_cwd in text
    log.write_text(text.replace(spec.recorded_cwd, str(project)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in _HOME_VARIABLES}
    env["HOME"] = str(home)
    return World(spec.harness, spec.session_id, home, project, log, env)


_HOME_VARIABLES = (
    "MACHINE_HOME",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "PI_CODING_AGENT_DIR",
    "XDG_DATA_HOME",
    "LETTA_LOCAL_BACKEND_DIR",
)


@pytest_asyncio.fixture
async def client(world: World) -> AsyncIterator[LanguageClient]:
    lsp = await ClientServerConfig(server_command=SERVER, server_env=world.env).start()
    await start(lsp, "visual-studio-code", world.project)
    yield lsp
    await close(lsp)
    await lsp.stop()


async def command(client: LanguageClient, name: str, args: dict | None = None):
    """The reply, checked against the struct(s) replies.py declares for the command (the generated TS types)."""
    params = types.ExecuteCommandParams(command=name, arguments=[args] if args is not None else [])
    reply = await asyncio.wait_for(client.workspace_execute_command_async(params), WAIT)
    plain = msgspec.json.decode(msgspec.json.encode(reply))
    matches(plain, name)
    return plain


def stored(project: Path) -> list[dict]:
    path = project / ".machine" / "tagged.jsonl"
    return [msgspec.json.decode(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_sessions_lists_the_agent_session(client: LanguageClient, world: World) -> None:
    reply = await command(client, "machine.sessions", {})
    assert reply["project"] == str(world.project.resolve())
    [session] = reply["sessions"]
    assert session["harness"] == world.harness and session["id"] == world.session_id
    assert session["path"] == str(world.log) and session["turns"] == len(load_turns(world.log))
    assert session["first_prompt"] == "Say hello in five words."
    other = "pi" if world.harness != "pi" else "codex"
    assert (await command(client, "machine.sessions", {"harness": other}))["sessions"] == []
    only = await command(client, "machine.sessions", {"harness": world.harness})
    assert [s["id"] for s in only["sessions"]] == [world.session_id]
    with pytest.raises(JsonRpcException, match="harness must be one of"):
        await command(client, "machine.sessions", {"harness": "emacs"})


async def test_turns_are_marked_once_tagged(client: LanguageClient, world: World) -> None:
    turns = load_turns(world.log)
    reply = await command(client, "machine.sessions.turns", {"session": world.session_id[:8]})
    assert reply["id"] == world.session_id and reply["harness"] == world.harness
    assert [(t["number"], t["line"], t["end_line"]) for t in reply["turns"]] == [
        (n, t.line, t.end_line) for n, t in enumerate(turns, start=1)
    ]
    assert reply["turns"][0]["prompt"] == "Say hello in five words."
    assert all(t["verdict"] is None and t["records"] == [] for t in reply["turns"])

    tagged = await command(client, "machine.tag", {"from": f"{world.session_id}:1", "verdict": "bad"})
    again = await command(client, "machine.sessions.turns", {"session": world.session_id})
    assert again["turns"][0]["verdict"] == "bad" and again["turns"][0]["records"] == [tagged["id"]]
    assert all(t["verdict"] is None for t in again["turns"][1:])

    # Good after bad: the last tag stands, and the turn says its records contradict.
    await command(client, "machine.tag", {"from": f"{world.session_id}:1", "verdict": "good"})
    first = (await command(client, "machine.sessions.turns", {"session": world.session_id}))["turns"][0]
    assert first["verdict"] == "good" and first["conflict"] is True and len(first["records"]) == 2

    with pytest.raises(JsonRpcException, match="no agent session has that id"):
        await command(client, "machine.sessions.turns", {"session": "zzzz"})


async def test_turns_that_make_preference_pairs_say_how_many(client: LanguageClient, world: World) -> None:
    reply = await command(client, "machine.sessions.turns", {"session": world.session_id})
    assert all(t["pairs"] == 0 for t in reply["turns"])
    bad = await command(client, "machine.tag", {"from": f"{world.session_id}:1", "verdict": "bad"})
    turns = (await command(client, "machine.sessions.turns", {"session": world.session_id}))["turns"]
    assert turns[0]["pairs"] == 0  # a bad answer alone is no pair (KTO still trains on it)
    await command(
        client, "machine.retag", {"id": bad["id"], "verdict": "good", "rewrite": "Hello there, nice to meet!"}
    )
    turns = (await command(client, "machine.sessions.turns", {"session": world.session_id}))["turns"]
    assert turns[0]["pairs"] == 1 and turns[0]["rewritten"] is True  # the rewrite against the model's answer
    assert all(t["pairs"] == 0 for t in turns[1:])


async def test_tag_from_last_stores_what_the_cli_stores(
    client: LanguageClient, world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    preview = await command(client, "machine.tag", {"from": "last", "preview": True})
    assert preview["preview"] is True and preview["harness"] == world.harness
    assert preview["session_id"] == world.session_id and preview["duplicate_of"] is None
    assert preview["where"] == f"{world.log}:{load_turns(world.log)[-1].end_line}"
    assert preview["answer"] == preview["record"]["messages"][-1]["content"]
    assert stored(world.project) == []  # a preview stores nothing

    reply = await command(client, "machine.tag", {"from": "last"})
    [lsp_record] = stored(world.project)
    assert lsp_record["id"] == reply["id"]

    # The CLI, in the same HOME and project, with its own store.
    for variable in _HOME_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(world.home))
    cli_store = tmp_path / "cli-store"
    monkeypatch.setenv("MACHINE_HOME", str(cli_store))
    monkeypatch.chdir(world.project)
    assert main(["good", "--from", "last"]) == 0
    [cli_record] = [
        msgspec.json.decode(line) for line in (cli_store / "tagged.jsonl").read_text().splitlines()
    ]

    def same(record: dict) -> dict:
        return {k: v for k, v in record.items() if k not in ("id", "created_at")}

    assert same(lsp_record) == same(cli_record)
    assert same(preview["record"]) == same(lsp_record)

    again = await command(client, "machine.tag", {"from": "last", "preview": True})
    assert again["duplicate_of"] == reply["id"]


async def test_from_errors_are_one_line(client: LanguageClient, world: World) -> None:
    with pytest.raises(JsonRpcException, match="no such file, and no agent session has that id"):
        await command(client, "machine.tag", {"from": "nope-not-a-session"})
    with pytest.raises(JsonRpcException, match="TURN counts from 1 to"):
        await command(client, "machine.tag", {"from": f"{world.session_id}:99", "preview": True})


async def test_from_a_file_and_line_reads_that_file(client: LanguageClient, world: World) -> None:
    first = load_turns(world.log)[0]
    preview = await command(client, "machine.tag", {"from": f"{world.log}:{first.end_line}", "preview": True})
    assert preview["where"] == f"{world.log}:{first.end_line}"
    assert stored(world.project) == []
