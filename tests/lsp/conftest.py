"""pytest-lsp fixtures: the real machine-lsp server over stdio, with recorded client capabilities."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

# pytest runs with --import-mode=importlib (tests/ is not a package): make the shared helpers importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsp_helpers import CLIENTS, SERVER, close, start  # noqa: E402


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER), params=CLIENTS)
async def client(request, lsp_client: LanguageClient, tmp_path: Path):
    await start(lsp_client, request.param, tmp_path)
    lsp_client.spec = request.param  # type: ignore[attr-defined]
    lsp_client.root = tmp_path  # type: ignore[attr-defined]
    yield
    await close(lsp_client)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def vscode(lsp_client: LanguageClient, tmp_path: Path):
    """One client (VS Code capabilities) for tests that do not depend on the client."""
    await start(lsp_client, "visual-studio-code", tmp_path)
    lsp_client.spec = "visual-studio-code"  # type: ignore[attr-defined]
    lsp_client.root = tmp_path  # type: ignore[attr-defined]
    yield
    await close(lsp_client)
