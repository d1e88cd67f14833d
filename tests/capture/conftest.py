"""Fixtures that run real coding agents against a scripted model endpoint and hand back the logs they wrote.

`agent_run(name)` gives a fresh AgentRun (temporary HOME etc., its own ModelEndpoint); the session-scoped
`<agent>_session` fixtures run each agent once per test session with two prompts (a text answer, then a turn
that runs `echo hi` through the agent's shell tool) and are shared by the tests that only read the log.

When an agent is not installed the tests skip, saying how to install it, except in CI (env CI=true), where a
missing agent fails: the suite must produce its logs with the real agents there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib (tests/ is not a package): make the helpers importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from capture_agents import AgentMissing, AgentRun, agent_executable  # noqa: E402
from capture_helpers import (  # noqa: E402
    AFTER_COMPACT_PROMPT,
    PARALLEL_PROMPT,
    PROJECT_INSTRUCTIONS,
    SUBAGENT_PROMPT,
    TEXT_PROMPT,
    TOOL_PROMPT,
    AgentSession,
    Cli,
)
from model_endpoint import ModelEndpoint  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(here):
            item.add_marker(pytest.mark.agents)


def _require(name: str) -> None:
    try:
        agent_executable(name)
    except AgentMissing as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{exc} (CI must run the real agents)")
        pytest.skip(str(exc))


@pytest.fixture
def endpoint() -> Iterator[ModelEndpoint]:
    with ModelEndpoint() as served:
        yield served


@pytest.fixture
def agent_run(tmp_path: Path, endpoint: ModelEndpoint) -> Callable[[str], AgentRun]:
    """A fresh agent installation in a temporary world, talking to this test's endpoint."""

    def make(name: str) -> AgentRun:
        _require(name)
        return AgentRun(name, tmp_path / name, endpoint)

    return make


def _two_prompt_session(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    _require(name)
    with ModelEndpoint() as served:
        run = AgentRun(name, tmp_path_factory.mktemp(name), served)
        # Project instructions the harness injects into the context (never a user turn in a tag).
        for instructions in ("AGENTS.md", "CLAUDE.md", "QWEN.md"):
            (run.project / instructions).write_text(PROJECT_INSTRUCTIONS)
        run.run(TEXT_PROMPT)
        run.run(TOOL_PROMPT, resume=True)
        logs = run.logs()
        assert len(logs) == 1, f"{name} wrote {len(logs)} session logs for one resumed session: {logs}"
        yield AgentSession(run, served, logs[0])


@pytest.fixture(scope="session")
def claude_code_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    yield from _two_prompt_session("claude-code", tmp_path_factory)


@pytest.fixture(scope="session")
def codex_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    yield from _two_prompt_session("codex", tmp_path_factory)


@pytest.fixture(scope="session")
def pi_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    yield from _two_prompt_session("pi", tmp_path_factory)


@pytest.fixture(scope="session")
def qwen_code_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    yield from _two_prompt_session("qwen-code", tmp_path_factory)


@pytest.fixture(scope="session")
def claude_code_more_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    """Claude Code with a sub-agent (the Agent tool: a sidechain transcript of its own), two parallel tool calls in
    one reply (each result line hangs off its own tool_use line) and a manual `/compact`."""
    _require("claude-code")
    with ModelEndpoint() as served:
        run = AgentRun("claude-code", tmp_path_factory.mktemp("claude-code-more"), served)
        run.run(TEXT_PROMPT)
        run.run(SUBAGENT_PROMPT, resume=True, allowed_tools=("Agent",))
        run.run(PARALLEL_PROMPT, resume=True)
        run.run("/compact", resume=True)
        run.run(AFTER_COMPACT_PROMPT, resume=True)
        logs = run.logs()
        assert len(logs) == 1, logs
        yield AgentSession(run, served, logs[0])


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    return Cli(tmp_path / ".machine", capsys)


@pytest.fixture(scope="session")
def codex_compact_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    """Codex with a tiny auto-compaction limit, so that it really compacts between the three prompts."""
    _require("codex")
    with ModelEndpoint() as served:
        run = AgentRun("codex", tmp_path_factory.mktemp("codex-compact"), served)
        config = run.home / ".codex" / "config.toml"
        config.write_text("model_auto_compact_token_limit = 12\n" + config.read_text())
        run.run(TEXT_PROMPT)
        run.run(TOOL_PROMPT, resume=True)
        run.run(AFTER_COMPACT_PROMPT, resume=True)
        yield AgentSession(run, served, run.log())
