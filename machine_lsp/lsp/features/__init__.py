"""Language features: one small module each, every handler a few lines delegating to the core.

Like esbonio's `LanguageFeature`: the server owns the text-document notifications and calls every feature's
document hooks in turn; a feature registers only its own requests and commands in `register`. Features never
import each other: what they share lives here, in the server, or in the core.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

if TYPE_CHECKING:
    from machine_lsp.lsp.server import MachineLanguageServer


#: The `workDoneToken` of the `workspace/executeCommand` request being handled (pygls does not pass it on).
#: Lives here, not in server.py, so that `python -m machine_lsp.lsp.server` does not get two copies.
WORK_DONE_TOKEN: contextvars.ContextVar[types.ProgressToken | None] = contextvars.ContextVar(
    "work_done_token", default=None
)


#: In an error reply's `data`: the server has shown this message to the user (window/showMessage) already.
SHOWN = {"shown": True}


class CommandError(JsonRpcException):
    """A command that cannot run with these arguments or in this state (reply code: InvalidParams): a user error.
    Shown as one line (window/showMessage), answered with `data: {"shown": true}`, never logged with a traceback."""

    CODE = JsonRpcInvalidParams.CODE


class Reported(JsonRpcInternalError):
    """An error the server has shown and logged once already (a failed job, an unexpected exception)."""


class JobUnavailable(Exception):
    """The job verb does not exist (yet) in this installation, or the server is shutting down."""


class LanguageFeature:
    """Base of every feature: holds the server; overrides only the hooks it needs."""

    def __init__(self, server: MachineLanguageServer) -> None:
        self.server = server

    def register(self) -> None:
        """Attach `@server.feature` / `@server.command` handlers (not the text-document notifications)."""

    def initialized(self) -> None:
        """Called from `initialize`, once client capabilities are known."""

    def document_open(self, uri: str) -> None:
        """A document was opened (the workspace already holds it)."""

    def document_change(self, uri: str) -> None:
        """A document changed (the workspace already applied the change)."""

    def document_close(self, uri: str) -> None:
        """A document was closed: drop everything kept for it."""

    def settings_changed(self) -> None:
        """The settings changed (`server.settings` is the new value)."""

    async def shutdown(self) -> None:
        """The client sent `shutdown`: stop background work."""
