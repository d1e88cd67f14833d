"""machine.sessions, machine.sessions.turns and machine.tag {from, preview}, through the real server, on a session
log Claude Code wrote (tests/fixtures/claude_code), placed where Claude Code keeps it in a temporary HOME."""

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

from machine_lsp.cli.main import main
from machine_lsp.core.transcripts import load_turns

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "claude_code" / "claude-code-2.1.332-echo-hi.jsonl"
)
RECORDED_CWD = "/tmp/dump-claude-code-4ea0g9cl/project"
SESSION_ID = "a5ba8927-dfb7-46cd-9dd3-b127c2b2f3ac"


class World(msgspec.Struct):
    home: Path
    project: Path
    log: Path
    env: dict[str, str]


@pytest.fixture
def world(tmp_path: Path) -> World:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / ".machine").mkdir()
    log = (
        home
        / ".claude"
        / "projects"
        / ("-" + str(project).strip("/").replace("/", "-"))
        / f"{SESSION_ID}.jsonl"
    )
    log.parent.mkdir(parents=True)
    log.write_text(FIXTURE.read_text(encoding="utf-8").replace(RECORDED_CWD, str(project)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in _HOME_VARIABLES}
    env["HOME"] = str(home)
    return World(home, project, log, env)


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
    params = types.ExecuteCommandParams(command=name, arguments=[args] if args is not None else [])
    return await asyncio.wait_for(client.workspace_execute_command_async(params), WAIT)


def stored(project: Path) -> list[dict]:
    path = project / ".machine" / "tagged.jsonl"
    return [msgspec.json.decode(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_sessions_lists_the_claude_code_session(client: LanguageClient, world: World) -> None:
    reply = await command(client, "machine.sessions", {})
    assert reply["project"] == str(world.project.resolve())
    [session] = reply["sessions"]
    assert session["harness"] == "claude-code" and session["id"] == SESSION_ID
    assert session["path"] == str(world.log) and session["turns"] == len(load_turns(world.log))
    assert session["first_prompt"] == "Say hello in five words."
    assert (await command(client, "machine.sessions", {"harness": "codex"}))["sessions"] == []
    with pytest.raises(JsonRpcException, match="harness must be one of"):
        await command(client, "machine.sessions", {"harness": "emacs"})


async def test_turns_are_marked_once_tagged(client: LanguageClient, world: World) -> None:
    turns = load_turns(world.log)
    reply = await command(client, "machine.sessions.turns", {"session": SESSION_ID[:8]})
    assert reply["id"] == SESSION_ID and reply["harness"] == "claude-code"
    assert [(t["number"], t["line"], t["end_line"]) for t in reply["turns"]] == [
        (n, t.line, t.end_line) for n, t in enumerate(turns, start=1)
    ]
    assert reply["turns"][0]["prompt"] == "Say hello in five words."
    assert all(t["verdict"] is None and t["records"] == [] for t in reply["turns"])

    tagged = await command(client, "machine.tag", {"from": f"{SESSION_ID}:1", "verdict": "bad"})
    again = await command(client, "machine.sessions.turns", {"session": SESSION_ID})
    assert again["turns"][0]["verdict"] == "bad" and again["turns"][0]["records"] == [tagged["id"]]
    assert all(t["verdict"] is None for t in again["turns"][1:])

    # Good after bad: the last tag stands, and the turn says its records contradict.
    await command(client, "machine.tag", {"from": f"{SESSION_ID}:1", "verdict": "good"})
    first = (await command(client, "machine.sessions.turns", {"session": SESSION_ID}))["turns"][0]
    assert first["verdict"] == "good" and first["conflict"] is True and len(first["records"]) == 2

    with pytest.raises(JsonRpcException, match="no agent session has that id"):
        await command(client, "machine.sessions.turns", {"session": "zzzz"})


async def test_tag_from_last_stores_what_the_cli_stores(
    client: LanguageClient, world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    preview = await command(client, "machine.tag", {"from": "last", "preview": True})
    assert preview["preview"] is True and preview["harness"] == "claude-code"
    assert preview["session_id"] == SESSION_ID and preview["duplicate_of"] is None
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


async def test_from_errors_are_one_line(client: LanguageClient) -> None:
    with pytest.raises(JsonRpcException, match="no such file, and no agent session has that id"):
        await command(client, "machine.tag", {"from": "nope-not-a-session"})
    with pytest.raises(JsonRpcException, match="TURN counts from 1 to"):
        await command(client, "machine.tag", {"from": f"{SESSION_ID}:99", "preview": True})
