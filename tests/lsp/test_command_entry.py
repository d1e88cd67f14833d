"""Every `machine.*` command goes through the one command entry (lsp/command_entry.py): a user error answers the same
way whichever feature owns the command (tagging, tag edits, sessions, job commands, serving, scaffolds) — an
InvalidParams reply whose message the server showed once as one `window/showMessage` line, `data: {"shown": true}`,
no traceback on stderr. Through the real server over stdio."""

from __future__ import annotations

import asyncio
import re

import pytest
from lsp_helpers import command
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

#: (command, argument object, what the one line says); each owned by a different feature
USER_ERRORS = [
    ("machine.tag", {"verdict": "maybe"}, "verdict must be 'good' or 'bad', not 'maybe'"),
    ("machine.untag", {}, "'id' must be a string (a record id)"),
    ("machine.sessions", {"harness": "not-an-agent"}, "harness must be one of"),
    ("machine.sessions.turns", {}, "missing 'session'"),
    ("machine.validate", {}, "missing 'uri' (a file URI) or 'path' (a path)"),
    ("machine.serve.start", {"port": "eighty"}, "Serve Checkpoint: port must be a number"),
    ("machine.eval.compare", {"a": "nope.json"}, "missing 'b_uri'"),
]


async def test_a_user_error_surfaces_the_same_way_from_every_feature(vscode, capfd):
    client = vscode
    for command_id, args, reason in USER_ERRORS:
        before = len(client.messages)
        with pytest.raises(JsonRpcException, match=re.escape(reason)) as caught:
            await command(client, command_id, args)
        assert caught.value.code == JsonRpcInvalidParams.CODE, command_id
        assert caught.value.data == {"shown": True}, command_id  # the client need not show it again
        await asyncio.sleep(0.1)  # the showMessage notification precedes the reply; let the client take it
        shown = [m for m in client.messages[before:] if m.type == types.MessageType.Error]
        assert [m.message for m in shown] == [f"machine: {caught.value.message}"], command_id
    await asyncio.sleep(0.5)  # the server's stderr reaches this process through pytest-lsp's forwarder
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "command_id", ["machine.tag", "machine.sessions", "machine.retag", "machine.jobs.list"]
)
async def test_a_malformed_argument_list_is_refused_alike(vscode, command_id):
    with pytest.raises(JsonRpcException, match="expected a single JSON object argument") as caught:
        await command(vscode, command_id, {"uri": "file:///x"}, {"extra": True})
    assert caught.value.code == JsonRpcInvalidParams.CODE
    assert caught.value.data == {"shown": True}
