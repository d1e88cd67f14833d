"""`machine.retrain` over stdio with the real server and the real job (the embedded SmolLM2, one step): the plan
counts the anchors; with `[train] scope = "off"` the run adds none, and the reply is the job's summary; every tagged
row then names the run in `machine.tagged` (trained_in)."""

from __future__ import annotations

import asyncio

import pytest
from anchor_project import tag_rows
from lsp_helpers import command
from lsprotocol import types

from machine_lsp.core import runs

RUN_WAIT = 900  # a real (tiny) training run on a shared 2-core machine


@pytest.mark.slow
async def test_retrain_command_plans_anchors_and_scope_off_adds_none(vscode) -> None:
    client = vscode
    project = client.root
    tag_rows(project, 8)
    (project / "machine.toml").write_text(
        "[train]\nscope = 'off'\nsteps = 1\nsave_every = 0\n[gate]\nenabled = false\n"
    )
    plan = await command(client, "machine.retrain", {"scope": "auto", "plan": True})
    assert "12 rows (8 + 4 anchors)" in plan["message"], plan
    token = "retrain-token"
    client.progress_reports[token] = []
    reply = await asyncio.wait_for(
        client.workspace_execute_command_async(
            types.ExecuteCommandParams(
                command="machine.retrain", arguments=[{"yes": True}], work_done_token=token
            )
        ),
        RUN_WAIT,
    )
    assert reply["status"] == "done", reply
    assert reply["message"] == reply["result"]["summary"]
    assert reply["message"].startswith(
        "Retrained on 8 tagged rows with no anchor rows (scope = off: no anchors): 1 step,"
    )
    assert "The gate did not run (gate skipped: the gate is off" in reply["message"]
    manifest = runs.read_manifest(runs.find_run(project / ".machine" / "runs", reply["run_id"]))
    assert manifest.anchors is not None and manifest.anchors["added"] == 0
    assert manifest.anchors["note"] == "scope = off: no anchors"
    assert [d.role for d in manifest.data] == ["train"]
    messages = [
        r.message or "" for r in client.progress_reports[token] if isinstance(r, types.WorkDoneProgressReport)
    ]
    assert any(m.startswith("step 1/1") for m in messages), messages
    # The tagged-rows view's "trained in" column: every tagged row names this run (its manifest's row keys).
    assert manifest.data[0].rows == 8 and len(manifest.data[0].row_keys) == 8
    tagged = await command(client, "machine.tagged", {})
    assert [r["trained_in"] for r in tagged["records"]] == [[reply["run_id"]]] * 8
