"""The real Pi, Codex, Claude Code and OpenCode through `machine capture proxy` in front of the scripted endpoint.

One endpoint and one proxy (the real CLI, a child process) for all four agents; each agent runs one prompt that
makes it call its shell tool (`echo hi`) and then answer. Checked: the agent's turn is answered; every exchange the
endpoint received is in the captured log with the request exactly as the endpoint got it; `machine good --from
FILE:LINE` tags the answer; `machine sessions` and `--from last` find the captured session; the agents' key is in
no file of the store.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_lsp
from capture_agents import AgentRun
from capture_helpers import TOOL_PROMPT, Cli
from harness_runs import require
from model_endpoint import ModelEndpoint
from opencode_run import OpenCodeRun
from proxy_run import KEY, ProxyProcess, Upstream, endpoint_bodies, keyed
from pytest_lsp import ClientServerConfig, LanguageClient

from machine_lsp.cli.main import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))

from lsp_helpers import SERVER, close, code_actions, open_doc, run_action, start, store_rows  # noqa: E402

AGENTS = ("pi", "codex", "claude-code", "opencode")
FINAL_ANSWER = "The command printed: hi"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModelEndpoint, ProxyProcess]]:
    with ModelEndpoint() as endpoint:
        project = tmp_path_factory.mktemp("proxied")
        proxy = ProxyProcess(endpoint.base_url, project / ".machine")
        try:
            yield endpoint, proxy
        finally:
            proxy.stop()


@pytest.fixture(scope="module")
def agent_rows(
    proxied: tuple[ModelEndpoint, ProxyProcess], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[list[dict], list[dict]]]:
    """For each agent: (its captured rows, the request bodies the endpoint got from it)."""
    endpoint, proxy = proxied
    out: dict[str, tuple[list[dict], list[dict]]] = {}
    for name in AGENTS:
        require(name)
        kind = OpenCodeRun if name == "opencode" else AgentRun
        run = keyed(kind(name, tmp_path_factory.mktemp(f"proxied-{name}"), Upstream(proxy.url)))  # type: ignore[arg-type]
        rows_before, bodies_before = len(proxy.rows()), len(endpoint_bodies(endpoint))
        done = run.run(TOOL_PROMPT)
        assert "hi" in done.stdout, f"{name} did not answer through the proxy: {done.stdout[-500:]}"
        bodies = endpoint_bodies(endpoint)[bodies_before:]
        rows = proxy.wait_rows(rows_before + len(bodies))[rows_before:]
        out[name] = (rows, bodies)
    return out


@pytest.mark.parametrize("name", AGENTS)
def test_each_exchange_is_recorded_as_the_endpoint_received_it(
    name: str,
    agent_rows: dict[str, tuple[list[dict], list[dict]]],
    proxied: tuple[ModelEndpoint, ProxyProcess],
) -> None:
    rows, bodies = agent_rows[name]
    assert len(rows) == len(bodies) >= 2  # the tool call, then the answer (plus any side request)
    unmatched = list(bodies)
    for row in rows:
        assert row["status"] == 200 and row.get("problem") is None, row.get("problem")
        assert row["request"] in unmatched, f"{name}: a captured request the endpoint never got"
        unmatched.remove(row["request"])
    # Byte for byte: each body the endpoint received is, verbatim, the `request` of one captured line.
    lines = proxied[1].log.read_bytes().splitlines()
    for received in proxied[0].model_requests():
        if received.body in [row["request"] for row in rows]:
            assert any(b'"request":' + received.raw + b"," in line for line in lines), name
    answer = [row for row in rows if row["messages"][-1]["content"] == FINAL_ANSWER]
    assert len(answer) == 1
    messages = answer[0]["messages"]
    calls = [call for m in messages for call in m.get("tool_calls") or []]
    replied = [reply for reply in (r.reply for r in proxied[0].model_requests()) if reply and reply.calls()]
    assert calls and all(
        json.loads(c["function"]["arguments"]) in [r.arguments for r in replied] for c in calls
    )
    assert any(TOOL_PROMPT in str(m["content"]) for m in answer[0]["messages"] if m["role"] == "user")
    assert any(m["role"] == "tool" and "hi" in str(m["content"]) for m in answer[0]["messages"])


@pytest.mark.parametrize("name", AGENTS)
def test_good_from_the_captured_file_tags_the_answer(
    name: str,
    agent_rows: dict[str, tuple[list[dict], list[dict]]],
    proxied: tuple[ModelEndpoint, ProxyProcess],
    cli: Cli,
) -> None:
    rows, _ = agent_rows[name]
    _, proxy = proxied
    everything = proxy.rows()
    line = everything.index(next(r for r in rows if r["messages"][-1]["content"] == FINAL_ANSWER)) + 1
    code, out, err = cli("good", "--from", f"{proxy.log}:{line}", "--trace")
    assert code == 0, err
    record = cli.records()[-1]
    assert record["source"]["harness"] == "proxy" and record["source"]["line"] == line
    assert record["messages"][-1]["content"] == FINAL_ANSWER
    assert any(m.get("tool_calls") for m in record["messages"])
    assert any(TOOL_PROMPT in str(m["content"]) for m in record["messages"] if m["role"] == "user")


def test_sessions_and_from_last_find_the_captured_session(
    agent_rows: dict[str, tuple[list[dict], list[dict]]],
    proxied: tuple[ModelEndpoint, ProxyProcess],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, proxy = proxied
    monkeypatch.setenv("MACHINE_HOME", str(proxy.machine_dir))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(proxy.machine_dir.parent)
    assert main(["sessions", "--harness", "proxy"]) == 0
    listed = capsys.readouterr().out
    session = proxy.rows()[0]["session"]
    assert session[:8] in listed, listed
    assert main(["good", "--from", f"{session[:8]}:1", "--trace"]) == 0, (
        capsys.readouterr().err
    )  # id, as typed
    first = json.loads((proxy.machine_dir / "tagged.jsonl").read_text().splitlines()[-1])
    assert first["source"]["session_id"] == session and first["source"]["line"] == 1
    assert main(["good", "--from", "last", "--trace"]) == 0, capsys.readouterr().err
    record = json.loads((proxy.machine_dir / "tagged.jsonl").read_text().splitlines()[-1])
    assert record["source"]["harness"] == "proxy"
    assert record["source"]["line"] == len(proxy.rows())


def test_no_key_is_stored(
    agent_rows: dict[str, tuple[list[dict], list[dict]]], proxied: tuple[ModelEndpoint, ProxyProcess]
) -> None:
    endpoint, proxy = proxied
    assert all(KEY in r.credential for r in endpoint.model_requests()), "the key was not passed on"
    assert KEY not in proxy.stderr_path.read_text(), "the proxy printed the key"
    files = [path for path in proxy.machine_dir.rglob("*") if path.is_file()]
    assert proxy.log in files
    for path in files:
        data = path.read_bytes()
        assert KEY.encode() not in data, f"{path} holds the agent's key"
        assert b'"authorization"' not in data.lower() and b'"x-api-key"' not in data.lower(), path


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def vscode(lsp_client: LanguageClient, tmp_path: Path):
    await start(lsp_client, "visual-studio-code", tmp_path)
    lsp_client.root = tmp_path  # type: ignore[attr-defined]
    yield
    await close(lsp_client)


async def test_code_actions_tag_a_captured_line_in_the_language_server(
    vscode: LanguageClient,
    agent_rows: dict[str, tuple[list[dict], list[dict]]],
    proxied: tuple[ModelEndpoint, ProxyProcess],
) -> None:
    client = vscode
    _, proxy = proxied
    text = proxy.log.read_text()
    uri = open_doc(client, client.root / "captured.jsonl", text)
    rows, _ = agent_rows["claude-code"]
    final = next(r for r in rows if r["messages"][-1]["content"] == FINAL_ANSWER)
    line0 = proxy.rows().index(final)
    actions = await code_actions(client, uri, line0)
    titles = [a["title"] for a in actions]
    traced = [a for a in actions if "full trace" in a["title"] and "good" in a["title"]]
    assert traced, titles
    await run_action(client, traced[0])
    (record,) = store_rows(client.root)
    assert record["source"]["harness"] == "proxy" and record["source"]["line"] == line0 + 1
    assert record["messages"][-1]["content"] == FINAL_ANSWER
    await asyncio.sleep(0.3)
    assert not client.diagnostics.get(uri)  # a captured log is not chat JSONL to be validated
