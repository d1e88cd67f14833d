"""The server as a process: fast initialize, no heavy imports, settings, and bad input that must not kill it."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from lsp_helpers import (
    FIXTURES,
    SERVER,
    WAIT,
    close,
    code_actions,
    command,
    diagnostics,
    open_doc,
    row,
    untyped_request,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

HEAVY = {"torch", "transformers", "tinker", "tinker_cookbook", "peft"}


async def test_initialize_answers_and_the_server_never_imports_heavy_modules(tmp_path):
    config = ClientServerConfig(server_command=SERVER)
    client: LanguageClient = await config.start()
    try:
        (tmp_path / ".machine").mkdir()
        result = await asyncio.wait_for(
            client.initialize_session(
                types.InitializeParams(
                    capabilities=client_capabilities("neovim@v0.11"), root_uri=tmp_path.as_uri()
                )
            ),
            WAIT,
        )
        assert result.capabilities.execute_command_provider is not None
        assert "machine.train.run" in result.capabilities.execute_command_provider.commands
        # A full session: diagnostics, a tag, a hover, a validate job, store queries.
        uri = open_doc(client, tmp_path / "chat.jsonl", row("q", "a") + "\n{bad\n")
        assert await diagnostics(client, uri)
        actions = await code_actions(client, uri, 0)
        await command(client, actions[0]["command"]["command"], *actions[0]["command"]["arguments"])
        session = open_doc(client, tmp_path / "s.jsonl", (FIXTURES / "pi_session_v3.jsonl").read_text())
        await asyncio.wait_for(
            client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=session),
                    position=types.Position(line=9, character=0),
                )
            ),
            WAIT,
        )
        await command(client, "machine.validate", {"uri": uri})
        await command(client, "machine.tagged")
        await command(client, "machine.data")
        await command(client, "machine.train.sft", {})
        await command(client, "machine.eval.init", {})
        await command(client, "machine.jobs.list")
        info = await command(client, "machine.server.info")
        assert info["heavy_modules"] == []
        assert info["position_encoding"] == "utf-8"
        assert info["pid"] == client._server.pid  # the server's own sys.modules, not a job child's
    finally:
        await close(client)
        await client.stop()


async def test_settings_from_init_options_and_did_change_configuration(tmp_path):
    config = ClientServerConfig(server_command=SERVER)
    client: LanguageClient = await config.start()
    try:
        await asyncio.wait_for(
            client.initialize_session(
                types.InitializeParams(
                    capabilities=client_capabilities("neovim@v0.11"),
                    root_uri=tmp_path.as_uri(),
                    initialization_options={"machine": {"trainGlobs": ["**/*.chat"], "debounceMs": 5}},
                )
            ),
            WAIT,
        )
        chat = open_doc(client, tmp_path / "a.chat", "{bad\n")
        plain = open_doc(client, tmp_path / "b.jsonl", "{bad\n")
        assert await diagnostics(client, chat)
        assert await diagnostics(client, plain) == []
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"machine": {"trainGlobs": ["**/*.jsonl"]}})
        )
        assert await diagnostics(client, plain)
        assert await diagnostics(client, chat) == []
    finally:
        await close(client)
        await client.stop()


async def test_big_and_binary_files_get_one_diagnostic(vscode):
    client = vscode
    big = row("q" * 1000, "a" * 1000) + "\n"
    text = big * (50 * 1024 * 1024 // len(big) + 1)  # ~50 MB
    uri = open_doc(client, client.root / "huge.jsonl", text)
    found = await diagnostics(client, uri)
    assert len(found) == 1 and "too large" in found[0].message
    binary = open_doc(client, client.root / "blob.jsonl", "\x00\x01PK\x03\x04" * 100)
    found = await diagnostics(client, binary)
    assert len(found) == 1 and "binary" in found[0].message
    assert (await command(client, "machine.server.info"))["pid"] > 0


async def test_malformed_params_and_unknown_documents(vscode):
    client = vscode
    with pytest.raises(JsonRpcException):
        await untyped_request(client, types.TEXT_DOCUMENT_CODE_ACTION, {"textDocument": 5})
    with pytest.raises(JsonRpcException):
        await untyped_request(client, types.WORKSPACE_EXECUTE_COMMAND, {"command": 42})
    missing = (client.root / "nope.jsonl").as_uri()
    assert await code_actions(client, missing, 0) == []
    hover = await asyncio.wait_for(
        client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=missing),
                position=types.Position(line=0, character=0),
            )
        ),
        WAIT,
    )
    assert hover is None
    with pytest.raises(JsonRpcException):
        await command(client, "machine.validate", {})
    with pytest.raises(JsonRpcException):
        await command(client, "machine.jobs.cancel", {"job_id": "nope"})
    assert (await command(client, "machine.server.info"))["pid"] > 0


def test_console_script_entry_point():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "machine-lsp"]
    assert ep.value == "machine_lsp.lsp.server:main"
    assert sys.executable
    assert json.dumps({})
