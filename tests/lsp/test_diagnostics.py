"""Diagnostics as you type, end to end over stdio, for VS Code (pull, utf-16), Neovim 0.9 (push) and 0.11 (pull, utf-8)."""

from __future__ import annotations

import asyncio
import json

from lsp_helpers import change, diagnostics, is_pull, open_doc, row
from lsprotocol import types


async def test_findings_on_open_and_after_edits(client):
    good = row("What is 2+2?", "answer: 4")
    text = (
        "\n".join(
            [
                good,
                '{"messages": [{"role": "User", "content": "hi"}, {"role": "assistant", "content": "yo"}]}',
                "{not json",
            ]
        )
        + "\n"
    )
    uri = open_doc(client, client.root / "train.jsonl", text)
    found = await diagnostics(client, uri)
    by_line = {d.range.start.line: d for d in found}
    assert set(by_line) == {1, 2}, found
    assert by_line[2].severity == types.DiagnosticSeverity.Error
    assert all(d.source == "machine" and d.code for d in found)
    # Fix line 3 (index 2): replace it with a good row; the json error goes away, the role error stays.
    change(client, uri, 2, 2, 0, len("{not json"), row("Hi", "Hello"))
    found = await diagnostics(client, uri)
    assert {d.range.start.line for d in found} == {1}, found
    # Duplicate row: insert a copy of line 0 as a new line 3 -> a dataset-level finding on line 3.
    change(client, uri, 3, 3, 0, 0, good + "\n")
    found = await diagnostics(client, uri)
    assert any(d.code == "duplicate-row" and d.range.start.line == 3 for d in found), found


async def test_positions_with_emoji_and_cjk(client):
    """A finding after astral-plane and CJK characters lands on the same code point in every encoding."""
    prefix = (
        '{"messages": [{"role": "user", "content": "😀😀 漢字"}, {"role": "assistant", "content": "ok"}], '
    )
    text = prefix + '"x": }\n'
    uri = open_doc(client, client.root / "train.jsonl", text)
    found = await diagnostics(client, uri)
    assert len(found) == 1, found
    start = found[0].range.start.character
    encoding = "utf-8" if client.spec == "neovim@v0.11" else "utf-16"
    bad = text.index("}", len(prefix))  # where the JSON breaks, in code points
    expected = (
        len(text[:bad].encode("utf-8")) if encoding == "utf-8" else len(text[:bad].encode("utf-16-le")) // 2
    )
    assert start == expected, (found[0], encoding)


async def test_push_or_pull_never_both(client):
    uri = open_doc(client, client.root / "data.jsonl", "{broken\n")
    found = await diagnostics(client, uri)
    assert found
    result = client.capabilities
    info = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="machine.server.info")
    )
    assert info["diagnostics"] == ("pull" if is_pull(client) else "push")
    if is_pull(client):
        assert uri not in client.diagnostics  # nothing pushed to a pull client
    assert result is not None


async def test_non_matching_files_and_session_logs_are_left_alone(client):
    """Only chat JSONL files get diagnostics. A checked file opened afterwards bounds the wait for push clients."""
    notes = open_doc(client, client.root / "notes.txt", "{not json\n")
    header = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/"}
    session = open_doc(client, client.root / "session.jsonl", json.dumps(header) + "\n{not json\n")
    marker = open_doc(client, client.root / "marker.jsonl", "{broken\n")
    assert await diagnostics(client, marker)
    if is_pull(client):
        assert await diagnostics(client, notes) == []
        assert await diagnostics(client, session) == []
    else:
        assert notes not in client.diagnostics and session not in client.diagnostics


async def test_train_eval_leakage_follows_edits_of_the_other_file(client):
    eval_row = json.dumps(
        {"messages": [{"role": "user", "content": "What is 2+2?"}], "expected": "answer: 4"}
    )
    eval_uri = open_doc(client, client.root / "eval.jsonl", eval_row + "\n")
    assert await diagnostics(client, eval_uri) == []
    train_uri = open_doc(client, client.root / "train.jsonl", row("What is 2+2?", "answer: 4") + "\n")
    found = await diagnostics(client, train_uri)
    assert [d.code for d in found] == ["train-eval-leak"], found
    # Change the eval prompt: the train file's leak goes away without touching the train file.
    client.diagnostics.pop(train_uri, None)  # push clients: wait for the next publish of the train file
    start = eval_row.index("2+2")
    change(client, eval_uri, 2, 0, start, start + 3, "3+3")
    for _ in range(100):  # pull clients re-pull (bounded); push clients get one new publish
        if await diagnostics(client, train_uri) == []:
            break
        await asyncio.sleep(0.05)
    assert await diagnostics(client, train_uri) == []


async def test_incremental_edit_after_emoji(client):
    """An edit whose range is given in client units after astral and CJK characters lands where it should."""
    text = row("😀 漢字 🎉", "fine") + "\n"
    uri = open_doc(client, client.root / "train.jsonl", text)
    assert await diagnostics(client, uri) == []
    line = text.rstrip("\n")
    units = (
        (lambda s: len(s.encode("utf-8")))
        if client.spec == "neovim@v0.11"
        else (lambda s: len(s.encode("utf-16-le")) // 2)
    )
    at = line.index('"role": "assistant"') + len('"role": "')  # after the emoji: `assistant` -> `Assistant`
    change(client, uri, 2, 0, units(line[:at]), units(line[: at + 1]), "A")
    found = await diagnostics(client, uri)
    assert [d.code for d in found] == ["role-unknown"], found
    assert found[0].range.start.character <= units(line[:at]) <= found[0].range.end.character
