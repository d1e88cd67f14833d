"""What the editor tests share: the files they open, the big file that keeps a validate job running, the rule for
a missing editor, a HOME of the test's own, and running an editor with its test script to the result it writes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BIG_ROWS = 400_000  # enough rows that validating outlasts the editors' request waits (eglot's is 10 s)


def _write_big(path: Path) -> Path:
    template = json.dumps(
        {
            "messages": [
                {"role": "user", "content": "What is 12 + N?"},
                {"role": "assistant", "content": "answer: N"},
            ]
        }
    )
    with path.open("w") as fh:
        fh.writelines(template.replace("N", str(i)) + "\n" for i in range(BIG_ROWS))
    return path


@pytest.fixture(scope="session")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid training file of BIG_ROWS rows, shared by the tests of a session."""
    return _write_big(tmp_path_factory.mktemp("editor-data") / "big.jsonl")


@pytest.fixture
def train_lines() -> list[str]:
    """train.jsonl's four lines: a good row, a role spelt "User", a row to tag with a note, broken JSON."""
    good = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "answer: 4"}]}
    third = {"messages": [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"}]}
    return [
        json.dumps(good),
        '{"messages": [{"role": "User", "content": "hi"}, {"role": "assistant", "content": "yo"}]}',
        json.dumps(third),
        "{not json",
    ]


def _require(found: str | None, reason: str) -> str:
    if not found:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI must run every editor test (scripts/setup-system.sh installs it)")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def require_editor() -> Callable[[str | None, str], str]:
    """`require_editor(path, reason)`: the editor's path; a missing one skips the test, and fails it in CI."""
    return _require


@pytest.fixture
def home_env(tmp_path: Path) -> dict[str, str]:
    """The environment with HOME and the XDG directories inside this test's tmp_path."""
    return dict(
        os.environ,
        HOME=str(tmp_path),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_DATA_HOME=str(tmp_path / "xdg-data"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
    )


def _drive(
    argv: list[str], *, env: dict[str, str], cwd: Path, result_path: Path, timeout: float
) -> tuple[dict[str, Any], str]:
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result_path.exists(), f"no result (rc {proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(result_path.read_text()), proc.stderr


@pytest.fixture(scope="session")
def drive_editor() -> Callable[..., tuple[dict[str, Any], str]]:
    """`drive_editor(argv, env=, cwd=, result_path=, timeout=)`: run the editor with its test script until it exits;
    the JSON the script wrote to `result_path`, and the editor's stderr."""
    return _drive
