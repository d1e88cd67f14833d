"""Contradictions in the store (issue 11): flagged by `machine tagged --conflicts`, the last tag wins on export."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from machine_lsp.cli.main import main
from machine_lsp.core.conflicts import resolve
from machine_lsp.core.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHAT = FIXTURES / "chat.jsonl"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_good_then_bad_on_one_turn_exports_nothing_and_says_why(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "bad", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "good", "--from", f"{CHAT}:2")[0] == 0  # another turn: no conflict
    records = Store.open().records()
    assert len(records) == 3  # history is kept
    code, out, err = run(capsys, "export", "sft")
    rows = [msgspec.json.decode(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 1  # only turn 2: the bad tag came last on turn 1
    assert f"left out record {records[0].id} (good" in err and f"record {records[1].id} (bad" in err
    code, out, _ = run(capsys, "tagged", "--conflicts", "--json")
    conflicts = msgspec.json.decode(out)
    assert code == 0 and len(conflicts) == 1
    assert conflicts[0]["kinds"] == ["good and bad"]
    assert conflicts[0]["kept"] == [records[1].id] and conflicts[0]["dropped"] == [records[0].id]
    code, out, _ = run(capsys, "tagged", "--conflicts")
    assert code == 0 and "Contradicting tags (1 turns" in out and "left out" in out and "used" in out


def test_then_good_again_wins_and_pairs_follow_the_last_tag(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for verdict in ("bad", "good"):
        assert run(capsys, verdict, "--from", f"{CHAT}:1")[0] == 0
    code, out, err = run(capsys, "export", "sft")
    assert code == 0 and len(out.splitlines()) == 1 and "left out record" in err


def test_a_rewrite_whose_original_is_also_tagged_good(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "good", "--as", "answer: 56, since 7 x 8 = 56", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "bad", "--from", f"{CHAT}:2")[0] == 0
    assert (
        run(capsys, "good", "--as", "a better answer", "--from", f"{CHAT}:2")[0] == 0
    )  # bad + rewrite agree
    resolution = resolve(Store.open().records())
    assert [c.kinds for c in resolution.conflicts] == [["rewrite of an answer also tagged good"]]
    code, out, err = run(capsys, "export", "sft")
    answers = [msgspec.json.decode(line)["messages"][-1]["content"] for line in out.splitlines()]
    assert answers == ["answer: 56, since 7 x 8 = 56", "a better answer"]
    code, out, _ = run(capsys, "export", "pairs")
    assert (
        code == 0 and len(out.splitlines()) == 2
    )  # each rewrite against its original; no contradiction left


def test_two_different_rewrites_keep_the_later_one(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "good", "--as", "first try", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "good", "--as", "second try", "--from", f"{CHAT}:1")[0] == 0
    resolution = resolve(Store.open().records())
    assert resolution.conflicts[0].kinds == ["different rewrites"]
    assert [r.messages[-1].content for r in resolution.kept] == ["second try"]


def test_no_conflicts_says_so(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0  # a duplicate is not a contradiction
    code, out, _ = run(capsys, "tagged", "--conflicts")
    assert code == 0 and "No contradictions" in out


def test_every_reader_of_good_rows_uses_the_last_tag(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # export_sft also feeds training and `train validate` of the store: a turn whose last tag is bad never trains.
    from machine_lsp.core.export import export_pairs, export_sft

    assert run(capsys, "good", "--from", f"{CHAT}:1")[0] == 0
    assert run(capsys, "bad", "--from", f"{CHAT}:1")[0] == 0
    records = Store.open().records()
    assert export_sft(records) == [] and export_pairs(records) == []
