"""The real agents against `machine serve` on SmolLM2's 8192-token context: Claude Code (~12.9k tokens of
instructions and tools) gets the Anthropic context-length error and shows it as such. (Codex, ~6.6k with plugins and
apps disabled, fits: its answer through the Responses API, served and logged, is in test_loop_pi.py, after a swap.)

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

from capture_agents import AgentMissing, AgentRun, agent_executable  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.agents]


def _require(name: str) -> None:
    try:
        agent_executable(name)
    except AgentMissing as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{exc} (CI must run the real agents)")
        pytest.skip(str(exc))


def test_claude_code_gets_a_context_length_error_it_shows(
    trained_server: ServeProcess, tmp_path: Path
) -> None:
    _require("claude-code")
    run = AgentRun("claude-code", tmp_path / "claude", SimpleNamespace(base_url=trained_server.root))
    before = len(trained_server.served_rows())
    done = run.run("What is 3 plus 4?", check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert "prompt is too long" in output.lower() and "8191" in output, output[-3000:]
    assert trained_server.alive()
    assert len(trained_server.served_rows()) == before  # refused requests are not logged
