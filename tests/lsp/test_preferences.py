"""Preference training from the editor, through the real server over stdio: *Add a rewrite…* on a bad row turns it
into a pair (machine.retag with the better answer), and `machine.train.preferences` is the training run with a
preference objective (dpo, kto, sft+dpo), which it requires."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_lsp
from lsp_helpers import SERVER, close, code_actions, command, open_doc, row, run_action, start, store_rows
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient
from test_replies import matches

from machine_lsp.core.export import build_pairs
from machine_lsp.core.store import Store


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def neovim(lsp_client: LanguageClient, tmp_path: Path):
    """A client that does not ask the user (no clientPrompts)."""
    await start(lsp_client, "neovim@v0.11", tmp_path)
    lsp_client.spec = "neovim@v0.11"  # type: ignore[attr-defined]
    lsp_client.root = tmp_path  # type: ignore[attr-defined]
    yield
    await close(lsp_client)


def rewrite_actions(actions: list[dict]) -> list[dict]:
    return [a for a in actions if a["title"].startswith("Add a rewrite")]


async def test_add_a_rewrite_on_a_bad_row_makes_a_pair(vscode) -> None:
    client = vscode
    chatty = "Sure! 7 times 8 is 56. Anything else?"
    uri = open_doc(client, client.root / "chat.jsonl", row("What is 7 * 8?", chatty) + "\n")
    assert not rewrite_actions(await code_actions(client, uri, 0))  # not tagged yet
    bad = await command(client, "machine.tag", {"uri": uri, "line": 1, "verdict": "bad"})
    [action] = rewrite_actions(await code_actions(client, uri, 0))
    assert action["title"] == f"Add a rewrite… (record {bad['id'][:8]} becomes a pair)"
    args = action["command"]["arguments"][0]
    assert action["command"]["command"] == "machine.retag"
    assert args == {"uri": uri, "id": bad["id"], "verdict": "good", "ask": "rewrite"}

    with pytest.raises(JsonRpcException, match="needs the better answer"):
        await run_action(client, action)  # a client that did not ask: nothing stored
    assert len(store_rows(client.root)) == 1

    reply = await run_action(client, action, rewrite="answer: 56")
    matches(reply, "machine.retag")
    assert reply["supersedes"] == bad["id"] and reply["verdict"] == "good"
    pairs, counts = build_pairs(Store.open(client.root).records())
    assert counts.pairs == counts.from_rewrites == 1
    comparison = pairs[0].comparison
    assert comparison.completion_A[0]["content"] == "answer: 56"
    assert comparison.completion_B[0]["content"] == chatty
    assert not rewrite_actions(await code_actions(client, uri, 0))  # its standing tag is good now


async def test_no_rewrite_action_for_a_client_that_cannot_ask(neovim) -> None:
    client = neovim
    uri = open_doc(client, client.root / "chat.jsonl", row("What is 2 + 2?", "Four, my friend!") + "\n")
    await command(client, "machine.tag", {"uri": uri, "line": 1, "verdict": "bad"})
    assert not rewrite_actions(await code_actions(client, uri, 0))


async def test_train_with_preferences_plans_the_run_and_requires_an_objective(vscode) -> None:
    client = vscode
    uri = open_doc(client, client.root / "chat.jsonl", row("What is 7 * 8?", "Sure! It is 56.") + "\n")
    with pytest.raises(JsonRpcException, match="'objective' must be one of dpo, kto, sft\\+dpo"):
        await command(client, "machine.train.preferences", {"objective": "sft"})
    with pytest.raises(JsonRpcException, match="has no pairs to train on yet"):
        await command(client, "machine.train.preferences", {"objective": "dpo", "yes": True})
    bad = await command(client, "machine.tag", {"uri": uri, "line": 1, "verdict": "bad"})
    await command(client, "machine.retag", {"uri": uri, "id": bad["id"], "verdict": "good", "rewrite": "56"})
    plan = await command(client, "machine.train.preferences", {"objective": "dpo", "plan": True})
    matches(plan, "machine.train.preferences")
    assert plan["status"] == "plan" and plan["problem"] is None and plan["rows"] == 1
    staged = await command(client, "machine.train.preferences", {"objective": "sft+dpo", "plan": True})
    assert staged["problem"] is None and staged["rows"] == 2  # the good row (sft), then the pair (dpo)
    assert "then" in staged["data"], staged
