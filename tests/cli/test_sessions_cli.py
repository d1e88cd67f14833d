"""`machine sessions` on many sessions started together: ids as long as they need to be, every column at 80
columns, log text that cannot drive the terminal. The logs are the real Pi session fixture under new ids."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from machine_lsp.cli.consoles import console_out
from machine_lsp.cli.main import main
from machine_lsp.cli.sessions_command import _sessions_table
from machine_lsp.core.sessions import Session, resolve_from, unique_prefixes
from machine_lsp.core.transcripts import TranscriptError

PI_SESSION = Path(__file__).resolve().parents[1] / "fixtures" / "pi_session_v3.jsonl"
# UUIDv7 ids of six sessions started within the same millisecond range: the first 17 characters are shared.
IDS = [f"01a23505-7c1e-7{n:03x}-8000-00000000000{n}" for n in range(1, 7)]


def _write_pi_session(home: Path, project: Path, session_id: str, first_prompt: str, updated: int) -> None:
    lines = PI_SESSION.read_text().splitlines()
    header = msgspec.json.decode(lines[0])
    header.update(id=session_id, cwd=str(project))
    body = [msgspec.json.decode(line) for line in lines[1:]]
    for obj in body:
        message = obj.get("message") or {}
        if message.get("role") == "user":
            message["content"] = first_prompt
            break
    folder = home / "sessions" / f"--{str(project).strip('/').replace('/', '-')}--"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    path.write_bytes(b"\n".join(msgspec.json.encode(obj) for obj in [header, *body]) + b"\n")
    os.utime(path, (updated, updated))


@pytest.fixture
def six_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    pi_home = tmp_path / "pi"
    for index, session_id in enumerate(IDS):
        prompt = (
            f"question {index} \x1b]0;pwned\x07\x1b[2J about parse_amount and a long tail of words to cut"
        )
        _write_pi_session(pi_home, project, session_id, prompt, 1_700_000_000 + index)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(pi_home))
    monkeypatch.setenv("MACHINE_HOME", str(project / ".machine"))
    monkeypatch.chdir(project)
    return project


def test_unique_prefixes_are_at_least_8_and_as_long_as_needed() -> None:
    prefixes = unique_prefixes([*IDS, "8f2c1a9e-4b7d-4e1a-9c3f-2d6b5e8a1f00"])
    assert prefixes["8f2c1a9e-4b7d-4e1a-9c3f-2d6b5e8a1f00"] == "8f2c1a9e"
    assert [prefixes[i] for i in IDS] == [i[:18] for i in IDS]
    assert len(set(prefixes.values())) == len(IDS) + 1


def test_the_table_shows_ids_that_tell_sessions_apart_and_every_column_at_80(
    six_sessions: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "turns" in out, out
    for session_id in IDS:
        assert session_id[:18] in out, out
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "\\x1b]0;pwned" in out, out  # shown, escaped
    rows = [line for line in out.splitlines() if "pi " in line]
    assert len(rows) == 6 and all(" 5 " in row for row in rows), out  # the turns column is there, with counts


def test_an_ambiguous_prefix_lists_every_candidate(six_sessions: Path) -> None:
    with pytest.raises(TranscriptError, match="the prefix matches 6 sessions") as caught:
        resolve_from("01a23505", six_sessions)
    for session_id in IDS:
        assert session_id in str(caught.value)
    turn = resolve_from(IDS[4][:18], six_sessions)
    assert turn is not None and turn.source.session_id == IDS[4]


def test_at_80_columns_the_turns_column_stays_when_ids_must_be_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """The widest harness name, a date, four-digit turn counts and ids that share 28 characters: the prompt gets
    its minimum and the id gives way, never the turns column (Rich shrank every column, turns to "tur…")."""
    monkeypatch.setenv("COLUMNS", "80")
    ids = [f"01a23505-7c1e-7000-8000-0000000{n:05d}" for n in range(3)]
    long_ago = 1_700_000_000.0
    sessions = [
        Session("claude-code", session_id, Path("/p/s.jsonl"), "/p", long_ago, 1234, "a prompt " * 12)
        for session_id in ids
    ]
    out = console_out(soft_wrap=False)
    with out.capture() as captured:
        out.print(_sessions_table(sessions, find_all=ids, title="Agent sessions in /p", width=out.width))
    lines = captured.get().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    header = next(line for line in lines if "harness" in line)
    assert header.split()[:4] == ["harness", "updated", "turns", "id"], header
    rows = [line for line in lines if line.startswith("claude-code ")]
    assert len(rows) == 3 and all(" 1234 " in row for row in rows), lines
