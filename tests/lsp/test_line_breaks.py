"""One line model everywhere: every Unicode line-break character through each server entry point, against the CLI.

Lines end at "\\n", "\\r\\n" and a lone "\\r" only (as the validator and editors count them). U+2028, U+2029, U+0085,
\\x0b, \\x0c and \\x1c-\\x1e inside a row are part of that row. Diagnostics on open and on change, *Tag* on line N of
an open and of a closed file, and hover on a session log are compared with `machine train validate` (the validator's
file pass) and `machine good --from F:N` (load_turns + turn_at on the file).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_client import RawClient  # noqa: E402

from machine_lsp.core import validate  # noqa: E402
from machine_lsp.core.lines import split_lines, split_lines_keep_ends  # noqa: E402
from machine_lsp.core.transcripts import load_turns, turn_at  # noqa: E402
from machine_lsp.core.validate import passes  # noqa: E402
from machine_lsp.lsp.documents import LineDocument  # noqa: E402
from machine_lsp.lsp.features.hover import render_turn  # noqa: E402

BREAKS_INSIDE = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
LINE_ENDS = ["\n", "\r\n", "\r"]


def _content(rng: random.Random) -> str:
    return "".join(rng.choice(["a", "b", " ", "é", *BREAKS_INSIDE]) for _ in range(rng.randint(1, 8)))


def _row(rng: random.Random, index: int) -> str:
    messages = [
        {"role": "user", "content": f"q{index} {_content(rng)}"},
        {"role": "assistant", "content": f"a{index} {_content(rng)}"},
    ]
    text = json.dumps({"messages": messages}, ensure_ascii=False)
    if (
        rng.random() < 0.3
    ):  # raw control characters inside a string: invalid JSON, the same finding on both sides
        text = text.replace("\\u000b", "\x0b").replace("\\u000c", "\x0c").replace("\\u001c", "\x1c")
    if rng.random() < 0.1:
        text = text[:-1]  # a broken row
    return text


def chat_file(seed: int) -> str:
    rng = random.Random(seed)
    rows = [_row(rng, index) for index in range(rng.randint(1, 6))]
    if rng.random() < 0.3:
        rows.insert(rng.randrange(len(rows) + 1), rows[0])  # a duplicate
    return "".join(row + rng.choice(LINE_ENDS) for row in rows)


def pi_file(seed: int) -> str:
    rng = random.Random(seed)
    entries = [{"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/"}]
    parent = None
    for index in range(rng.randint(1, 4)):
        for role in ("user", "assistant"):
            entry_id = f"e{index}{role[0]}"
            content = f"{role} {index} {_content(rng)}"
            message = {
                "role": role,
                "content": content if role == "user" else [{"type": "text", "text": content}],
            }
            entries.append(
                {"type": "message", "id": entry_id, "parentId": parent, "timestamp": "t", "message": message}
            )
            parent = entry_id
    return "".join(json.dumps(e, ensure_ascii=False) + rng.choice(LINE_ENDS) for e in entries)


# -- the pure parts ----------------------------------------------------------------------------------------------
@given(st.lists(st.sampled_from(["a", "{", " ", *BREAKS_INSIDE, *LINE_ENDS]), max_size=40).map("".join))
def test_split_rule_is_the_validators(text):
    assert passes.split_lines is split_lines  # the validator splits by the one rule, not a copy of it
    assert [line.rstrip("\r\n") for line in split_lines_keep_ends(text)] == split_lines(text)
    assert "".join(split_lines_keep_ends(text)) == text


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_line_document_edits_keep_the_line_rule(data):
    alphabet = st.sampled_from(["a", "é", "😀", *BREAKS_INSIDE, *LINE_ENDS])
    text = data.draw(st.lists(alphabet, max_size=30).map("".join))
    doc = LineDocument("file:///x.jsonl", text)
    from lsprotocol import types

    for _ in range(data.draw(st.integers(0, 6))):
        lines = doc.lines
        line = data.draw(st.integers(0, len(lines)))
        end_line = data.draw(st.integers(line, len(lines)))
        start = types.Position(line=line, character=data.draw(st.integers(0, 4)))
        end = types.Position(line=end_line, character=data.draw(st.integers(0, 4)))
        if end_line == line and end.character < start.character:
            end = start
        new_text = data.draw(st.lists(alphabet, max_size=6).map("".join))
        doc.apply_change(
            types.TextDocumentContentChangePartial(range=types.Range(start=start, end=end), text=new_text)
        )
        assert doc.lines == split_lines_keep_ends(doc.source)
        assert doc.chars == len(doc.source)


# -- through the real server ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("lines")
    (root / ".machine").mkdir()
    client = RawClient(root)
    client.initialize()
    yield client
    client.close()


def _cli_findings(path: Path) -> list[tuple[int, str]]:
    report = validate.validate_bytes(path.read_bytes(), "auto", file=str(path))
    return sorted((f.line, f.code) for f in report.findings)


def _lsp_findings(diagnostics: list[dict]) -> list[tuple[int, str]]:
    return sorted((d["range"]["start"]["line"] + 1, d["code"]) for d in diagnostics)


def _published(server: RawClient, uri: str, version: int) -> list[dict]:
    params = server.wait_notification(
        "textDocument/publishDiagnostics", lambda p: p["uri"] == uri and p.get("version") == version
    )
    return params["diagnostics"]


def _command(server: RawClient, command: str, args: dict) -> dict:
    answer = server.call("workspace/executeCommand", {"command": command, "arguments": [args]})
    assert "result" in answer, answer
    return answer["result"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6))
def test_diagnostics_and_tags_match_the_cli(server, seed):
    text = chat_file(seed)
    path = server.root / f"rows-{seed}.jsonl"
    path.write_bytes(text.encode("utf-8"))
    uri = server.open(path, text)
    assert _lsp_findings(_published(server, uri, 1)) == _cli_findings(path)
    # A full change to the same text with one more row: same answer as the CLI on the new file.
    changed = text + chat_file(seed + 1)
    path.write_bytes(changed.encode("utf-8"))
    server.notify(
        "textDocument/didChange",
        {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": changed}]},
    )
    assert _lsp_findings(_published(server, uri, 2)) == _cli_findings(path)
    cli_turns = load_turns(path)
    for line in sorted({turn.end_line for turn in cli_turns}):
        tagged = _command(server, "machine.tag", {"uri": uri, "line": line, "verdict": "bad"})
        record = next(
            r for r in _command(server, "machine.tagged", {"uri": uri})["records"] if r["id"] == tagged["id"]
        )
        cli_turn = turn_at(cli_turns, line)
        assert record["answer"] == cli_turn.messages[-1].content[:200]
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    # Not open in the editor: read from disk by the same rule.
    for line in sorted({turn.end_line for turn in cli_turns})[:2]:
        tagged = _command(server, "machine.tag", {"uri": uri, "line": line, "verdict": "bad"})
        assert tagged["duplicate_of"]  # the same conversation as tagged from the open buffer


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6))
def test_hover_on_session_logs_matches_the_cli(server, seed):
    text = pi_file(seed)
    path = server.root / f"pi-{seed}.jsonl"
    path.write_bytes(text.encode("utf-8"))
    uri = server.open(path, text)
    cli_turns = load_turns(path)
    for turn in cli_turns:
        answer = server.call(
            "textDocument/hover",
            {"textDocument": {"uri": uri}, "position": {"line": turn.end_line - 1, "character": 0}},
        )
        assert answer["result"]["contents"]["value"] == render_turn(turn_at(cli_turns, turn.end_line))
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_the_cli_itself_counts_lines_this_way(tmp_path):
    """`machine train validate` on a file with U+2028 inside row 1: row 2 is line 2 and clean."""
    rows = [
        '{"messages": [{"role": "user", "content": "a\u2028b"}, {"role": "assistant", "content": "c"}]}',
        "{bad",
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\r".join(rows) + "\n", encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", "train", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ":2:" in out.stdout + out.stderr and ":3:" not in out.stdout + out.stderr


def test_training_and_eval_readers_use_the_same_rule(tmp_path):
    from machine_lsp.core.evals import load_cases
    from machine_lsp.core.schema import read_training_rows

    messages = [{"role": "user", "content": "a\u2028b\x85c"}, {"role": "assistant", "content": "d\u2029e"}]
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"messages": messages}, ensure_ascii=False) + "\r\n", encoding="utf-8")
    ((line_no, row),) = read_training_rows(path)
    assert line_no == 1 and row.messages[0].content == "a\u2028b\x85c"
    eval_path = tmp_path / "eval.jsonl"
    eval_row = {"messages": messages[:1], "expected": "x\u2028y"}
    eval_path.write_text(json.dumps(eval_row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert len(load_cases(eval_path)) == 1
