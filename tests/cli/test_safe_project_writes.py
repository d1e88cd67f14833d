"""The project files the CLI writes besides the store (scaffolds, machine.toml), by the safe-write rule: a name a
cloned repository commits as a symlink (the old fixed temporary names, a dangling machine.toml) is never written
through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from machine_lsp.cli.main import main
from machine_lsp.tinker_server import project


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "repo" / ".machine").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "repo")
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    return tmp_path / "repo"


def test_eval_init_never_writes_through_planted_links(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = repo.parent / "victim.txt"
    victim.write_text("precious\n")
    (repo / ".eval.py.tmp").symlink_to(victim)  # the temporary name the scaffold writer used
    (repo / "machine.toml").symlink_to(
        repo.parent / "created-outside.toml"
    )  # dangling: "missing" to exists()
    assert main(["train", "eval", "init"]) == 0, capsys.readouterr().err
    assert victim.read_text() == "precious\n"
    assert not (repo.parent / "created-outside.toml").exists()
    assert "def " in (repo / "eval.py").read_text() and not (repo / "eval.py").is_symlink()
    assert "machine.toml" not in capsys.readouterr().out  # left alone: it is the repository's link


def test_a_linked_scaffold_target_is_refused_with_one_line(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = repo.parent / "victim.py"
    victim.write_text("precious\n")
    (repo / "eval.py").symlink_to(victim)
    assert main(["train", "eval", "init", "--force"]) != 0
    err = capsys.readouterr().err
    assert "eval.py is a symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert victim.read_text() == "precious\n"


def test_the_tinker_base_url_never_writes_through_a_planted_temp(repo: Path) -> None:
    victim = repo.parent / "victim.txt"
    victim.write_text("precious\n")
    (repo / f".machine.toml.tmp-{os.getpid()}").symlink_to(victim)  # the old temporary name
    project.set_base_url(repo, "http://127.0.0.1:8000")
    assert victim.read_text() == "precious\n"
    assert project.configured_base_url(repo) == "http://127.0.0.1:8000"
