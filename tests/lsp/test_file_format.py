"""A whole file in another chat format (a JSON array, ShareGPT, prompt/completion): one diagnostic on line 1 whose
quick fix converts the file to chat JSONL, end to end over the protocol."""

from __future__ import annotations

import json

from lsp_helpers import code_actions, diagnostics, open_doc, raw_request, row
from lsprotocol import types


def apply_lsp_edits(text: str, edits: list[dict]) -> str:
    """Apply LSP edits (ASCII text here, so utf-16 units are code points)."""
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)

    def offset(pos: dict) -> int:
        return min(offsets[min(pos["line"], len(lines))] + pos["character"], len(text))

    for edit in sorted(
        edits, key=lambda e: (e["range"]["start"]["line"], e["range"]["start"]["character"]), reverse=True
    ):
        text = text[: offset(edit["range"]["start"])] + edit["newText"] + text[offset(edit["range"]["end"]) :]
    return text


async def test_json_array_file_gets_one_diagnostic_and_a_converting_quick_fix(client):
    rows = [json.loads(row(f"q{i}", f"a{i}")) for i in range(300)]
    text = json.dumps(rows, indent=2) + "\n"
    uri = open_doc(client, client.root / "train.jsonl", text)
    found = await diagnostics(client, uri)
    assert [(d.code, d.range.start.line) for d in found] == [("file-format", 0)], found[:3]
    actions = await code_actions(client, uri, 0, diags=found)
    fixes = [a for a in actions if a.get("kind") == "quickfix"]
    assert [f["title"] for f in fixes] == ["Convert the file to chat JSONL (300 rows)"]
    action = client.protocol._converter.structure(fixes[0], types.CodeAction)
    resolved = await raw_request(client, types.CODE_ACTION_RESOLVE, action)
    edits = resolved["edit"]["documentChanges"][0]["edits"]
    converted = apply_lsp_edits(text, edits)
    assert [json.loads(line) for line in converted.splitlines()] == rows


async def test_sharegpt_file_gets_one_diagnostic(client):
    line = json.dumps({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})
    uri = open_doc(client, client.root / "train.jsonl", "\n".join([line] * 50) + "\n")
    found = await diagnostics(client, uri)
    assert [(d.code, d.range.start.line) for d in found] == [("file-format", 0)]
    assert "ShareGPT" in found[0].message
