"""`machine.eval.split` over stdio (the editor's *Make Eval Set…*): held-out tagged rows become the eval file and
machine.toml's `[eval] data`, so Baseline Eval has its eval set; a run on the store then leaves those rows out
(the real retrain job, one step of the embedded SmolLM2), and only the rows it trained on name it."""

from __future__ import annotations

import asyncio
import json

import pytest
from anchor_project import tag_rows
from lsp_helpers import command
from pygls.exceptions import JsonRpcException

from machine_lsp.core import runs
from machine_lsp.core.evals import load_cases

RUN_WAIT = 900  # a real (tiny) training run on a shared 2-core machine
CONFIG = "# mine\n[train]\nscope = 'off'\nsteps = 1\nsave_every = 0\n\n[eval] # held out\nmax_tokens = 8\n\n[gate]\nenabled = false\n"


async def test_split_writes_the_eval_set_and_names_it(vscode):
    client = vscode
    project = client.root
    tag_rows(project, 4)
    with pytest.raises(
        JsonRpcException, match="4 rows are too few for a held-out split .*an eval set needs 12"
    ):
        await command(client, "machine.eval.split", {})
    plan = await command(client, "machine.eval.baseline", {"plan": True})
    assert plan["problem"].startswith("no eval data")  # what the editor offers Make Eval Set… for
    tag_rows(project, 14)  # 14 rows (the first 4 again: the same turns, trained once)
    (project / "machine.toml").write_text(CONFIG)
    reply = await command(client, "machine.eval.split", {})
    # 14 rows over 4 sessions; at least 6 held out (the gate's min_eval_rows), whole sessions: 2 of them
    assert reply["rows"] == 6 and reply["training"] == 8 and reply["by"] == "session", reply
    assert reply["message"].startswith(
        "wrote 6 held-out rows to eval.jsonl (2 sessions held out whole); 8 good"
    )
    assert any(m.message == f"machine: {reply['message']}" for m in client.messages)
    config = (project / "machine.toml").read_text()
    assert (
        config.startswith("# mine\n") and '[eval] # held out\ndata = "eval.jsonl"\nmax_tokens = 8\n' in config
    )
    assert len(load_cases(project / "eval.jsonl")) == 6
    plan = await command(client, "machine.eval.baseline", {"plan": True})
    assert plan["problem"] is None and "eval.jsonl" in plan["message"], plan
    with pytest.raises(JsonRpcException, match="eval.jsonl already exists; --force"):
        await command(client, "machine.eval.split", {})
    shown = len(client.messages)
    with pytest.raises(JsonRpcException, match="eval.jsonl already exists") as caught:  # quiet: not shown
        await command(client, "machine.eval.split", {"quiet": True})
    assert caught.value.data is None and len(client.messages) == shown
    assert (await command(client, "machine.eval.split", {"force": True}))["rows"] == 6


@pytest.mark.slow
async def test_a_store_run_leaves_the_eval_rows_out(vscode):
    client = vscode
    project = client.root
    tag_rows(project, 14)
    (project / "machine.toml").write_text(CONFIG)
    split = await command(client, "machine.eval.split", {})
    reply = await asyncio.wait_for(command(client, "machine.retrain", {"yes": True}), RUN_WAIT)
    assert reply["status"] == "done", reply
    run_dir = runs.find_run(project / ".machine" / "runs", reply["run_id"])
    (train,) = [d for d in runs.read_manifest(run_dir).data if d.role == "train"]
    assert train.rows == split["training"] == 8
    events = (run_dir / "events.jsonl").read_text()
    assert "6 tagged rows are in the eval set eval.jsonl: held out, not trained on" in events
    held = {
        json.loads(line)["messages"][0]["content"]
        for line in (project / "eval.jsonl").read_text().splitlines()
    }
    tagged = await command(client, "machine.tagged", {})
    for record in tagged["records"]:
        assert record["trained_in"] == ([] if record["prompt"] in held else [reply["run_id"]]), record
