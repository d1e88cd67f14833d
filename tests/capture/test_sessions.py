"""`machine sessions` and `--from last` / `--from SESSION-ID[:TURN]`, on sessions the real agents wrote.

One temporary world (HOME, XDG dirs, one project directory) where each installed agent runs once, in turn; the
listing must find every one of them from the directory each harness recorded, newest first, and `--from last` must
tag the turn the newest session ended with.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from capture_agents import AgentMissing, AgentRun, agent_executable
from harness_runs import TEXT_PROMPT
from model_endpoint import ModelEndpoint
from opencode_run import OpenCodeRun

from machine_lsp.cli.main import main
from machine_lsp.core.schema import text_of
from machine_lsp.core.sessions import Homes, find_sessions, resolve_from
from machine_lsp.core.transcripts import TranscriptError, adapter_named

ORDER = (
    "pi",
    "codex",
    "claude-code",
    "qwen-code",
    "opencode",
)  # run in this order: the last one is the newest session


class World(msgspec.Struct):
    root: Path
    project: Path
    env: dict[str, str]
    ran: list[str]
    replies: dict[str, list[str]]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("sessions")
    ran: list[str] = []
    replies: dict[str, list[str]] = {}
    env: dict[str, str] = {}
    with ModelEndpoint() as served:
        for name in ORDER:
            try:
                agent_executable(name)
            except AgentMissing:
                if os.environ.get("CI", "").lower() in ("true", "1"):
                    pytest.fail(f"{name} is not installed (CI must run the real agents)")
                continue
            run = (OpenCodeRun if name == "opencode" else AgentRun)(name, root, served)
            run.run(f"{TEXT_PROMPT} ({name})")
            # The replies that carry this prompt: the answer, and any title or summary the agent asked for (OpenCode's
            # title request runs alongside the answer, so either can be served last).
            replies[name] = [r.text for r in served.replies() if f"five words. ({name})" in r.text]
            env.update(run.env())
            ran.append(name)
            time.sleep(1.1)  # distinct modification times, so "newest first" is well defined
    if "pi" not in ran:
        pytest.skip("Pi is not installed: run `make agents` (scripts/setup-agents.sh)")
    yield World(root, root / "project", env, ran, replies)


@pytest.fixture
def in_world(world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> World:
    for variable in ("HOME", "CODEX_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        if variable in world.env:
            monkeypatch.setenv(variable, world.env[variable])
    for variable in ("CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR", "LETTA_LOCAL_BACKEND_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    monkeypatch.chdir(world.project)
    return world


def test_every_agent_session_of_the_project_is_listed_newest_first(in_world: World) -> None:
    sessions = find_sessions(in_world.project)
    assert [s.harness for s in sessions] == list(reversed(in_world.ran))
    for session in sessions:
        assert session.turns == 1, (session.harness, session.problem)
        assert f"({session.harness})" in session.first_prompt  # OpenCode sends the prompt in quotes
    # A directory below the project belongs to it; another directory does not.
    assert find_sessions(in_world.root / "elsewhere") == []
    assert [s.harness for s in find_sessions(in_world.project, harness="pi")] == ["pi"]


def test_the_cli_lists_them_in_80_columns_and_as_json(
    in_world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    for name in in_world.ran:
        assert name in out, out
    assert main(["sessions", "--json", "--harness", "pi"]) == 0
    listed = msgspec.json.decode(capsys.readouterr().out)
    assert [(s["harness"], s["turns"]) for s in listed] == [("pi", 1)]
    assert listed[0]["cwd"] == str(in_world.project)


def test_from_last_tags_the_newest_sessions_last_turn(
    in_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    newest = in_world.ran[-1]
    assert main(["good", "--from", "last"]) == 0
    store = Path(os.environ["MACHINE_HOME"]) / "tagged.jsonl"
    record = msgspec.json.decode(store.read_text().splitlines()[-1])
    assert record["source"]["harness"] == newest
    assert record["messages"][-1]["content"] in in_world.replies[newest]
    capsys.readouterr()


def test_from_a_session_id_prefix_and_turn(in_world: World) -> None:
    sessions = find_sessions(in_world.project)
    pi = next(s for s in sessions if s.harness == "pi")
    others = [s.id for s in sessions if s is not pi]
    unique = next(
        pi.id[:n] for n in range(4, len(pi.id) + 1) if not any(o.startswith(pi.id[:n]) for o in others)
    )
    turn = resolve_from(f"{unique}:1", in_world.project)
    assert turn is not None and turn.source.harness == "pi" and turn.source.session_id == pi.id
    assert text_of(turn.messages[-1]) in in_world.replies["pi"]
    with pytest.raises(TranscriptError, match="has 1 turns; TURN counts from 1 to 1"):
        resolve_from(f"{pi.id}:2", in_world.project)
    if len(unique) > 4:  # time-ordered ids (UUIDv7) of sessions started together share a prefix: say so
        with pytest.raises(TranscriptError, match="the prefix matches 2 sessions"):
            resolve_from(unique[:-1], in_world.project)
    with pytest.raises(TranscriptError, match="no agent session has that id"):
        resolve_from("zzzz-not-a-session", in_world.project)
    assert resolve_from(str(pi.path), in_world.project) is None  # a file is read by the caller


def test_homes_follow_the_environment(tmp_path: Path) -> None:
    homes = Homes(
        {"HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "cx"), "XDG_DATA_HOME": str(tmp_path / "d")}
    )

    def home(harness: str, of: Homes = homes) -> Path:
        return adapter_named(harness).sessions_home(of)  # type: ignore[attr-defined]

    assert home("pi") == tmp_path / ".pi/agent/sessions" and home("codex") == tmp_path / "cx/sessions"
    assert home("opencode") == tmp_path / "d/opencode/opencode.db"
    assert home("claude-code") == tmp_path / ".claude/projects"
    assert home("letta-code") == tmp_path / ".letta/lc-local-backend/conversations"
    assert home("qwen-code") == tmp_path / ".qwen/projects"
    assert home("gemini-cli") == tmp_path / ".gemini/tmp"
    assert home("claude-code", Homes({"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": "/c"})) == Path(
        "/c/projects"
    )
