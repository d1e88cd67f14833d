"""The safe-write rule for the tool's own files (core/safe_files.py), directly: no link on the way or at the end,
random O_EXCL temporary names, modes kept, special files refused with one line naming them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from machine_lsp.core.safe_files import (
    NotRegularFile,
    open_append_safely,
    read_file_safely,
    write_file_safely,
)


def test_new_files_and_folders_are_made_and_existing_modes_kept(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c.json"
    write_file_safely(target, b"one", root=tmp_path)
    assert target.read_bytes() == b"one"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    target.chmod(0o600)
    write_file_safely(target, b"two", root=tmp_path)
    assert target.read_bytes() == b"two" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["c.json"]  # no temporary file left
    write_file_safely(tmp_path / "run.sh", b"#!/bin/sh\n", root=tmp_path, new_mode=0o755)
    assert os.access(tmp_path / "run.sh", os.X_OK)


@pytest.mark.parametrize("dangling", [False, True])
def test_a_linked_folder_on_the_way_is_refused(tmp_path: Path, dangling: bool) -> None:
    outside = tmp_path / "outside"
    if not dangling:
        outside.mkdir()
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "sub").symlink_to(outside)
    with pytest.raises(NotRegularFile, match=r"proj/sub is a symbolic link, not a directory"):
        write_file_safely(tmp_path / "proj" / "sub" / "x.json", b"{}", root=tmp_path / "proj")
    with pytest.raises(NotRegularFile):
        open_append_safely(tmp_path / "proj" / "sub" / "x.jsonl", root=tmp_path / "proj")
    assert not dangling or not outside.exists()
    assert dangling or list(outside.iterdir()) == []


def test_links_fifos_and_folders_as_the_file_are_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "link").symlink_to(victim)
    (tmp_path / "null").symlink_to("/dev/null")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name, what in [
        ("link", "symbolic link"),
        ("null", "symbolic link"),
        ("fifo", "FIFO"),
        ("dir", "directory"),
    ]:
        with pytest.raises(NotRegularFile, match=what) as caught:
            write_file_safely(tmp_path / name, b"x", root=tmp_path)
        assert str(caught.value).startswith(str(tmp_path / name)) and "\n" not in str(caught.value)
        with pytest.raises(OSError):
            read_file_safely(tmp_path / name, root=tmp_path)  # a FIFO is refused without blocking
    assert victim.read_text() == "precious"


def test_reading_a_missing_file_or_folder_is_none(tmp_path: Path) -> None:
    assert read_file_safely(tmp_path / "nope" / "x.json", root=tmp_path) is None
    assert read_file_safely(tmp_path / "x.json", root=tmp_path) is None
    assert not (tmp_path / "nope").exists()  # reading creates nothing
