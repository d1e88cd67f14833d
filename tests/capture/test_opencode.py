"""OpenCode sessions, read from the database it really wrote and from `opencode export`, as OpenCode sent them.

The session fixture runs the real OpenCode (opencode-ai 1.18.33, scripts/agents/opencode.sh) against the scripted
endpoint: a text answer, then a turn where it really runs `echo hi`. Each turn read from the log must equal what
OpenCode sent to the endpoint (system prompt aside) plus the reply it got. tests/fixtures/opencode/ holds the export
and the requests of one such real run, so the export reader is also checked where the agent is not installed.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from harness_runs import TEXT_PROMPT, TOOL_PROMPT, require
from model_endpoint import ModelEndpoint
from opencode_run import OpenCodeRun

from machine_lsp.cli.main import main
from machine_lsp.core.schema import Message, text_of
from machine_lsp.core.transcripts import load_turns, turn_at
from machine_lsp.core.transcripts.opencode_db import db_sessions, load_db_turns

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "opencode"


class OpenCodeSession(msgspec.Struct):
    run: Any
    endpoint: Any
    database: Path
    session_id: str
    export: Path


@pytest.fixture(scope="module")
def opencode_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenCodeSession]:
    require("opencode")
    with ModelEndpoint() as served:
        root = tmp_path_factory.mktemp("opencode")
        run = OpenCodeRun("opencode", root, served)
        run.run(TEXT_PROMPT)
        run.run(TOOL_PROMPT, resume=True)
        sessions = db_sessions(run.database)
        assert len(sessions) == 1, sessions
        export = run.export(sessions[0].id, root / "export.json")
        yield OpenCodeSession(run, served, run.database, sessions[0].id, export)


def sent(message: dict[str, Any]) -> tuple:
    """A Chat Completions message as the comparison sees it."""
    calls = tuple(
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
        for c in message.get("tool_calls") or []
    )
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    return (message["role"], content or "", calls, message.get("tool_call_id"))


def read(message: Message) -> tuple:
    calls = tuple((c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or [])
    return (message.role, text_of(message), calls, message.tool_call_id)


def agent_requests(requests: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The conversations of the agent's own model calls (the title request offers no tools)."""
    return [
        [m for m in body["messages"] if m["role"] != "system"]
        for body in requests
        if body.get("tools") and body.get("messages")
    ]


def check_turns_are_what_opencode_sent(turns, conversations: list[list[dict[str, Any]]]) -> None:
    # With --trace every model call is a turn: its conversation is exactly the request, then the answer.
    assert len(turns) == len(conversations) == 3
    for turn, request in zip(turns, conversations, strict=True):
        assert [read(m) for m in turn.messages[:-1]] == [sent(m) for m in request]
    assert turns[1].messages[-1].tool_calls is not None
    assert turns[1].messages[-1].tool_calls[0].function.name == "bash"
    assert text_of(turns[2].messages[-1]) == "The command printed: hi"


def test_the_database_opencode_wrote_reads_as_it_sent_it(opencode_session: OpenCodeSession) -> None:
    bodies = [request.body for request in opencode_session.endpoint.requests if request.api == "chat"]
    traced = load_turns(opencode_session.database, trace=True)
    assert traced.adapter == "opencode" and traced.problems == []
    check_turns_are_what_opencode_sent(traced, agent_requests(bodies))
    plain = load_turns(opencode_session.database)
    assert [m.role for m in turn_at(plain, None).messages] == ["user", "assistant", "user", "assistant"]
    last = turn_at(plain, None)
    assert last.source.harness == "opencode" and last.source.session_id == opencode_session.session_id
    assert last.source.model == "m" and last.source.provider == "local"
    assert [turn.line for turn in plain] == [1, 2]  # a database turn's "line" is its number in the session


