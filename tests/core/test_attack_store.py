"""The store under attack (issue 9): concurrent duplicate tags, symlinks, special files, read-only and full disks.

Every case uses the real Store (and real processes where the bug needs them); nothing is mocked. A full disk is a
real one: a 64 KiB tmpfs where mounting is permitted (root), and everywhere a child process whose RLIMIT_FSIZE
makes the kernel refuse the write (SIGXFSZ ignored, so the write fails with EFBIG as a full disk fails with
ENOSPC).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from store_helpers import make_record

from machine_lsp.core.schema import encode
from machine_lsp.core.store import Store, StoreError

REPO_ROOT = Path(__file__).resolve().parents[2]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` with its bytes (to prove nothing was written)."""
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


# -- 1. the duplicate check and the append are one step ---------------------------------------------------------

CONCURRENT_TAGGER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from machine_lsp.core.store import Store
    from machine_lsp.core.tagging import tag
    from machine_lsp.core.transcripts import load_turns

    name, chat, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    turns = load_turns(chat)
    store = Store.open()
    (go.parent / f"ready-{name}").touch()
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:   # start together to maximise contention
        time.sleep(0.001)
    added = sum(not tag(store, turn, "good").duplicate for turn in turns)
    print(added)
    """
)


def test_four_processes_tagging_the_same_200_turns_store_exactly_200(store: Store, tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"{i} + {i}?"},
                {"role": "assistant", "content": f"{2 * i}"},
            ]
        }
        for i in range(200)
    ]
    chat.write_text("".join(json.dumps(row) + "\n" for row in rows))
    go = tmp_path / "go"
    env = {**os.environ, "MACHINE_HOME": str(store.root), "PYTHONPATH": str(REPO_ROOT)}
    names = ["a", "b", "c", "d"]
    taggers = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_TAGGER, name, str(chat), str(go)],
            env=env,
            stdout=subprocess.PIPE,
        )
        for name in names
    ]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready-{name}").exists() for name in names):
            assert all(t.poll() is None for t in taggers), "a tagger died while starting"
            assert time.monotonic() < deadline, "taggers never got ready"
            time.sleep(0.01)
        go.touch()
        outputs = [t.communicate(timeout=300)[0] for t in taggers]
    finally:
        for t in taggers:
            if t.poll() is None:
                t.kill()
                t.wait(timeout=10)
    assert [t.returncode for t in taggers] == [0, 0, 0, 0]
    records = Store.open().records()
    assert len(records) == 200, f"{len(records)} records for 200 turns"
    assert len({encode(r.messages) for r in records}) == 200
    assert sum(int(out) for out in outputs) == 200  # each turn reported as added by exactly one process


# -- 2. symlinks are never followed; reads never write ----------------------------------------------------------


def test_tagged_jsonl_symlink_is_refused_and_its_target_untouched(store: Store, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_bytes(b"precious line 1\nprecious half line")  # no trailing newline: a reader used to cut it
    store.root.mkdir()
    store.tagged_path.symlink_to(victim)
    for action in (Store.records, Store.counts, lambda s: s.append(make_record("r1"))):
        with pytest.raises(StoreError, match="symbolic link"):
            action(Store.open())
    assert victim.read_bytes() == b"precious line 1\nprecious half line"
    assert store.tagged_path.is_symlink() and os.listdir(outside) == ["victim.txt"]


def test_machine_dir_symlink_is_refused_and_nothing_written_through_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "cloned-repo"
    outside = tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (outside / "tagged.jsonl").write_bytes(b'{"half a record')
    (project / ".machine").symlink_to(outside)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    before = snapshot(outside)
    store = Store.open(project)
    assert store.root == project / ".machine"
    with pytest.raises(StoreError, match="symbolic link"):
        store.records()
    with pytest.raises(StoreError, match="symbolic link"):
        store.append(make_record("r1"))
    with pytest.raises(StoreError, match="symbolic link"):
        store.torn_files()
    assert snapshot(outside) == before


def test_reads_never_write_even_with_a_torn_tail(store: Store) -> None:
    store.append(make_record("r1"))
    with open(store.tagged_path, "ab") as handle:
        handle.write(b'{"id":"interrupted","verd')
    before = snapshot(store.root)
    reader = Store.open()
    assert [r.id for r in reader.records()] == ["r1"]
    assert reader.counts().total == 1 and reader.torn_files() == []
    assert any("torn last line" in w and "skipped" in w for w in reader.warnings)
    assert snapshot(store.root) == before


# -- 3. store errors are one line, reads work on a read-only store, a full disk loses nothing --------------------


def test_machine_dir_that_is_a_file_is_a_store_error_for_reads_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".machine").write_text("not a directory")
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    with pytest.raises(StoreError, match="is a regular file, not a directory"):
        Store.open().records()
    with pytest.raises(StoreError, match="is a regular file, not a directory"):
        Store.open().append(make_record("r1"))
    assert (tmp_path / ".machine").read_text() == "not a directory"


def test_a_fifo_as_tagged_jsonl_is_refused_without_blocking(store: Store) -> None:
    store.root.mkdir()
    os.mkfifo(store.tagged_path)
    started = time.monotonic()
    with pytest.raises(StoreError, match="FIFO"):
        Store.open().records()
    with pytest.raises(StoreError, match="FIFO"):
        Store.open().append(make_record("r1"))
    assert time.monotonic() - started < 10  # the old store blocked here forever (opening a FIFO waits)


def test_full_tmpfs_append_fails_cleanly_and_loses_nothing(
    tmpfs: Path, fill_disk: Callable[[Path], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACHINE_HOME", str(tmpfs / ".machine"))
    store = Store.open()
    for i in range(3):
        store.append(make_record(f"r{i}", answer=f"a{i}"))
    before = store.tagged_path.read_bytes()
    filler = fill_disk(tmpfs)
    big = make_record("big", answer="y" * 20000)  # needs new pages, so the write really hits the full disk
    with pytest.raises(StoreError, match="disk is full") as caught:
        Store.open().append(big)
    assert "\n" not in str(caught.value) and "earlier records are intact" in str(caught.value)
    assert store.tagged_path.read_bytes() == before  # no half line left behind
    assert Store.open().torn_files() == []
    filler.unlink()
    Store.open().append(big)
    assert [r.id for r in Store.open().records()] == ["r0", "r1", "r2", "big"]


def test_full_tmpfs_torn_tail_repair_leaves_no_empty_torn_file(
    tmpfs: Path, fill_disk: Callable[[Path], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACHINE_HOME", str(tmpfs / ".machine"))
    store = Store.open()
    store.append(make_record("r0"))
    torn = encode(make_record("dying", answer="z" * 9000))[:8000]  # a crash mid-write
    with open(store.tagged_path, "ab") as handle:
        handle.write(torn)
    before = store.tagged_path.read_bytes()
    filler = fill_disk(tmpfs)
    for _ in range(3):  # once per invocation, as a user retrying would
        with pytest.raises(StoreError, match="disk is full"):
            Store.open().append(make_record("r1", answer="other"))
    assert sorted(p.name for p in tmpfs.joinpath(".machine").iterdir()) == [
        ".gitignore",
        "tagged.jsonl",
    ]  # no .torn-* litter
    assert store.tagged_path.read_bytes() == before
    filler.unlink()
    writer = Store.open()
    writer.append(make_record("r1", answer="other"))  # the next open with space repairs the partial line
    [torn_file] = writer.torn_files()
    assert torn_file.read_bytes() == torn
    assert [r.id for r in Store.open().records()] == ["r0", "r1"]


FSIZE_APPEND = textwrap.dedent(
    """
    import sys
    from machine_lsp.core.schema import Message, Source, TagRecord
    from machine_lsp.core.store import Store, StoreError
    record = TagRecord(id=sys.argv[1], verdict="good",
        messages=[Message(role="user", content="q"), Message(role="assistant", content="w" * 5000)],
        source=Source(kind="cli", uri="file:///x"), created_at="2026-11-30T10:00:00Z", tool_version="t")
    try:
        Store.open().append(record)
    except StoreError as exc:
        print(exc)
        sys.exit(3)
    """
)


def _append_with_file_size_limit(
    store: Store, record_id: str, limit: int
) -> subprocess.CompletedProcess[str]:
    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {
        **os.environ,
        "MACHINE_HOME": str(store.root),
        "PYTHONPATH": str(REPO_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return subprocess.run(
        [sys.executable, "-c", FSIZE_APPEND, record_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit_file_size,
    )


def test_a_write_the_kernel_refuses_midway_is_cut_back_and_reported(store: Store) -> None:
    for i in range(3):
        store.append(make_record(f"r{i}", answer=f"a{i}"))
    before = store.tagged_path.read_bytes()
    done = _append_with_file_size_limit(store, "too-big", len(before) + 100)  # room for 100 bytes of 5000
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stdout.strip().splitlines()) == 1
    assert "disk is full" in done.stdout and "nothing was added" in done.stdout
    assert store.tagged_path.read_bytes() == before  # the 100 bytes that fitted were cut back off
    assert store.torn_files() == []
    assert _append_with_file_size_limit(store, "fits", 1 << 30).returncode == 0
    assert [r.id for r in Store.open().records()] == ["r0", "r1", "r2", "fits"]


def test_a_torn_tail_that_cannot_be_moved_aside_leaves_no_torn_file(store: Store) -> None:
    store.append(make_record("r0"))
    torn = encode(make_record("dying", answer="z" * 3000))[:2500]
    with open(store.tagged_path, "ab") as handle:
        handle.write(torn)
    before = store.tagged_path.read_bytes()
    for attempt in range(3):
        done = _append_with_file_size_limit(
            store, f"try-{attempt}", 1000
        )  # the 2500-byte copy cannot be made
        assert done.returncode == 3 and "torn last line" in done.stdout and "disk is full" in done.stdout
    assert store.torn_files() == [] and sorted(os.listdir(store.root)) == [".gitignore", "tagged.jsonl"]
    assert store.tagged_path.read_bytes() == before
    assert _append_with_file_size_limit(store, "later", 1 << 30).returncode == 0
    [torn_file] = store.torn_files()
    assert torn_file.read_bytes() == torn
    assert [r.id for r in Store.open().records()] == ["r0", "later"]


def test_a_read_only_store_can_be_read_but_not_written(tmpfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACHINE_HOME", str(tmpfs / ".machine"))
    store = Store.open()
    store.append(make_record("r0"))
    with open(store.tagged_path, "ab") as handle:
        handle.write(b'{"id":"torn')
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    reader = Store.open()
    assert [r.id for r in reader.records()] == ["r0"]  # the old store opened read-write and failed here
    assert any("torn last line" in w for w in reader.warnings)
    with pytest.raises(StoreError, match="read-only file system"):
        Store.open().append(make_record("r1", answer="other"))


NOBODY = 65534


def _as_the_owner_without_root(check: Callable[[], None]) -> None:
    """Run `check` where file modes bind: here when not root; as root, in a forked child that dropped to the
    files' owner (uid/gid nobody), whose failure (traceback included) fails this test."""
    if os.geteuid() != 0:
        check()
        return
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_end)
        code = 0
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            check()
        except BaseException:
            import traceback

            os.write(write_end, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report


def test_a_read_only_store_dir_can_be_read_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # Not tmp_path: its parents are root's own (0700), and the unprivileged owner must reach the store.
    home = Path(tempfile.mkdtemp(prefix="machine-ro-store-"))
    try:
        monkeypatch.setenv("MACHINE_HOME", str(home / ".machine"))
        store = Store.open()
        store.append(make_record("r0"))
        if os.geteuid() == 0:
            for path in (home, *home.rglob("*")):
                os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
        store.tagged_path.chmod(0o444)
        store.root.chmod(0o555)

        def check() -> None:
            assert [r.id for r in Store.open().records()] == ["r0"]
            with pytest.raises(StoreError, match="permission denied"):
                Store.open().append(make_record("r1", answer="other"))

        _as_the_owner_without_root(check)
    finally:
        store.root.chmod(0o755)
        shutil.rmtree(home)
