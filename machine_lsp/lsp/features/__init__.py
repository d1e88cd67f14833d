"""Language features: one small module each, every handler a few lines delegating to the core."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from machine_lsp.lsp.server import MachineLanguageServer


#: The `workDoneToken` of the `workspace/executeCommand` request being handled (pygls does not pass it on).
#: Lives here, not in server.py, so that `python -m machine_lsp.lsp.server` does not get two copies.
WORK_DONE_TOKEN: contextvars.ContextVar[types.ProgressToken | None] = contextvars.ContextVar(
    "work_done_token", default=None
)


class LanguageFeature:
    """Base of every feature: holds the server and registers its handlers in `register`."""

    def __init__(self, server: MachineLanguageServer) -> None:
        self.server = server

    def register(self) -> None:
        """Attach `@server.feature` / `@server.command` handlers."""

    def initialized(self) -> None:
        """Called from `initialize`, once client capabilities are known."""
