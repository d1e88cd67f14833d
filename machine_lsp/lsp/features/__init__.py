"""Language features: one small module per domain, every handler a few lines delegating to plain modules.

Like esbonio's `LanguageFeature`: the server owns the text-document notifications and calls every feature's
document hooks in turn; a feature registers only its own requests in `register` and lists its commands in
`commands` (the server wraps each in the one command entry, `lsp/command_entry.py`). What a feature uses from
another (the job manager, the diagnostics' per-line results) it is given in its constructor, the way esbonio's
setup functions receive the features they declare (server.py does the wiring); features never import each other
for anything else (import-linter's `features-are-independent`). What they share lives here or in the core.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase


#: The `workDoneToken` of the `workspace/executeCommand` request being handled (pygls does not pass it on).
#: Lives here, not in server.py, so that `python -m machine_lsp.lsp.server` does not get two copies.
WORK_DONE_TOKEN: contextvars.ContextVar[types.ProgressToken | None] = contextvars.ContextVar(
    "work_done_token", default=None
)


#: A command's method: the one JSON object argument in, a reply struct out (or an awaitable of one).
CommandMethod = Callable[[dict[str, Any]], Awaitable[Any] | Any]

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

    def __init__(self, server: ServerBase) -> None:
        self.server = server

    def register(self) -> None:
        """Attach `@server.feature` handlers (not the text-document notifications, not commands)."""

    def commands(self) -> dict[str, CommandMethod]:
        """This feature's `machine.*` commands: id -> method (registered through the one command entry)."""
        return {}

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
