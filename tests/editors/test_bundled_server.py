"""The server as the VS Code extension ships it: editors/vscode/bundled/libs on PYTHONPATH, run by a python3 that has
no machine-lsp and no torch. Diagnostics, a tag into the store and a validate job work; the training modules are
absent. Needs the bundle (`npm run bundle` in editors/vscode, part of `npm run package`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))
from lsp_helpers import WAIT, close, command, diagnostics, open_doc, row, start, store_rows  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

BUNDLED = Path(__file__).resolve().parents[2] / "editors/vscode/bundled/libs"
BARE_PYTHON = os.environ.get("MACHINE_E2E_BARE_PYTHON", "/usr/bin/python3")


def _bare_python_lacks_machine_lsp() -> bool:
    if not os.path.isfile(BARE_PYTHON):
        return False
    probe = "import importlib.util as u, sys; sys.exit(1 if u.find_spec('machine_lsp') or u.find_spec('msgspec') else 0)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([BARE_PYTHON, "-s", "-P", "-c", probe], env=env, timeout=30).returncode == 0


# In CI (`make test` builds the bundle before pytest) a missing bundle or bare python is a failure, not a skip.
IN_CI = bool(os.environ.get("CI"))
pytestmark = [
    pytest.mark.editor,
    pytest.mark.skipif(
        not IN_CI and not (BUNDLED / "machine_lsp").is_dir(), reason="no editors/vscode/bundled (make bundle)"
    ),
    pytest.mark.skipif(
        not IN_CI and not _bare_python_lacks_machine_lsp(), reason=f"{BARE_PYTHON} missing or not bare"
    ),
]


def test_the_bundle_and_a_bare_python_are_there() -> None:
    assert (BUNDLED / "machine_lsp").is_dir(), f"no {BUNDLED} (make bundle)"
    assert _bare_python_lacks_machine_lsp(), f"{BARE_PYTHON} missing, or it imports machine_lsp/msgspec"


async def test_a_bare_python_runs_the_bundled_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(BUNDLED)
    config = ClientServerConfig(
        server_command=[BARE_PYTHON, "-s", "-P", "-m", "machine_lsp.lsp.server"], server_env=env
    )
    client: LanguageClient = await config.start()
    try:
        await start(client, "visual-studio-code", tmp_path)
        uri = open_doc(client, tmp_path / "chat.jsonl", row("2+2?", "answer: 4") + "\n{bad\n")
        found = await diagnostics(client, uri)
        assert [d.code for d in found] == ["json-invalid"]
        await command(client, "machine.tag", {"uri": uri, "line": 1, "verdict": "good"})
        assert len(store_rows(tmp_path)) == 1
        job = await command(client, "machine.validate", {"uri": uri})
        assert job["status"] == "done", job
        info = await command(client, "machine.server.info")
        assert info["python"] == BARE_PYTHON or Path(info["python"]).resolve() == Path(BARE_PYTHON).resolve()
        probe = "import importlib.util as u; print(u.find_spec('torch') is None)"
        out = subprocess.run(
            [BARE_PYTHON, "-s", "-P", "-c", probe], env=env, capture_output=True, text=True, timeout=30
        )
        assert out.stdout.strip() == "True", "the bundle must never carry torch"
    finally:
        await asyncio.wait_for(close(client), WAIT)
        await client.stop()
