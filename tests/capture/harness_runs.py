"""What this helper's capture tests share (OpenCode, Letta Code, sessions, Pi), importable under a unique name.

(`from conftest import ...` resolves to tests/lsp/conftest.py when the whole suite is collected, since tests/lsp is
on pytest's pythonpath; these tests import from here instead.)
"""

from __future__ import annotations

import os

import pytest
from agents import AgentMissing, agent_executable

TEXT_PROMPT = "Say hello in five words."
TOOL_PROMPT = "Please run `echo hi` in the shell and tell me what it printed."


def require(name: str) -> None:
    """Skip (or, with CI=true, fail) when the agent is not installed."""
    try:
        agent_executable(name)
    except AgentMissing as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{exc} (CI must run the real agents)")
        pytest.skip(str(exc))
