"""Every client can complete every action it is offered: clients that prompt vs. clients that do not (eglot, a
plain Neovim setup), job replies for clients with a short request timeout, quick fixes without context."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsp_helpers import (
    SERVER,
    WAIT,
    close,
    code_actions,
    command,
    diagnostics,
    open_doc,
    raw_request,
    row,
    start,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from machine_lsp.core.run_plan import MIN_STEPS

PROMPTS = {"Tag as good with note…", "Tag as good with rewrite…"}
SELECTION = {"Tag selection as good…", "Tag selection as bad…"}
START = time.time()


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=SERVER),
    params=[
        ("neovim@v0.11", {}),
        ("neovim@v0.11", {"clientPrompts": True}),
        ("emacs", {"jobReplies": "immediate"}),
    ],
    ids=["plain", "prompts", "immediate"],
)
async def declared(request, lsp_client: LanguageClient, tmp_path: Path):
    spec, extra = request.param
    # pytest-lsp records no eglot capabilities: eglot is a Neovim-0.11-like push client without prompts.
    await start(lsp_client, "neovim@v0.11", tmp_path, {"machine": {"debounceMs": 10, **extra}})
    lsp_client.spec, lsp_client.root, lsp_client.declared = spec, tmp_path, extra  # type: ignore[attr-defined]
    lsp_client.progress_reports.clear()
    yield
    await close(lsp_client)


async def hover(client: LanguageClient, uri: str, line: int) -> types.Hover | None:
    return await asyncio.wait_for(
        client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line, character=3),
            )
        ),
        WAIT,
    )


async def test_prompt_actions_only_for_clients_that_prompt(declared):
    client = declared
    prompts = bool(client.declared.get("clientPrompts"))
    uri = open_doc(client, client.root / "chat.jsonl", row("2+2?", "5") + "\n")
    titles = {a["title"] for a in await code_actions(client, uri, 0)}
    assert {"Tag row as good", "Tag row as bad"} <= titles
    assert (PROMPTS <= titles) if prompts else not (PROMPTS & titles)
    code = open_doc(client, client.root / "code.py", "def add(a, b):\n    return a + b\n")
    selection = {a["title"] for a in await code_actions(client, code, 0, end=(1, 10))}
    assert selection == (SELECTION if prompts else set())
    shown = await hover(client, uri, 0)
    if prompts:
        assert shown is None  # the client offers "with note…" itself
        return
    # The working path for a client that does not prompt: hover names the command and its arguments; run it.
    text = shown.contents.value
    args = json.loads(text.split("```json\n", 1)[1].split("\n```", 1)[0])
    assert "machine.tag" in text and args == {"uri": uri, "line": 1, "verdict": "good", "note": "…"}
    await command(client, "machine.tag", dict(args, note="off by one"))
    rows = [json.loads(x) for x in (client.root / ".machine" / "tagged.jsonl").read_text().splitlines()]
    assert rows[0]["note"] == "off by one"


async def test_a_missing_note_is_a_plain_error(declared):
    client = declared
    uri = open_doc(client, client.root / "chat.jsonl", row("2+2?", "5") + "\n")
    with pytest.raises(JsonRpcException, match="needs a note") as caught:
        await command(client, "machine.tag", {"uri": uri, "line": 1, "ask": "note"})
    assert "editor asks" not in str(caught.value)


async def test_quick_fixes_without_context_diagnostics(declared):
    """eglot sends only the diagnostics under the cursor (often none): the fixes come from the server's results."""
    client = declared
    bad = '{"messages": [{"role": "User", "content": "hi"}, {"role": "assistant", "content": "yo"}]}'
    uri = open_doc(client, client.root / "train.jsonl", row("q", "a") + "\n" + bad + "\n")
    found = await diagnostics(client, uri)
    assert [d.range.start.line for d in found if d.code] == [1]
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(
            start=types.Position(line=1, character=70), end=types.Position(line=1, character=70)
        ),
        context=types.CodeActionContext(diagnostics=[]),
    )
    actions = await raw_request(client, types.TEXT_DOCUMENT_CODE_ACTION, params) or []
    fixes = [a for a in actions if a.get("kind") == "quickfix"]
    assert fixes and fixes[0]["data"]["line"] == 1
    assert fixes[0]["diagnostics"][0]["code"] == found[0].code  # tied to the published diagnostic
    # The clean row above has none.
    assert not [a for a in await code_actions(client, uri, 0) if a.get("kind") == "quickfix"]


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "big.jsonl"
    template = row("What is 12 + N?", "answer: N")
    path.write_text("".join(template.replace("N", str(i)) + "\n" for i in range(400_000)))
    return path