def test_the_export_reads_like_the_database(opencode_session: OpenCodeSession) -> None:
    from_db = load_db_turns(opencode_session.database, opencode_session.session_id, trace=True)
    from_export = load_turns(opencode_session.export, trace=True)
    assert from_export.adapter == "opencode" and from_export.problems == []
    assert [list(t.messages) for t in from_export] == [list(t.messages) for t in from_db]
    assert [t.source.entry_id for t in from_export] == [t.source.entry_id for t in from_db]


def test_reading_never_writes_the_database(opencode_session: OpenCodeSession) -> None:
    folder = opencode_session.database.parent

    def digests() -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}

    before = digests()
    load_turns(opencode_session.database, trace=True)
    db_sessions(opencode_session.database)
    assert digests() == before


def test_a_database_another_process_holds_locked_is_still_read(opencode_session: OpenCodeSession) -> None:
    locked = threading.Event()
    release = threading.Event()

    def hold() -> None:
        connection = sqlite3.connect(opencode_session.database, timeout=5)
        connection.execute("pragma locking_mode=exclusive")
        connection.execute("begin exclusive")
        connection.execute("create table if not exists machine_lock_probe(x)")  # a real write lock
        locked.set()
        release.wait(30)
        connection.rollback()
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        turns = load_turns(opencode_session.database)
        assert text_of(turn_at(turns, None).messages[-1]) == "The command printed: hi"
    finally:
        release.set()
        holder.join(30)


def test_tag_the_last_opencode_turn_from_the_cli(
    opencode_session: OpenCodeSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["good", "--trace", "--from", str(opencode_session.database)]) == 0
    record = msgspec.json.decode((tmp_path / ".machine" / "tagged.jsonl").read_text().splitlines()[0])
    assert record["source"]["harness"] == "opencode" and record["trace"] is True
    assert [m["role"] for m in record["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    capsys.readouterr()


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OpenCodeRun, list[dict[str, Any]]]]:
    require("opencode")
    with ModelEndpoint() as served:
        run = OpenCodeRun("opencode", tmp_path_factory.mktemp("opencode-compact"), served)
        run.run(TEXT_PROMPT)
        run.run(TOOL_PROMPT, resume=True)
        run.compact(db_sessions(run.database)[0].id)
        run.run("Say goodbye in three words.", resume=True)
        yield run, [r.body for r in served.requests if r.api == "chat"]


def test_after_a_real_compaction_the_context_is_what_opencode_sent(
    compacted: tuple[OpenCodeRun, list[dict[str, Any]]],
) -> None:
    run, bodies = compacted
    conversations = agent_requests(bodies)
    traced = load_turns(run.database, trace=True)
    # The summary is not a turn (OpenCode asked for it with a prompt the log does not keep): 4 turns, 4 agent calls.
    assert len(traced) == len(conversations) == 4
    for turn, request in zip(traced, conversations, strict=True):
        assert [read(m) for m in turn.messages[:-1]] == [sent(m) for m in request]
    last = turn_at(load_turns(run.database), None)
    assert [text_of(m) for m in last.messages][0] == "What did we do so far?"
    assert [m.role for m in last.messages] == ["user", "assistant", "user", "assistant"]


# -- from the stored real run (no agent needed) ------------------------------------------------------------------


def test_the_stored_export_reads_as_opencode_sent_it() -> None:
    requests = json.loads((FIXTURES / "requests.json").read_text())
    turns = load_turns(FIXTURES / "export.json", trace=True)
    check_turns_are_what_opencode_sent(turns, agent_requests(requests))
    plain = load_turns(FIXTURES / "export.json")
    assert [text_of(t.messages[-1]) for t in plain] == [
        'Scripted reply 2 to: "Say hello in five words."',
        "The command printed: hi",
    ]
    text = (FIXTURES / "export.json").read_text().splitlines()
    for turn in plain:  # a turn's line in an export file is where its message's id is
        assert turn.source.entry_id in text[turn.line - 1]


def test_a_json_document_that_is_not_an_export_is_named(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{\n  "name": "package",\n  "version": "1.0.0"\n}\n')
    turns = load_turns(path)
    assert turns == [] and "not an OpenCode session export" in str(turns.problems[0])
