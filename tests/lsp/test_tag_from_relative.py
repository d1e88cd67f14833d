"""`machine.tag {from: "FILE:LINE"}` with a relative FILE names a file of the project, wherever the language server
was started: the real server over stdio, run from a folder that is not the project (it inherits the test run's
cwd, the repository). Before, a relative FILE:LINE was looked up in the server's cwd and then taken for a session
id ("no such file, and no agent session has that id")."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_helpers import command, row, store_rows
from pygls.exceptions import JsonRpcException


async def test_a_relative_from_is_read_in_the_project_not_the_servers_cwd(vscode) -> None:
    client, root = vscode, vscode.root
    assert Path.cwd().resolve() != root.resolve()  # the server runs where this test runs
    (root / "c.jsonl").write_text(row("q in the project", "a in the project") + "\n")
    (root / "sub").mkdir()
    (root / "sub" / "d.jsonl").write_text(row("q1", "a1") + "\n" + row("q2", "a2") + "\n")
    await command(client, "machine.tag", {"from": "c.jsonl:1", "verdict": "good"})
    await command(client, "machine.tag", {"from": "sub/d.jsonl:2", "verdict": "bad"})
    rows = store_rows(root)
    assert [r["messages"][-1]["content"] for r in rows] == ["a in the project", "a2"]
    with pytest.raises(JsonRpcException, match="no such file"):
        await command(client, "machine.tag", {"from": "missing.jsonl:1"})
