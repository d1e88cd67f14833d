"""Codex (~10k tokens of instructions and tools) and Claude Code (~12k) do not fit SmolLM2's 8192-token context:
the real agents, pointed at `machine serve`, get the API's context-length error and show it as such.

Skipped when the agents are not installed (`make agents`), except in CI, as in the capture suite.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from serve_helpers import ServeProcess

CAPTURE = Path(__file__).resolve().parents[1] / "capture"
if str(CAPTURE) not in sys.path:
    sys.path.insert(0, str(CAPTURE))

from agents import AgentMissing, AgentRun, agent_executable  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.agents]


def _require(name: str) -> None:
    try:
        agent_executable(name)
    except AgentMissing as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{exc} (CI must run the real agents)")
        pytest.skip(str(exc))


@pytest.mark.parametrize(
    ("agent", "shown"),
    [("claude-code", "prompt is too long"), ("codex", "maximum context length is 8192 tokens")],
)
def test_an_agent_whose_prompt_does_not_fit_gets_a_context_length_error(
    agent: str, shown: str, trained_server: ServeProcess, tmp_path: Path
) -> None:
    _require(agent)
    run = AgentRun(agent, tmp_path / agent, SimpleNamespace(base_url=trained_server.root))
    before = len(trained_server.served_rows())
    done = run.run("What is 3 plus 4?", check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert shown in output, output[-3000:]
    assert trained_server.alive()
    assert len(trained_server.served_rows()) == before  # refused requests are not logged
