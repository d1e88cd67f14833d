"""Editing tags (issue 22): contradictions warn and say which record wins, repeating a tag after another one
outvoted it is a new word, a note added later is kept, `machine untag` / `machine retag` append records that
supersede, and the export names the record that actually won. Real CLI, real store in a temp project."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from machine_lsp.cli.main import main
from machine_lsp.core.schema import decode_training_row, text_of
from machine_lsp.core.store import Store

CHAT = (
    Path(__file__).resolve().parents[1] / "fixtures" / "chat.jsonl"
)  # line 1: "What is 7 * 8?" -> "answer: 56"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    (tmp_path / ".git").mkdir()
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def trained_answers(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    code, out, err = run(capsys, "export", "sft")
    assert code == 0, err
    rows = [decode_training_row(line) for line in out.splitlines()]
    return [text_of(row.messages[-1]) for row in rows], err


def ids(store: Store) -> list[str]:
    return [record.id for record in store.records()]


def test_a_plain_good_after_a_rewrite_warns_and_names_the_winner(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "good", "--as", "answer: 56 (7 times 8)", "--from", f"{CHAT}:1")[0] == 0
    code, out, err = run(capsys, "good", "--from", f"{CHAT}:1")
    rewrite, good = ids(Store.open())
    assert code == 0 and "Tagged good" in out
    assert f"contradicts record {rewrite} (rewrite" in err and f"record {good} (good) wins" in err, err
    assert trained_answers(capsys)[0] == ["answer: 56"]


def test_repeating_a_tag_another_one_outvoted_is_a_new_record_and_wins(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "good", "--as", "56", "--from", f"{CHAT}:1")[0] == 0
    assert trained_answers(capsys)[0] == ["56"]
    code, out, err = run(
        capsys, "good", "--from", f"{CHAT}:1"
    )  # today: "Already tagged good", rewrite trains
    assert code == 0 and "Already tagged" not in out and "wins" in err, out + err
    assert trained_answers(capsys)[0] == ["answer: 56"]
    # The same rewrite again, and a different one: each is the turn's newest word.
    assert "Already tagged" not in run(capsys, "good", "--as", "56", "--from", f"{CHAT}:1")[1]
    assert trained_answers(capsys)[0] == ["56"]
    code, _, err = run(capsys, "good", "--as", "fifty-six", "--from", f"{CHAT}:1")
    assert code == 0 and "(rewrite) wins" in err
    assert trained_answers(capsys)[0] == ["fifty-six"]
    assert len(Store.open().records()) == 5  # the history is kept


def test_a_note_added_after_a_tag_without_one_is_kept(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    code, out, _ = run(capsys, "good", "checked by hand", "--from", f"{CHAT}:1")
    assert code == 0 and "not added" not in out and "Already tagged" not in out, out
    first, second = Store.open().records()
    assert second.note == "checked by hand" and second.supersedes == first.id
    code, out, _ = run(capsys, "tagged", "--json")
    listed = msgspec.json.decode(out)
    assert [record["id"] for record in listed] == [second.id]  # one tag on the turn, with its note
    assert Store.open().counts().total == 1
    assert run(capsys, "good", "--from", f"{CHAT}:1")[1].startswith("Already tagged good")


def test_untag_takes_a_tag_back_and_keeps_the_history(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "bad", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    bad, good = ids(Store.open())
    code, out, err = run(capsys, "untag", good[:6], "tagged the wrong turn")
    assert code == 0 and f"Untagged record {good}" in out, out + err
    assert f"record {bad} (bad" in err and "now stands" in err, err  # the earlier tag speaks again
    assert trained_answers(capsys)[0] == []
    history = msgspec.json.decode(run(capsys, "tagged", "--json", "--history")[1])
    assert [record.get("untag", False) for record in history] == [False, False, True]
    assert history[2]["supersedes"] == good and history[2]["note"] == "tagged the wrong turn"
    assert [r["id"] for r in msgspec.json.decode(run(capsys, "tagged", "--json")[1])] == [bad]
    code, _, err = run(capsys, "untag", good)
    assert code == 1 and f"record {good} was already untagged by record {history[2]['id']}" in err, err
    code, _, err = run(capsys, "untag", "zzzzzz")
    assert code == 1 and "no record zzzzzz in the store" in err
    # Tagging the turn good again after the untag is a new record, not "Already tagged".
    assert "Already tagged" not in run(capsys, "good", "--from", f"{CHAT}:1")[1]
    assert trained_answers(capsys)[0] == ["answer: 56"]


def test_retag_changes_the_note_the_rewrite_or_the_verdict(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "good", "--as", "56", "--from", f"{CHAT}:1")[0] == 0
    (rewrite,) = ids(Store.open())
    code, out, _ = run(capsys, "retag", rewrite, "--note", "short is better")
    assert code == 0 and f"Retagged record {rewrite} as rewrite" in out
    noted = Store.open().records()[-1]
    assert noted.note == "short is better" and noted.original == "answer: 56" and noted.supersedes == rewrite
    assert run(capsys, "retag", noted.id, "--as", "7 * 8 = 56")[0] == 0
    again = Store.open().records()[-1]
    assert again.original == "answer: 56" and text_of(again.messages[-1]) == "7 * 8 = 56"
    assert again.note == "short is better"
    assert trained_answers(capsys)[0] == ["7 * 8 = 56"]
    assert run(capsys, "retag", again.id, "--verdict", "bad")[0] == 0
    bad = Store.open().records()[-1]
    assert bad.verdict == "bad" and bad.original is None and text_of(bad.messages[-1]) == "answer: 56"
    assert trained_answers(capsys)[0] == []
    code, _, err = run(capsys, "retag", rewrite, "--note", "x")
    assert code == 1 and f"record {rewrite} was already replaced by record {noted.id}" in err, err
    code, _, err = run(capsys, "retag", bad.id, "--verdict", "bad")
    assert code == 1 and "already says that" in err
    assert len(Store.open().records()) == 4


def test_the_export_names_the_record_that_won(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # bad, then good, then a rewrite: the rewrite outvotes the good (the bad agrees with it and stays).
    for argv in (["bad"], ["good"], ["good", "--as", "56"]):
        assert run(capsys, *argv, "--from", f"{CHAT}:1")[0] == 0
    bad, good, rewrite = ids(Store.open())
    answers, err = trained_answers(capsys)
    assert answers == ["56"]
    assert f"left out record {good} (good" in err and f"record {rewrite} (rewrite" in err, err
    assert f"record {bad}" not in err, err


def test_the_store_is_ignored_by_git_from_its_first_tag(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    assert (project / ".machine" / ".gitignore").read_text().splitlines()[-1] == "*"
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=project, capture_output=True, text=True
    )
    assert ".machine" not in status.stdout, status.stdout
    # A user who removes it (to commit the store on purpose) keeps it removed.
    (project / ".machine" / ".gitignore").unlink()
    assert run(capsys, "good", "--from", f"{CHAT}:2")[0] == 0
    assert not (project / ".machine" / ".gitignore").exists()


def test_the_gitignore_is_written_once_and_never_through_a_link(tmp_path: Path) -> None:
    from machine_lsp.core.store import make_machine_dir

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    machine = tmp_path / "p" / ".machine"
    make_machine_dir(machine)
    assert (machine / ".gitignore").read_text().endswith("*\n")
    assert stat_mode(machine / ".gitignore") == 0o644 & ~current_umask()
    other = tmp_path / "q" / ".machine"
    other.mkdir(parents=True)
    (other / ".gitignore").symlink_to(outside)
    make_machine_dir(other)  # a store that exists is left as it is: nothing written, the link not followed
    assert outside.read_text() == "keep me\n"


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def test_log_text_is_shown_escaped_in_the_tagged_table(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = project / "c.jsonl"
    row = {
        "messages": [
            {"role": "user", "content": "hi\x1b]0;pwned\x07"},
            {"role": "assistant", "content": "\x1b[2Jok\u202e"},
        ]
    }
    chat.write_bytes(msgspec.json.encode(row) + b"\n")
    assert run(capsys, "good", "note \x1b[31m", "--from", str(chat))[0] == 0
    code, out, _ = run(capsys, "tagged")
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\u202e" not in out, repr(out)
    assert "hi\\x1b]0;pwned\\x07" in out and "\\x1b[2Jok\\u202e" in out and "note \\x1b[31m" in out, out


def test_one_exchange_tagged_from_the_session_and_from_served_trains_once_with_its_system_prompt(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from machine_lsp.core.schema import Message
    from machine_lsp.serve.served_log import ServedLog, ServedRow

    # What the agent's log holds (no system prompt) and what `machine serve` logged (the whole request).
    session_copy = project / "session.jsonl"
    exchange = [{"role": "user", "content": "What is 7 * 8?"}, {"role": "assistant", "content": "answer: 56"}]
    session_copy.write_bytes(msgspec.json.encode({"messages": exchange}) + b"\n")
    served_messages = [
        Message(role="system", content="You are a coding agent."),
        *msgspec.convert(exchange, list[Message]),
    ]
    served = ServedRow(
        messages=served_messages,
        model="m",
        checkpoint="base",
        time="2026-12-01T10:00:00Z",
        api="openai",
        finish_reason="stop",
    )
    path, line = ServedLog(project / ".machine").append(served)
    assert run(capsys, "good", "--from", str(session_copy))[0] == 0
    code, _, tag_err = run(capsys, "good", "--from", f"{path}:{line}")
    session_record, served_record = Store.open().records()
    assert code == 0 and f"record {session_record.id} tags the same exchange from another copy" in tag_err
    assert f"the export trains it once, from record {served_record.id}" in tag_err, tag_err
    code, out, err = run(capsys, "export", "sft")
    assert code == 0
    [trained] = [decode_training_row(raw) for raw in out.splitlines()]
    assert [m.role for m in trained.messages] == ["system", "user", "assistant"]
    assert f"left out record {session_record.id} (session.jsonl:1)" in err, err
    assert f"record {served_record.id} ({path.name}:{line}) tags the same exchange" in err, err
    # Two different system prompts are two contexts: both train.
    other = ServedRow(
        **{
            **msgspec.structs.asdict(served),
            "messages": [Message(role="system", content="Be terse."), *served_messages[1:]],
        }
    )
    path, line = ServedLog(project / ".machine").append(other)
    assert run(capsys, "good", "--from", f"{path}:{line}")[0] == 0
    assert len(run(capsys, "export", "sft")[1].splitlines()) == 2


def test_two_untags_of_one_record_at_once_store_one(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    (record_id,) = ids(Store.open())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    command = [sys.executable, "-m", "machine_lsp.cli.main", "untag", record_id]
    racers = [
        subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    outcomes = [(racer.wait(timeout=120), racer.stderr.read().decode()) for racer in racers if racer.stderr]
    assert sorted(code for code, _ in outcomes) == [0, 1, 1, 1], outcomes
    assert all("already untagged" in err for code, err in outcomes if code == 1), outcomes
    assert [r.untag for r in Store.open().records()] == [False, True]
