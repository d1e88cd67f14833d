"""machine.untag / machine.retag and the contradiction warning of machine.tag, through the real server over stdio;
the replies checked against the structs replies.py declares (the generated TS types)."""

from __future__ import annotations

import pytest
from lsp_helpers import code_actions, command, open_doc, row, run_action, store_rows
from pygls.exceptions import JsonRpcException
from test_replies import matches


async def typed(client, name: str, args: dict) -> dict:
    reply = await command(client, name, args)
    matches(reply, name)
    return reply


def titled(actions: list[dict], title: str) -> dict:
    found = [a for a in actions if a["title"] == title]
    assert found, [a["title"] for a in actions]
    return found[0]


async def test_untag_and_retag_append_records_that_supersede(vscode) -> None:
    client = vscode
    uri = open_doc(client, client.root / "chat.jsonl", row("What is 7 * 8?", "answer: 56") + "\n")
    first = await typed(client, "machine.tag", {"uri": uri, "line": 1, "verdict": "good", "rewrite": "56"})
    plain = await typed(client, "machine.tag", {"uri": uri, "line": 1, "verdict": "good"})
    assert plain["overrides"] == [first["id"]] and "this tag wins" in plain["message"]
    assert any("contradicts record" in m.message for m in client.messages)

    noted = await typed(client, "machine.retag", {"uri": uri, "id": plain["id"], "note": "checked"})
    assert noted["supersedes"] == plain["id"] and noted["note"] == "checked" and noted["untag"] is False
    tagged = await command(client, "machine.tagged", {"uri": uri})
    assert [r["id"] for r in tagged["records"]] == [first["id"], noted["id"]]  # the superseded one is history
    assert [r["prompt"] for r in tagged["records"]] == [
        "What is 7 * 8?"
    ] * 2  # rows with equal answers differ here

    gone = await typed(client, "machine.untag", {"uri": uri, "id": noted["id"][:8]})
    assert gone["untag"] is True and gone["supersedes"] == noted["id"]
    assert [r["id"] for r in (await command(client, "machine.tagged", {"uri": uri}))["records"]] == [
        first["id"]
    ]
    preview = await typed(client, "machine.tag", {"uri": uri, "line": 1, "verdict": "good", "preview": True})
    assert preview["duplicate_of"] is None  # its good tags were untagged: tagging it again is a new record
    rows = store_rows(client.root)
    assert [r["id"] for r in rows] == [first["id"], plain["id"], noted["id"], gone["id"]]  # append-only

    with pytest.raises(JsonRpcException, match="already untagged"):
        await command(client, "machine.untag", {"uri": uri, "id": noted["id"]})
    with pytest.raises(JsonRpcException, match="retag needs --note, --as or --verdict"):
        await command(client, "machine.retag", {"uri": uri, "id": first["id"]})
    with pytest.raises(JsonRpcException, match="verdict must be"):
        await command(client, "machine.retag", {"uri": uri, "id": first["id"], "verdict": "meh"})
    with pytest.raises(JsonRpcException, match="'id' must be a string"):
        await command(client, "machine.untag", {"uri": uri})


async def test_a_tagged_row_offers_untag(vscode) -> None:
    client = vscode
    uri = open_doc(client, client.root / "chat.jsonl", row("What is 7 * 8?", "answer: 56") + "\n")
    assert not [a for a in await code_actions(client, uri, 0) if a["title"].startswith("Untag")]
    tagged = await run_action(client, titled(await code_actions(client, uri, 0), "Tag row as good"))
    actions = await code_actions(client, uri, 0)
    untag = titled(actions, f"Untag row (record {tagged['id'][:8]}, good)")
    reply = await run_action(client, untag)
    assert reply["supersedes"] == tagged["id"] and reply["untag"] is True
    assert not [a for a in await code_actions(client, uri, 0) if a["title"].startswith("Untag")]


async def test_tagging_the_served_copy_of_a_tagged_exchange_says_which_trains(vscode) -> None:
    from machine_lsp.core.schema import Message
    from machine_lsp.serve.served_log import ServedLog, ServedRow

    client = vscode
    uri = open_doc(client, client.root / "chat.jsonl", row("What is 7 * 8?", "answer: 56") + "\n")
    session_copy = await typed(client, "machine.tag", {"uri": uri, "line": 1, "verdict": "good"})
    messages = [
        Message(role="system", content="You are a coding agent."),
        Message(role="user", content="What is 7 * 8?"),
        Message(role="assistant", content="answer: 56"),
    ]
    served = ServedRow(messages, "m", "base", "2026-12-01T10:00:00Z", "openai", "stop")
    path, line = ServedLog(client.root / ".machine").append(served)
    reply = await typed(client, "machine.tag", {"uri": path.as_uri(), "line": line, "verdict": "good"})
    assert f"record {session_copy['id']} tags the same exchange" in reply["message"], reply["message"]
    assert f"from record {reply['id']} (with the system prompt)" in reply["message"]
