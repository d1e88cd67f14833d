"""An eval result name from the editor goes through the one name check (issue 9): it never names a path."""

from __future__ import annotations

import pytest
from lsp_helpers import command
from pygls.exceptions import JsonRpcException


@pytest.mark.parametrize("name", ["../../x", "../outside", ".hidden"])
async def test_eval_name_that_escapes_is_refused_before_any_job_starts(vscode, name: str) -> None:
    client = vscode
    (client.root / "eval.jsonl").write_text(
        '{"messages":[{"role":"user","content":"1+1?"}],"expected":"2"}\n'
    )
    with pytest.raises(JsonRpcException, match="not a valid name"):
        await command(client, "machine.eval.baseline", {"data": "eval.jsonl", "name": name, "yes": True})
    assert not list((client.root / ".machine").glob("runs/*"))  # no job ran
    assert not (client.root / "eval_results").exists()
    assert not (client.root.parent / "x.json").exists() and not (client.root.parent / "outside.json").exists()
