"""A real Claude Code log in the real language server: code actions on its lines tag through machine.tag."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest_lsp
from capture_compare import record_conversation, sent_conversation, text_turns
from capture_helpers import AgentSession
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))

from lsp_helpers import SERVER, close, code_actions, open_doc, run_action, start, store_rows  # noqa: E402


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def vscode(lsp_client: LanguageClient, tmp_path: Path):
    await start(lsp_client, "visual-studio-code", tmp_path)
    lsp_client.root = tmp_path  # type: ignore[attr-defined]
    yield
    await close(lsp_client)


def titled(actions: list[dict], title: str) -> dict:
    match = [a for a in actions if a["title"] == title]
    assert match, [a["title"] for a in actions]
    return match[0]


async def test_code_actions_and_hover_on_a_real_claude_code_log(
    vscode: LanguageClient, claude_code_session: AgentSession
) -> None:
    client = vscode
    text = claude_code_session.log.read_text()
    uri = open_doc(client, client.root / "session.jsonl", text)
    final = next(
        r
        for r in claude_code_session.endpoint.model_requests("anthropic")
        if r.reply and r.reply.text == "The command printed: hi"
    )
    line0 = next(
        i
        for i, line in enumerate(text.splitlines())
        if '"type":"assistant"' in line and "The command printed: hi" in line
    )
    hover = await asyncio.wait_for(
        client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line0, character=3),
            )
        ),
        20,
    )
    assert "The command printed: hi" in hover.contents.value and "claude-opus" in hover.contents.value
    actions = await code_actions(client, uri, line0)
    titles = [a["title"] for a in actions]
    assert "Tag entry as good" in titles and "Tag as good with full trace" in titles
    await run_action(client, titled(actions, "Tag entry as good"))
    await run_action(client, titled(actions, "Tag as good with full trace"))
    plain, traced = store_rows(client.root)
    assert plain["messages"] == text_turns(sent_conversation(final))
    assert record_conversation(traced["messages"]) == sent_conversation(final)
    assert traced["source"]["harness"] == "claude-code" and traced["source"]["line"] == line0 + 1
    # Bookkeeping lines (queue operations, attachments, api-request records) offer no tag action.
    assert not await code_actions(client, uri, 0)
    # The log is not chat JSONL: no "messages missing" diagnostics on its lines.
    await asyncio.sleep(0.3)
    assert not client.diagnostics.get(uri)
    assert json.loads(text.splitlines()[0])["type"] == "queue-operation"


async def test_code_actions_on_a_real_qwen_code_log(
    vscode: LanguageClient, qwen_code_session: AgentSession
) -> None:
    """Qwen Code's log (a uuid tree like Claude Code's): actions on its lines tag as qwen-code, no diagnostics."""
    client = vscode
    text = qwen_code_session.log.read_text()
    uri = open_doc(client, client.root / "qwen.jsonl", text)
    final = next(
        r
        for r in qwen_code_session.endpoint.model_requests("chat")
        if r.reply and r.reply.text == "The command printed: hi"
    )
    line0 = next(
        i
        for i, line in enumerate(text.splitlines())
        if '"type":"assistant"' in line and "The command printed: hi" in line
    )
    actions = await code_actions(client, uri, line0)
    await run_action(client, titled(actions, "Tag entry as good"))
    await run_action(client, titled(actions, "Tag as good with full trace"))
    plain, traced = store_rows(client.root)
    assert plain["messages"] == text_turns(sent_conversation(final))
    assert record_conversation(traced["messages"]) == sent_conversation(final)
    assert traced["source"]["harness"] == "qwen-code" and traced["source"]["line"] == line0 + 1
    assert not await code_actions(client, uri, 1)  # a system (telemetry) line offers no tag action
    await asyncio.sleep(0.3)
    assert not client.diagnostics.get(uri)
