"""Logs of agents machine-lsp does not read, and files that are not JSON lines: one line naming what the file looks
like and what is supported, exit 2, nothing stored; for `good`, `bad`, `--trace` and FILE:LINE alike.

The fixtures are small files of our own in the shapes those agents write (Copilot CLI, Kimi Code, Cursor CLI,
Aider); no sniffer may name a harness whose adapter then fails (Copilot's log was called a Pi log; Gemini CLI's
JSONL, called a Claude Code log, is read by its own adapter now: tests/capture/test_gemini_cli.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.cli.main import main


def _jsonl(*objects: dict) -> str:
    return "".join(json.dumps(o) + "\n" for o in objects)


SHAPES = {
    "copilot": (
        "events.jsonl",
        _jsonl(
            {"type": "session.start", "data": {"sessionId": "c1"}, "id": "e1", "parentId": None},
            {"type": "user.message", "data": {"content": "hi"}, "id": "e2", "parentId": "e1"},
            {"type": "assistant.message", "data": {"content": "hello"}, "id": "e3", "parentId": "e2"},
        ),
        "Copilot CLI",
    ),
    "kimi": (
        "wire.jsonl",
        _jsonl(
            {"type": "metadata", "protocol_version": "1.4", "created_at": 1},
            {"type": "turn.prompt", "text": "hi"},
        ),
        "Kimi Code",
    ),
    "cursor": (
        "cursor.jsonl",
        _jsonl(
            {"role": "user", "message": {"content": [{"type": "text", "text": "hi"}]}},
            {"role": "assistant", "message": {"content": [{"type": "text", "text": "hello"}]}},
        ),
        "Cursor CLI",
    ),
    "markdown": (
        ".aider.chat.history.md",
        "\n# aider chat started at 2026-01-01 10:00:00\n\n#### fix the bug\n\nDone.\n" + '{"not": "json"\n',
        "looks like markdown",
    ),
    "aider-llm": ("llm.history", "TO LLM 2026-01-01T10:00:00\n-------\nSYSTEM Act as an expert.\n", "Aider"),
    "text": ("notes.txt", "just some words\nand more words\n", "not a JSON lines file"),
    "events": (
        "events.jsonl",
        _jsonl(
            {"type": "turn.started", "sessionId": "s1", "at": 1},
            {"type": "turn.ended", "sessionId": "s1", "at": 2},
        ),
        "unknown JSONL: the first line has keys type, sessionId, at",
    ),
}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize(
    "how", [("bad",), ("good",), ("good", "--trace"), ("bad", "LINE")], ids=["bad", "good", "trace", "line"]
)
def test_an_unknown_format_gets_one_line_exit_2_and_nothing_stored(
    project: Path, capsys: pytest.CaptureFixture[str], shape: str, how: tuple[str, ...]
) -> None:
    name, text, looks = SHAPES[shape]
    path = project / name
    path.write_text(text)
    source = f"{path}:2" if "LINE" in how else str(path)
    argv = [word for word in how if word != "LINE"]
    code = main([*argv, "--from", source])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    said, _, supported = lines[0].partition("; supported:")
    assert looks in said and supported, lines[0]
    assert "Claude Code" not in said and "Pi session" not in said
    assert ":1:1:" in lines[0]  # the place it was judged: the file's start, not its last line
    assert not (project / ".machine" / "tagged.jsonl").exists()
