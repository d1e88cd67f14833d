"""What the capture tests share (imported as a plain module, uniquely named: tests/lsp has a conftest too)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from capture_agents import AgentRun
from model_endpoint import ModelEndpoint

from machine_lsp.cli.main import main

TEXT_PROMPT = "Say hello in five words."
PROJECT_INSTRUCTIONS = "Project rule: answer in plain words."
TOOL_PROMPT = "Please run `echo hi` in the shell and tell me what it printed."
SUBAGENT_PROMPT = "Please use a subagent to greet me."
PARALLEL_PROMPT = "Please run `echo hi twice` in parallel."
AFTER_COMPACT_PROMPT = "What did we do?"


@dataclass
class AgentSession:
    """A session an agent wrote: a text answer then a turn with a real `echo hi` tool call."""

    run: AgentRun
    endpoint: ModelEndpoint
    log: Path


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def line_where(path: Path, predicate: Callable[[dict], bool]) -> int:
    """1-based number of the first line whose JSON object satisfies `predicate`."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip() and predicate(json.loads(line)):
            return number
    raise AssertionError(f"no line of {path} matches")


@dataclass
class Cli:
    """`machine ...` in-process against a store of its own; `records()` reads what was stored."""

    home: Path
    capsys: pytest.CaptureFixture[str]

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def records(self) -> list[dict]:
        path = self.home / "tagged.jsonl"
        return json_lines(path) if path.exists() else []
