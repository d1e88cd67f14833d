"""The Run/Cancel question a paid or long job asks before it starts, and what happens when nobody answers.

A question the user never sees (a toast that hid, a client that drops the request) must not leave the command
hanging, nor end it without a word: after `confirmTimeoutS` (settings.py, 600 s by default) the job is not
started, the user is told why with `window/showMessage`, the log says the same, and the reply's message names it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from machine_lsp.lsp.replies import JobPlan
    from machine_lsp.lsp.server_base import ServerBase

logger = logging.getLogger(__name__)

RUN = "Run"
CANCEL = "Cancel"


def question(title: str, plan: JobPlan) -> str:
    return f"machine: start the {title[0].lower() + title[1:]}? {plan.message}."


async def confirm_run(server: ServerBase, title: str, plan: JobPlan) -> str | None:
    """None when the user chose Run; otherwise the reason the job was not started (already told to the user
    when it was not the user's own Cancel)."""
    params = types.ShowMessageRequestParams(
        type=types.MessageType.Warning,
        message=question(title, plan),
        actions=[types.MessageActionItem(title=RUN), types.MessageActionItem(title=CANCEL)],
    )
    timeout = server.settings.confirm_timeout_s
    try:
        answer = await asyncio.wait_for(server.window_show_message_request_async(params), timeout)
    except TimeoutError:
        return _unanswered(server, f"{title} not started: no answer to Run/Cancel within {timeout:g} s")
    except Exception as exc:  # the client failed the request (it cannot ask): say so, start nothing
        return _unanswered(server, f"{title} not started: the editor could not ask Run/Cancel ({exc})")
    if answer is not None and answer.title == RUN:
        return None
    return f"{title} not started"


def _unanswered(server: ServerBase, message: str) -> str:
    logger.warning("%s", message)
    server.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=message))
    return message
