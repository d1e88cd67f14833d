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
from dataclasses import dataclass
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib (tests/ is not a package): make the helpers importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from agents import AgentMissing, AgentRun  # noqa: E402
from model_endpoint import ModelEndpoint  # noqa: E402

TEXT_PROMPT = "Say hello in five words."
TOOL_PROMPT = "Please run `echo hi` in the shell and tell me what it printed."


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(here):
            item.add_marker(pytest.mark.agents)


def _require(name: str) -> None:
    try:
        from agents import agent_executable

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


@dataclass
class AgentSession:
    """A session an agent wrote: a text answer then a turn with a real `echo hi` tool call."""

    run: AgentRun
    endpoint: ModelEndpoint
    log: Path


def _two_prompt_session(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    _require(name)
    with ModelEndpoint() as served:
        run = AgentRun(name, tmp_path_factory.mktemp(name), served)
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