async def test_job_reply_when_the_client_declared_it(declared, big_file):
    client = declared
    immediate = client.declared.get("jobReplies") == "immediate"
    if not immediate:
        # onEnd (the default): the reply comes with the job's end.
        small = client.root / "small.jsonl"
        small.write_text(row("q", "a") + "\n")
        reply = await command(client, "machine.validate", {"path": str(small)})
        assert reply["status"] == "done"
        return
    started = time.monotonic()
    reply = await command(client, "machine.validate", {"path": str(big_file)})
    assert reply["status"] in ("starting", "running") and reply["job_id"]
    assert time.monotonic() - started < WAIT
    # Progress goes to a token the server created (window/workDoneProgress/create): begin, reports, end.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ends = [e for e in client.job_events if e.event == "end" and e.job_id == reply["job_id"]]
        if ends:
            break
        await asyncio.sleep(0.05)
    assert ends and ends[0].status == "done"
    token = f"machine-job-{reply['job_id']}"
    reports = client.progress_reports[token]
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and isinstance(
        reports[-1], types.WorkDoneProgressEnd
    )
    assert any(isinstance(r, types.WorkDoneProgressReport) for r in reports)


async def test_validate_the_buffer_not_the_file(vscode, tmp_path):
    """ "Validate Current File" sends the buffer: unsaved edits and untitled files are what gets validated."""
    client = vscode
    on_disk = client.root / "chat.jsonl"
    on_disk.write_text(row("q", "a") + "\n")
    unsaved = (
        row("q", "a") + "\n" + '{"messages": [{"role": "User", "content": "hi"}]}\n' + row("x", "y") + "\n"
    )
    reply = await command(client, "machine.validate", {"uri": on_disk.as_uri(), "text": unsaved})
    assert reply["status"] == "done"
    assert reply["result"]["rows"] == 3 and reply["result"]["errors"] >= 1
    assert reply["result"]["file"] == "chat.jsonl"  # named as the buffer, not the server's temporary copy
    assert reply["message"].startswith("chat.jsonl: 3 rows")
    untitled = await command(
        client, "machine.validate", {"uri": "untitled:Untitled-1", "text": row("q", "a") + "\n"}
    )
    assert untitled["status"] == "done" and untitled["result"]["rows"] == 1 and untitled["result"]["ok"]
    # The copies are gone once the jobs have ended.
    assert not [
        p for p in Path(tempfile.gettempdir()).glob("machine-buffer-*.jsonl") if p.stat().st_mtime > START
    ]


async def test_plan_and_sure_failures_are_refused_before_asking(vscode):
    """The question states the run that will happen; a job sure to fail is refused with the reason, not asked."""
    client = vscode
    (client.root / "train.jsonl").write_text((row("q", "a") + "\n") * 3)
    plan = await command(client, "machine.train.run", {"data": "train.jsonl", "plan": True})
    assert plan["status"] == "plan" and plan["problem"] is None
    assert (plan["engine"], plan["data"], plan["rows"]) == ("local", "train.jsonl", 3)
    # epochs unset: the rows size the run (core.run_plan), and the question says how
    assert plan["steps"] >= MIN_STEPS
    assert plan["model"] and plan["message"].startswith("train-run on local: train.jsonl: 3 rows x ")
    assert f"= {plan['steps']} steps of batch 3 (sized from the rows)" in plan["message"]
    for verb, args, reason in [
        ("machine.train.run", {}, "has no good rows yet"),  # an empty store
        ("machine.train.run", {"data": "missing.jsonl"}, "missing.jsonl: no such file"),
        ("machine.eval.baseline", {}, "no eval data"),
        ("machine.eval.checkpoint", {"data": "train.jsonl"}, "needs a checkpoint"),
    ]:
        with pytest.raises(JsonRpcException, match=reason):
            await command(client, verb, args)
    (client.root / "empty.jsonl").write_text("\n")
    with pytest.raises(JsonRpcException, match="empty.jsonl: no held-out rows"):
        await command(client, "machine.eval.baseline", {"data": "empty.jsonl"})
    assert client.questions == []  # nobody was asked about a run sure to fail
    assert not list((client.root / ".machine").glob("runs/*"))  # and nothing ran
    # A checkpoint address decides the engine, as in the job.
    plan = await command(
        client, "machine.eval.checkpoint", {"data": "train.jsonl", "checkpoint": "tinker://r/x", "plan": True}
    )
    assert plan["engine"] == "tinker" and plan["rows"] == 3 and plan["problem"] is None


async def test_user_errors_are_one_line_messages_never_tracebacks(vscode, capfd):
    client = vscode
    uri = open_doc(client, client.root / "chat.jsonl", row("q", "a") + "\n" + '{"messages": []}\n')
    cases = [
        ({"uri": uri, "line": 0}, "line must be a 1-based line number"),  # a bad line
        ({"uri": (client.root / "gone.jsonl").as_uri(), "line": 1}, "no such file"),  # a wrong file
        ({"uri": uri, "line": 2}, "no assistant turn"),  # no turn on that row
    ]
    for args, reason in cases:
        with pytest.raises(JsonRpcException, match=reason) as caught:
            await command(client, "machine.tag", args)
        assert caught.value.data == {"shown": True}  # the client need not show it again
    shown = [m for m in client.messages if m.type == types.MessageType.Error]
    assert len(shown) == len(cases)
    assert all(m.message.startswith("machine: ") and "\n" not in m.message for m in shown)
    await asyncio.sleep(0.5)  # the server's stderr reaches this process through pytest-lsp's forwarder
    assert "Traceback" not in capfd.readouterr().err
