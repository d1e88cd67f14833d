"""`machine train eval split` (issue 22): the eval set from the store, from the real CLI in a temp project."""

from __future__ import annotations

from pathlib import Path

import pytest
from anchor_project import tag_rows

from machine_lsp.cli.main import main
from machine_lsp.core.evals import load_cases
from machine_lsp.scaffold.config import load_config


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".machine").mkdir()
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_split_writes_eval_jsonl_and_a_config_naming_it(project: Path, capsys) -> None:
    tag_rows(project, 5)
    assert main(["train", "eval", "split"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "machine: no eval set made: 5 rows are too few for a held-out split (an eval set needs 12: 6 held out "
        "and as many to train on); tag more turns"
    )
    tag_rows(project, 16)
    assert main(["train", "eval", "split"]) == 0
    out = capsys.readouterr().out
    assert (
        "wrote 8 held-out rows to eval.jsonl (2 sessions held out whole); 8 good rows left to train on" in out
    )
    assert (
        load_config(project / "machine.toml").eval.data == "eval.jsonl"
    )  # a new machine.toml, defaults + this
    assert len(load_cases(project / "eval.jsonl")) == 8
    assert (
        main(["train", "eval", "split", "--out", "other.jsonl"]) == 0
    )  # machine.toml keeps naming eval.jsonl
    assert "machine.toml" not in capsys.readouterr().out
    assert load_config(project / "machine.toml").eval.data == "eval.jsonl"
    assert main(["train", "eval", "split"]) == 2
    assert "eval.jsonl already exists; --force" in capsys.readouterr().err


def test_split_never_writes_through_a_link(project: Path, capsys) -> None:
    tag_rows(project, 16)
    target = project / "elsewhere.jsonl"
    target.write_text("mine\n")
    (project / "eval.jsonl").symlink_to(target)
    assert main(["train", "eval", "split", "--force"]) == 2
    assert "cannot write eval.jsonl" in capsys.readouterr().err
    assert target.read_text() == "mine\n"
