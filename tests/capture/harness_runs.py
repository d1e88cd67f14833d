"""What the OpenCode, Letta Code, sessions and Pi capture tests share, under a unique module name (`conftest`
resolves to tests/lsp/conftest.py when the whole suite is collected)."""

from __future__ import annotations

import os

import pytest
from capture_agents import AgentMissing, agent_executable
from capture_helpers import TEXT_PROMPT, TOOL_PROMPT

__all__ = ["TEXT_PROMPT", "TOOL_PROMPT", "require"]


def require(name: str) -> None:
    """Skip (or, with CI=true, fail) when the agent is not installed."""
    try:
        agent_executable(name)
    except AgentMissing as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{exc} (CI must run the real agents)")
        pytest.skip(str(exc))
