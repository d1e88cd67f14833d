"""Code actions end to end: tag rows and session entries into the real store, tag selections, quick fixes."""

from __future__ import annotations

import asyncio
import json

import pytest
from lsp_helpers import (
    FIXTURES,
    code_actions,
    command,
    diagnostics,
    open_doc,
    raw_request,
    row,
    run_action,
    store_rows,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException


def titled(actions: list[dict], title: str) -> dict:
    match = [a for a in actions if a["title"] == title]
    assert match, [a["title"] for a in actions]
    return match[0]


async def test_tag_row_good_then_duplicate_is_reported(client):
    uri = open_doc(client, client.root / "chat.jsonl", row("What is 7 * 8?", "answer: 56") + "\n")
    actions = await code_actions(client, uri, 0)
    titles = [a["title"] for a in actions]
    prompts = ["Tag as good with note…", "Tag as good with rewrite…"]
    # Only the client that asks the user (VS Code declares clientPrompts) is offered the actions that need a note.
    assert (
        titles[:4]
        == ["Tag row as good", "Tag row as bad", *prompts][: 4 if client.spec == "visual-studio-code" else 2]
    )
    assert client.spec == "visual-studio-code" or not set(prompts) & set(titles)
    assert "Tag as good with full trace" not in titles  # no tool calls in this row
    # A client that asks the user is offered a note on the plain tags too (skippable: `offer`, not `ask`).
    offered = titled(actions, "Tag row as good")["command"]["arguments"][0].get("offer")
    assert offered == ("note" if client.spec == "visual-studio-code" else None)
    reply = await run_action(client, titled(actions, "Tag row as good"))
    assert reply["duplicate_of"] is None
    rows = store_rows(client.root)
    assert len(rows) == 1 and rows[0]["verdict"] == "good"
    assert rows[0]["source"]["line"] == 1 and rows[0]["messages"][-1]["content"] == "answer: 56"
    assert any("Tagged good" in m.message for m in client.messages)
    again = await run_action(client, titled(actions, "Tag row as good"))
    assert again["duplicate_of"] == rows[0]["id"]
    assert len(store_rows(client.root)) == 1
    assert any("Already tagged" in m.message for m in client.messages)


async def test_note_rewrite_and_trace(vscode):
    client = vscode
    tool_row = json.dumps(
        {
            "messages": [
                {"role": "user", "content": "List files"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
                {"role": "assistant", "content": "There is a.txt"},
            ]
        }
    )
    uri = open_doc(client, client.root / "chat.jsonl", row("2+2?", "5") + "\n" + tool_row + "\n")
    first = await code_actions(client, uri, 0)
    with pytest.raises(JsonRpcException, match="needs a note"):
        await run_action(client, titled(first, "Tag as good with note…"))
    await run_action(client, titled(first, "Tag as good with note…"), note="short and right")
    await run_action(client, titled(first, "Tag as good with rewrite…"), rewrite="4")
    second = await code_actions(client, uri, 1)
    await run_action(client, titled(second, "Tag as good with full trace"))
    rows = store_rows(client.root)
    assert [r.get("note", "") for r in rows] == ["short and right", "", ""]
    assert rows[1]["original"] == "5" and rows[1]["messages"][-1]["content"] == "4"
    assert rows[2]["trace"] is True and any(m["role"] == "tool" for m in rows[2]["messages"])


async def test_session_log_entry_actions_and_hover(client):
    text = (FIXTURES / "pi_session_v3.jsonl").read_text()
    uri = open_doc(client, client.root / "session.jsonl", text)
    line = next(i for i, x in enumerate(text.splitlines()) if '"id":"b2f4000a"' in x)
    hover = await asyncio.wait_for(
        client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line, character=5),
            )
        ),
        20,
    )
    assert "parse_amount" in hover.contents.value and "**assistant**" in hover.contents.value
    actions = await code_actions(client, uri, line)
    assert "Tag as good with full trace" in [a["title"] for a in actions]
    await run_action(client, titled(actions, "Tag entry as good"))
    rows = store_rows(client.root)
    assert len(rows) == 1
    assert rows[0]["source"]["kind"] == "session_log" and rows[0]["source"]["entry_id"] == "b2f4000a"
    # A non-assistant line offers no tag action.
    assert not await code_actions(client, uri, 0)


async def test_tag_selection_in_any_file(vscode):
    client = vscode
    text = "def add(a, b):\n    return a + b  # 😀 sums\n"
    uri = open_doc(client, client.root / "code.py", text)
    actions = await code_actions(client, uri, 0, end=(1, 20))
    action = titled(actions, "Tag selection as good…")
    with pytest.raises(JsonRpcException, match="needs the prompt"):
        await run_action(client, action)
    await run_action(client, action, prompt="Write add()")
    rows = store_rows(client.root)
    assert rows[0]["source"]["kind"] == "selection"
    assert rows[0]["messages"][0] == {"role": "user", "content": "Write add()"}
    # utf-16: 20 units on line 1 = "    return a + b  # 😀" minus one unit of the emoji's surrogate pair... exact slice:
    assert rows[0]["messages"][1]["content"].startswith("def add(a, b):\n    return a + b")
    assert "def add" in rows[0]["source"]["context"]


async def test_quick_fix_resolves_lazily_and_applies(client):
    bad = '{"messages": [{"role": "User", "content": "hi"}, {"role": "assistant", "content": "yo"}]}'
    uri = open_doc(client, client.root / "train.jsonl", bad + "\n")
    found = await diagnostics(client, uri)
    assert found
    actions = await code_actions(client, uri, 0, diags=found)
    fixes = [a for a in actions if a.get("kind") == "quickfix"]
    assert fixes, actions
    fix = fixes[0]
    assert "edit" not in fix or fix["edit"] is None  # every recorded client resolves edits lazily
    action = client.protocol._converter.structure(fix, types.CodeAction)
    resolved = await raw_request(client, types.CODE_ACTION_RESOLVE, action)
    edits = resolved["edit"]["documentChanges"][0]["edits"]
    line = bad
    for edit in sorted(edits, key=lambda e: e["range"]["start"]["character"], reverse=True):
        start, end = edit["range"]["start"]["character"], edit["range"]["end"]["character"]
        line = line[:start] + edit["newText"] + line[end:]
    assert '"role": "user"' in line


async def test_unknown_and_malformed_commands_get_errors(vscode):
    client = vscode
    with pytest.raises(JsonRpcException, match="unknown command"):
        await command(client, "machine.nope")
    with pytest.raises(JsonRpcException):
        await command(client, "machine.tag", "not an object")
    with pytest.raises(JsonRpcException, match="no such file"):
        await command(client, "machine.tag", {"uri": (client.root / "missing.jsonl").as_uri(), "line": 1})
    with pytest.raises(JsonRpcException, match="verdict"):
        await command(client, "machine.tag", {"uri": "file:///x", "verdict": "meh"})
    info = await command(client, "machine.server.info")  # still up
    assert info["pid"] > 0
