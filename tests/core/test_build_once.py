"""`core.build_once`: one build at a time under a real file lock, renamed into place whole or not at all."""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path

import pytest

from machine_lsp.core.build_once import build_once


class Refused(RuntimeError):
    pass


def _ready(directory: Path) -> bool:
    return (directory / "done").is_file()


def _build(content: str) -> Callable[[Path], None]:
    def build(temp: Path) -> None:
        assert temp.parent.name == "cache" and temp.name.startswith(".thing.tmp-")
        (temp / "done").write_text(content)

    return build


def _once(target: Path, build: Callable[[Path], None], messages: list[str], timeout_s: float = 5.0) -> bool:
    return build_once(
        target,
        _ready,
        build,
        messages.append,
        waiting="someone builds it",
        error=Refused,
        timeout_s=timeout_s,
    )


def test_builds_once_and_then_finds_it_ready(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "thing"
    messages: list[str] = []
    assert _once(target, _build("one"), messages) is True
    assert _once(target, _build("two"), messages) is False
    assert (target / "done").read_text() == "one" and messages == []
    assert sorted(p.name for p in target.parent.iterdir()) == [".thing.lock", "thing"]


def test_a_failed_build_leaves_nothing_and_keeps_what_was_there(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "thing"
    target.mkdir(parents=True)
    (target / "partial").write_text("old, not ready")

    def broken(temp: Path) -> None:
        (temp / "half").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _once(target, broken, [])
    assert sorted(p.name for p in target.parent.iterdir()) == [".thing.lock", "thing"]
    assert [p.name for p in target.iterdir()] == ["partial"]
    assert _once(target, _build("fresh"), []) is True  # an unready directory is replaced whole
    assert [p.name for p in target.iterdir()] == ["done"]


def test_leftovers_of_a_killed_build_are_cleared(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "thing"
    leftover = tmp_path / "cache" / ".thing.tmp-killed"
    leftover.mkdir(parents=True)
    (leftover / "half").write_text("x")
    assert _once(target, _build("one"), []) is True
    assert sorted(p.name for p in target.parent.iterdir()) == [".thing.lock", "thing"]


def test_a_held_lock_is_waited_for_a_bounded_time_and_said_once(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "thing"
    target.parent.mkdir()
    lock = target.parent / ".thing.lock"
    messages: list[str] = []
    with open(lock, "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(Refused, match=f"timed out after 1 s waiting for the lock {lock}; if no other"):
            _once(target, _build("one"), messages, timeout_s=1.0)
    assert messages == ["someone builds it"]
    assert not target.exists()
