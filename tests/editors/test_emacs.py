"""Real headless Emacs 28 + eglot 1.9 (Debian's emacs-nox and elpa-eglot) driving machine-lsp through the
documented setup in editors/emacs/machine-lsp.el."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("emacs_e2e.el")
SETUP = ROOT / "editors" / "emacs" / "machine-lsp.el"
SERVER = [sys.executable, "-m", "machine_lsp.lsp"]


def test_emacs_eglot_end_to_end(
    tmp_path: Path, big_file: Path, train_lines: list[str], require_editor, drive_editor
) -> None:
    emacs = require_editor(
        shutil.which("emacs"), "Emacs is not installed (apt-get install emacs-nox elpa-eglot)"
    )
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)  # eglot's project root
    lines = train_lines
    (project / "train.jsonl").write_text("\n".join(lines) + "\n")
    result_path = tmp_path / "result.json"
    home = tmp_path / "home"
    env = dict(
        os.environ,
        MACHINE_LSP_CMD=json.dumps(SERVER),
        MACHINE_TEST_DIR=str(project),
        MACHINE_BIG_FILE=str(big_file),
        MACHINE_SETUP=str(SETUP),
        MACHINE_RESULT=str(result_path),
        HOME=str(home),
    )
    result, stderr = drive_editor(
        [emacs, "--batch", "-q", "-l", str(SCRIPT)],
        env=env,
        cwd=project,
        result_path=result_path,
        timeout=400,
    )
    assert result["ok"] is True, (json.dumps(result), stderr[-3000:])
    assert result["mode"] == "jsonl-mode"
    # Line 2: the diagnostic covers the role value "User" (columns are right); line 4: the broken JSON.
    diagnostics = {line: (column, text) for line, column, text in result["diagnostics"]}
    assert sorted(diagnostics) == [2, 4]
    assert diagnostics[2][1] == '"User"' and diagnostics[2][0] == lines[1].index('"User"')
    assert result["store_rows"] == 1
    assert result["store_rows_after_note"] == 2
    stored = [json.loads(x) for x in (project / ".machine" / "tagged.jsonl").read_text().splitlines()]
    assert [r["verdict"] for r in stored] == ["good", "good"]
    assert stored[1]["note"] == "too terse" and stored[1]["source"]["line"] == 3
    assert result["offered"] == "machine note (RET to skip): " and "note" not in stored[0]
    assert '"role": "user"' in result["row2_after_fix"]
    assert [d[0] for d in result["diagnostics_after_fix"]] == [4]
    # jobReplies "immediate": the reply is the job id, before the job is done (eglot would time out otherwise).
    assert result["validate_status"] in ("starting", "running") and result["validate_job_id"]
    assert result["validate_reply_seconds"] < 10
    assert result["progress_kinds"] == ["begin", "report", "end"]
    assert not any(w in result["progress_end_message"] for w in ("failed", "cancelled", "crashed")), result
