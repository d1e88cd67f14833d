"""`machine train promote|rollback|promoted` and `machine serve promoted`'s resolution, on the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.cli.main import main
from machine_lsp.core import promotions
from machine_lsp.serve.checkpoints import CheckpointError, resolve


def _checkpoint(machine: Path, run: str) -> str:
    directory = machine / "runs" / run / "checkpoints" / "step-6"
    directory.mkdir(parents=True)
    address = f"local://{run}/step-6"
    (directory / "manifest.json").write_text(json.dumps({"engine": "local", "address": address}))
    return address


def test_promote_rollback_and_serve_promoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    machine = tmp_path / ".machine"
    machine.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    first, second = _checkpoint(machine, "run-a"), _checkpoint(machine, "run-b")
    assert resolve("promoted", machine).kind == "base"
    assert main(["train", "promote", first]) == 0
    assert main(["train", "promote", second, "--reason", "the gate was too strict"]) == 0
    assert resolve("promoted", machine).address == second
    assert main(["train", "rollback"]) == 0
    assert "promoted is now local://run-a/step-6" in capsys.readouterr().out
    assert resolve("promoted", machine).address == first
    assert main(["train", "promoted"]) == 0
    out = capsys.readouterr().out
    assert f"promoted: {first}" in out and "the gate was too strict" in out
    events = promotions.read_log(machine).events
    assert [(e.action, e.by) for e in events] == [("promote", "hand")] * 2 + [("rollback", "hand")]


def test_promoting_a_missing_checkpoint_is_one_line_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    (tmp_path / ".machine").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    assert main(["train", "promote", "local://nope/step-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no run 'nope'" in err
    assert main(["train", "rollback"]) == 2
    assert not (tmp_path / ".machine" / promotions.PROMOTIONS).exists()
    (tmp_path / ".machine" / promotions.PROMOTIONS).write_text("")
    with pytest.raises(CheckpointError, match="no run"):
        resolve("local://nope/step-1", tmp_path / ".machine")
