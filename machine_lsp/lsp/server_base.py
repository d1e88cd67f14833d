"""What the features use of the language server: `ServerBase`, pygls's LanguageServer with the settings, the turn
cache, background tasks, the project's root and the open documents. server.py's `MachineLanguageServer` builds on it
and wires the features; the features, the command entry and what they share type against `ServerBase`, so they stay
below server.py (which imports them) and no import runs in a circle.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from machine_lsp import __version__
from machine_lsp.lsp import compat
from machine_lsp.lsp.documents import LineDocument
from machine_lsp.lsp.settings import Settings
from machine_lsp.lsp.turns import TurnCache

HEAVY_MODULES = ("torch", "transformers", "tinker", "tinker_cookbook", "peft")
SYNC_KIND = types.TextDocumentSyncKind.Incremental

logger = logging.getLogger(__name__)


class ServerBase(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "machine-lsp", __version__, protocol_cls=compat.MachineProtocol, text_document_sync_kind=SYNC_KIND
        )
        self.settings = Settings()
        self.turns = TurnCache()
        self.background: set[asyncio.Future[Any]] = set()

    # -- helpers shared by features ------------------------------------------------------------------------------
    def apply_settings(self, options: Any) -> None:
        """Take the valid values of `options`; tell the user about each refused one (defaults kept)."""
        self.settings, problems = self.settings.parse(options)
        for problem in problems:
            logger.warning("%s", problem)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=problem))

    def spawn(self, coroutine: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]:
        """Run `coroutine` in the background: kept until done, its exception logged (never dropped unseen)."""
        task = asyncio.ensure_future(coroutine)
        self.background.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            self.background.discard(finished)
            if not finished.cancelled() and (exc := finished.exception()) is not None:
                logger.error("%s failed", what, exc_info=exc)

        task.add_done_callback(done)
        return task

    def project_start(self, uri: str | None = None) -> Path:
        """Where to look for the project's `.machine/`: the workspace root, else the file's folder, else cwd."""
        root = self.workspace.root_path if compat.has_workspace(self) else None
        if root:
            return Path(root)
        if uri and (path := to_fs_path(uri)):
            return Path(path).parent
        return Path.cwd()

    def open_document(self, uri: str) -> LineDocument | None:
        """The editor's document for `uri`, or None when the client has not opened it."""
        doc = self.workspace.text_documents.get(uri)
        return doc if isinstance(doc, LineDocument) else None

    def open_line(self, uri: str, line0: int) -> tuple[LineDocument, str] | None:
        """The open document for `uri` and its 0-based line `line0`, or None when either is not there."""
        doc = self.open_document(uri)
        if doc is None or not 0 <= line0 < len(doc.lines):
            return None
        return doc, doc.lines[line0]

    def heavy_modules_loaded(self) -> list[str]:
        return [name for name in HEAVY_MODULES if name in sys.modules]
