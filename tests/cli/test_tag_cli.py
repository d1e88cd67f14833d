"""`machine good|bad|tagged|data|export` end to end against a real store in a temp project."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from machine_lsp.cli.main import main
from machine_lsp.core.schema import decode_training_row
from machine_lsp.core.sessions import split_file_line
from machine_lsp.core.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PI_SESSION = FIXTURES / "pi_session_v3.jsonl"
CHAT = FIXTURES / "chat.jsonl"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    monkeypatch.setenv("COLUMNS", "220")  # wide enough that no column is cut
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_split_file_line(tmp_path: Path) -> None:
    assert split_file_line("chat.jsonl:12", tmp_path) == (Path("chat.jsonl"), 12)
    assert split_file_line("chat.jsonl", tmp_path) == (Path("chat.jsonl"), None)
    assert split_file_line("chat.jsonl:", tmp_path) == (Path("chat.jsonl"), None)
    assert split_file_line("/a/b:c/x.jsonl", tmp_path) == (Path("/a/b:c/x.jsonl"), None)
    assert split_file_line("notes:3", tmp_path) == (Path("notes"), 3)
    (tmp_path / "notes:3").write_text("")  # a file whose own name ends in :N wins over the line reading
    assert split_file_line("notes:3", tmp_path) == (Path("notes:3"), None)


def test_good_then_tagged_then_data(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "good", "explains the cause", "--from", f"{PI_SESSION}:7")
    assert code == 0 and "Tagged good" in out and "pi_session_v3.jsonl:7" in out and err == ""
    code, out, _ = run(capsys, "bad", "too terse", "--from", f"{CHAT}:2")
    assert code == 0 and "Tagged bad" in out
    code, out, _ = run(capsys, "good", "--as", "answer: 42", "--from", f"{CHAT}:2")
    assert code == 0 and "rewritten" in out
    code, out, _ = run(capsys, "good", "--trace", "--from", f"{PI_SESSION}:12")
    assert code == 0 and "with tool trace" in out

    code, out, _ = run(capsys, "tagged")
    assert code == 0
    assert "Tagged turns (4)" in out and "explains the cause" in out and "rewrite" in out
    code, out, _ = run(capsys, "tagged", "--verdict", "bad", "--json")
    records = msgspec.json.decode(out)
    assert code == 0 and [r["verdict"] for r in records] == ["bad"] and records[0]["note"] == "too terse"

    code, out, _ = run(capsys, "data")
    assert code == 0
    assert str(project / ".machine") in out
    assert "tagged: 4" in out and "good 3" in out and "bad 1" in out
    assert "rewritten 1" in out and "traced 1" in out
    code, out, _ = run(capsys, "data", "--json")
    assert msgspec.json.decode(out)["counts"] == {
        "good": 3,
        "bad": 1,
        "rewritten": 1,
        "traced": 1,
        "total": 4,
    }


def test_the_last_turn_is_tagged_when_no_line_is_given(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "bad", "--from", f"{PI_SESSION}:19")
    assert code == 0 and "pi_session_v3.jsonl:19" in out
    # The last turn is the errored reply at the end (line 21); it has no text, so it is not tagged at all: an empty
    # answer says nothing, and every export refuses it.
    code, out, err = run(capsys, "bad", "--from", str(PI_SESSION))
    assert code == 1 and "pi_session_v3.jsonl:21" in err and "no text" in err, out + err
    assert len(Store.open().records()) == 1


def test_duplicate_is_reported_not_appended(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    code, out, _ = run(capsys, "good", "--from", f"{CHAT}:1")
    assert code == 0 and "Already tagged good" in out and "nothing added" in out
    assert len(Store.open().records()) == 1


def test_good_on_an_aborted_turn_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "good", "--from", f"{PI_SESSION}:15")
    assert code == 1
    assert "pi_session_v3.jsonl:15: stopReason is aborted" in err
    assert not (project / ".machine" / "tagged.jsonl").exists()


def test_image_warning_is_shown(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "bad", "--from", f"{PI_SESSION}:15")
    assert code == 0 and "image (image/png)" in err and "dropped" in err


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("missing.jsonl", "missing.jsonl: no such file"),
        (f"{CHAT}:5", "chat.jsonl:5: no assistant turn at this line"),
        (f"{CHAT}:99", "chat.jsonl:99: line 99 is past the end of the file"),
        ("{dir}", "is a directory"),
        ("{broken}:2", "broken.jsonl:2:14: not valid JSON"),
    ],
)
def test_unusable_input_exits_2_with_a_precise_message(
    project: Path, capsys: pytest.CaptureFixture[str], source: str, expected: str
) -> None:
    (project / "broken.jsonl").write_text('{"messages":[]}\n{"messages":[}\n')
    source = source.format(dir=project, broken=project / "broken.jsonl")
    code, out, err = run(capsys, "good", "--from", source)
    assert code == 2
    assert expected in err
    assert "Traceback" not in err and out == ""


def test_export_sft_and_pairs(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "good", "--from", f"{CHAT}:1")
    run(capsys, "bad", "--from", f"{CHAT}:2")
    run(capsys, "good", "--as", "answer: 42", "--from", f"{CHAT}:2")

    code, out, _ = run(capsys, "export", "sft")
    assert code == 0
    rows = [decode_training_row(line) for line in out.splitlines()]
    assert [row.messages[-1].content for row in rows] == ["answer: 56", "answer: 42"]

    code, _, err = run(capsys, "export", "sft", "--out", "train.jsonl")
    assert code == 0 and "Wrote 2 training rows" in err
    assert (project / "train.jsonl").read_text() == out

    code, out, _ = run(capsys, "export", "pairs")
    [pair] = [msgspec.json.decode(line) for line in out.splitlines()]
    assert (
        set(pair) == {"comparison", "label"} and pair["label"] == "A"
    )  # tinker-cookbook's LabeledComparison
    assert set(pair["comparison"]) == {"prompt_conversation", "completion_A", "completion_B"}
    assert pair["comparison"]["completion_A"][0]["content"] == "answer: 42"
    assert pair["comparison"]["completion_B"][0]["content"] == "The answer is 42."


def test_export_to_a_missing_folder_is_a_clear_error(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "export", "sft", "--out", "no/such/dir/train.jsonl")
    assert code == 2 and "does not exist" in err


def test_data_reports_a_torn_tail(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "good", "--from", f"{CHAT}:1")
    with open(project / ".machine" / "tagged.jsonl", "ab") as handle:
        handle.write(b'{"id":"interrupted","verd')
    before = (project / ".machine" / "tagged.jsonl").read_bytes()
    code, out, err = run(capsys, "data")
    assert code == 0 and "tagged: 1" in out
    assert "torn last line" in err and "skipped" in err
    assert (project / ".machine" / "tagged.jsonl").read_bytes() == before  # `data` never writes
    run(capsys, "bad", "--from", f"{CHAT}:2")  # the next tag moves the torn tail aside
    code, out, err = run(capsys, "data")
    assert code == 0 and "tagged: 2" in out and "tagged.jsonl.torn-" in err


def test_empty_store(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "data")
    assert code == 0 and "nothing tagged yet" in out and "tagged: 0" in out
    code, _, err = run(capsys, "tagged")
    assert code == 0 and "No tagged turns yet" in err
    assert run(capsys, "tagged", "--json")[1].strip() == "[]"
    code, out, err = run(capsys, "export", "pairs")
    assert code == 0 and out == "" and "no preference pairs" in err


def test_the_real_command_line_exits_2_without_a_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "bad.jsonl"
    broken.write_bytes(b'{"messages": [1, 2,]}\n')
    env = {**os.environ, "MACHINE_HOME": str(tmp_path / ".machine"), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", "bad", "--from", f"{broken}:1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"{broken}:1:20: not valid JSON" in done.stderr
    assert "Traceback" not in done.stderr
