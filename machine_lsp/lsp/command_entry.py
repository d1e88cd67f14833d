"""The one entry every `machine.*` command goes through (tagging, jobs, serving, sessions, tag edits alike).

A user error (`CommandError`: bad line, wrong file, no turn) is one line in the editor (window/showMessage) and in the
error reply, with `data: {"shown": true}` so a client does not show it twice, never a traceback in the log; an
unexpected exception is logged once (its traceback only at debug level) and shown as one line too. A request with
`quiet: true` gets its user error in the reply only, unshown, for a client that words the refusal itself (VS Code asks
to replace an existing eval set).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from machine_lsp.lsp.features import SHOWN, CommandError, CommandMethod, Reported
from machine_lsp.lsp.replies import to_wire

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase

logger = logging.getLogger(__name__)


def command_entry(
    server: ServerBase, command_id: str, method: CommandMethod
) -> Callable[..., Awaitable[Any]]:
    """The handler pygls calls for `command_id`: `method` over the one object argument, its reply on the wire."""

    def show(message: str) -> None:
        server.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))

    async def handler(*arguments: Any) -> Any:
        quiet = len(arguments) == 1 and isinstance(arguments[0], dict) and arguments[0].get("quiet") is True
        try:
            reply = method(_arguments(arguments))
            return to_wire(await reply if inspect.isawaitable(reply) else reply)
        except CommandError as exc:
            exc.message = " ".join(str(exc.message).split())  # one line, whatever the cause's text held
            if quiet:
                raise
            exc.data = SHOWN
            show(f"machine: {exc.message}")
            raise
        except JsonRpcException:
            raise
        except Exception as exc:
            message = f"{command_id} failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
            logger.error("%s", message)
            logger.debug("%s", command_id, exc_info=True)
            show(f"machine: {message}")
            raise Reported(message=message, data=SHOWN) from None

    return handler


def quiet_reported_errors() -> None:
    """pygls logs every error reply with its traceback; the command entry reported these once already."""
    json_rpc_logger = logging.getLogger("pygls.protocol.json_rpc")
    if not any(isinstance(f, _QuietReportedErrors) for f in json_rpc_logger.filters):
        json_rpc_logger.addFilter(_QuietReportedErrors())


class _QuietReportedErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, CommandError | Reported)


def _arguments(args: tuple[Any, ...]) -> dict[str, Any]:
    if not args:
        return {}
    if len(args) == 1 and isinstance(args[0], dict):
        return dict(args[0])
    raise CommandError(message="expected a single JSON object argument")
