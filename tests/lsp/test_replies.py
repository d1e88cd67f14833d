"""The machine.* replies: every command has a declared struct, the real server's replies match it exactly, and the
schema the VS Code extension's types are generated from is the one checked in."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
from lsp_helpers import SERVER, WAIT, close, command, open_doc, plain, row, setup_client
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from machine_lsp.lsp import replies

CHECKED_IN = Path(__file__).resolve().parents[2] / "editors/vscode/src/generated/replies.schema.json"


def matches(reply: Any, command_id: str) -> type:
    """The declared struct the reply decodes into with nothing lost or added (a round trip gives it back)."""
    errors = []
    for struct in replies.COMMAND_REPLIES[command_id]:
        try:
            typed = msgspec.convert(reply, struct, strict=True)
        except msgspec.ValidationError as exc:
            errors.append(f"{struct.__name__}: {exc}")
            continue
        if msgspec.to_builtins(typed) == reply:
            return struct
        errors.append(f"{struct.__name__}: round trip differs (unknown fields?)")
    raise AssertionError(f"{command_id} reply {reply!r} matches no declared struct: {errors}")


def test_the_checked_in_schema_is_the_generated_one():
    assert json.loads(CHECKED_IN.read_text(encoding="utf-8")) == replies.schema(), (
        "replies changed: run `make -C editors/vscode generate` and commit the result"
    )


def test_declined_job_and_unset_run_fields_encode_as_before():
    declined = replies.JobDeclined(status="declined", message="Training run not started")
    assert replies.to_wire(declined) == {"status": "declined", "message": "Training run not started"}
    assert replies.to_wire(replies.RunEntry(run_dir="/r/x", id="x")) == {"run_dir": "/r/x", "id": "x"}
    assert replies.to_wire({"plain": 1}) == {"plain": 1}


async def test_every_command_reply_matches_its_struct(tmp_path):
    config = ClientServerConfig(server_command=SERVER)
    client: LanguageClient = await config.start()
    try:
        setup_client(client)
        (tmp_path / ".machine").mkdir()
        init = await asyncio.wait_for(
            client.initialize_session(
                types.InitializeParams(
                    capabilities=client_capabilities("visual-studio-code"), root_uri=tmp_path.as_uri()
                )
            ),
            WAIT,
        )
        registered = {
            c for c in init.capabilities.execute_command_provider.commands if c.startswith("machine.")
        }
        assert registered == set(replies.COMMAND_REPLIES)
        uri = open_doc(client, tmp_path / "chat.jsonl", row("q", "a") + "\n" + row("q2", "b") + "\n")
        seen: dict[str, type] = {}

        async def call(command_id: str, *args: Any) -> Any:
            reply = plain(await command(client, command_id, *args))
            seen[command_id] = matches(reply, command_id)
            return reply

        tag = await call("machine.tag", {"uri": uri, "line": 1, "verdict": "good"})
        assert tag["duplicate_of"] is None and tag["store"].endswith("tagged.jsonl")
        await call("machine.tag", {"uri": uri, "line": 1, "verdict": "good"})  # a duplicate: duplicate_of set
        tagged = await call("machine.tagged")
        assert tagged["records"][0]["source"]["line"] == 1
        retagged = await call("machine.retag", {"id": tag["id"], "note": "checked"})
        assert retagged["supersedes"] == tag["id"]
        untagged = await call("machine.untag", {"id": retagged["id"]})
        assert untagged["untag"] is True
        await call("machine.tag", {"uri": uri, "line": 1, "verdict": "good"})  # after the untag: a new record
        data = await call("machine.data")
        assert data["counts"]["good"] == 1
        job = await call("machine.validate", {"uri": uri})
        assert job["status"] == "done"
        sft = await call("machine.train.sft", {})
        assert any(p.endswith("train_sft.py") for p in sft["written"])
        assert sft["message"].endswith(
            "next: Smoke Run, then Train (engine: local)"
        )  # palette titles, not ids
        await call("machine.eval.init", {})
        await call("machine.jobs.list")
        cancel = await call("machine.jobs.cancel", {"job_id": job["job_id"]})
        assert cancel["cancelled"] is False and cancel["job_id"] == job["job_id"]
        info = await call("machine.server.info")
        await call(
            "machine.sessions", {}
        )  # none here: turns and previews are checked in test_sessions_commands
        assert info["heavy_modules"] == []
        from test_jobs import _eval_result

        a, b = tmp_path / "a.json", tmp_path / "b.json"
        a.write_bytes(_eval_result("baseline", ["answer: 2", "answer: 1"]))
        b.write_bytes(_eval_result("step-10", ["answer: 1", "answer: 1"]))
        compare = await call("machine.eval.compare", {"a": str(a), "b": str(b)})
        assert compare["comparison"]["changed"][0]["a_correct"] is False
        client.answers.append("Cancel")  # type: ignore[attr-defined]
        declined = await call("machine.train.run", {})
        assert declined["status"] == "declined"
        question = client.questions[-1].message  # type: ignore[attr-defined]
        assert question.startswith("machine: start the training run? "), question
        client.answers.append("Cancel")  # type: ignore[attr-defined]
        assert (await call("machine.train.preferences", {"objective": "kto"}))["status"] == "declined"
        assert (await call("machine.serve.status", {}))["status"] == "stopped"
        assert (await call("machine.serve.stop", {}))["status"] == "stopped"
        use = await call("machine.use", {"checkpoint": "base", "agent": "claude"})
        assert use["written"] == []
        assert (await call("machine.tinker.status", {}))["status"] == "stopped"
        assert (await call("machine.tinker.stop", {}))["status"] == "stopped"
        assert set(seen) >= set(replies.COMMAND_REPLIES) - {
            # long jobs: the same JobSummary as machine.validate (their runs are tested in tests/jobs)
            "machine.train.smoke",
            "machine.eval.baseline",
            "machine.eval.checkpoint",
            "machine.eval.probe",
            "machine.retrain",  # trains on a store: tests/lsp/test_retrain_command.py
            "machine.sessions.turns",  # needs a session log: tests/lsp/test_sessions_commands.py
            "machine.eval.split",  # needs 12 tagged rows: tests/lsp/test_eval_split.py
            "machine.serve.start",  # loads the model: tests/lsp/test_serving.py
            "machine.tinker.serve",  # starts SkyRL tx; its failure paths: tests/lsp/test_serving.py
        }
    finally:
        await asyncio.wait_for(close(client), WAIT)
        await client.stop()
