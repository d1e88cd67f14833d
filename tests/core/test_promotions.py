"""The promotions record: a stack replayed from .machine/promotions.jsonl, written with the store's file rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from machine_lsp.core import promotions


def test_promote_and_rollback_replay_as_a_stack(tmp_path: Path) -> None:
    machine = tmp_path / ".machine"
    machine.mkdir()
    assert promotions.read_log(machine).current() is None
    promotions.promote(machine, "local://r1/step-8", by="gate", reason="better", run_id="r1")
    promotions.promote(machine, "local://r2/step-8", by="hand", reason="by hand")
    log = promotions.read_log(machine)
    assert log.current() == "local://r2/step-8" and log.events[1].previous == "local://r1/step-8"
    back = promotions.rollback(machine)
    assert (back.checkpoint, back.previous) == ("local://r1/step-8", "local://r2/step-8")
    assert promotions.read_log(machine).current() == "local://r1/step-8"
    assert promotions.rollback(machine).checkpoint == "base"
    with pytest.raises(promotions.PromotionError, match="nothing is promoted"):
        promotions.rollback(machine)
    assert len((machine / promotions.PROMOTIONS).read_text().splitlines()) == 4  # every event on the record


def test_a_symlink_or_fifo_is_refused_and_never_followed(tmp_path: Path) -> None:
    machine = tmp_path / ".machine"
    machine.mkdir()
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    (machine / promotions.PROMOTIONS).symlink_to(target)
    with pytest.raises(promotions.PromotionError, match="symbolic link"):
        promotions.promote(machine, "local://r/step-1", by="hand", reason="x")
    assert target.read_text() == ""
    (machine / promotions.PROMOTIONS).unlink()
    os.mkfifo(machine / promotions.PROMOTIONS)
    with pytest.raises(promotions.PromotionError, match="FIFO"):
        promotions.read_log(machine)


def test_a_bad_line_is_reported_not_dropped(tmp_path: Path) -> None:
    machine = tmp_path / ".machine"
    machine.mkdir()
    promotions.promote(machine, "local://r/step-1", by="hand", reason="x")
    with open(machine / promotions.PROMOTIONS, "a") as fh:
        fh.write("{not json\n")
    log = promotions.read_log(machine)
    assert log.current() == "local://r/step-1" and "promotions.jsonl:2" in log.warnings[0]
