"""The Machine store: locations, durable appends, concurrent writers, torn tails after a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest
from store_helpers import make_record

from machine_lsp.core.schema import decode_tag_record, encode
from machine_lsp.core.store import Store, StoreError, find_machine_dir, find_project_root

REPO_ROOT = Path(__file__).resolve().parents[2]


# -- where the store lives ----------------------------------------------------------------------------------


def test_machine_home_names_the_store_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / "elsewhere"))
    assert find_machine_dir(tmp_path / "a" / "b") == tmp_path / "elsewhere"
    assert Store.open().tagged_path == tmp_path / "elsewhere" / "tagged.jsonl"


def test_nearest_ancestor_with_machine_dir_wins_over_git_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    (tmp_path / ".git").mkdir()
    (tmp_path / "pkg" / ".machine").mkdir(parents=True)
    deep = tmp_path / "pkg" / "src" / "mod"
    deep.mkdir(parents=True)
    assert find_project_root(deep) == tmp_path / "pkg"
    assert find_project_root(tmp_path / "other") == tmp_path  # no .machine on the way: the git root


def test_falls_back_to_the_start_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    start = tmp_path / "plain"
    start.mkdir()
    if any((parent / ".git").exists() or (parent / ".machine").is_dir() for parent in start.parents):
        pytest.skip("tmp dir sits inside a git repo or a project")
    monkeypatch.chdir(start)
    assert find_machine_dir() == start / ".machine"


def test_open_creates_nothing_until_the_first_append(store: Store) -> None:
    assert not store.root.exists()
    assert store.records() == []
    assert store.counts().total == 0
    store.append(make_record("r1"))
    assert store.tagged_path.read_bytes().endswith(b"\n")


# -- appending and reading ----------------------------------------------------------------------------------


def test_append_writes_one_whole_line_per_record(store: Store) -> None:
    records = [make_record(f"r{i}", answer=f"answer {i}") for i in range(5)]
    for record in records:
        store.append(record)
    lines = store.tagged_path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [decode_tag_record(line) for line in lines[:-1]] == records
    assert store.records() == records
    assert store.warnings == []


def test_counts_and_find_same(store: Store) -> None:
    store.append(make_record("g1"))
    store.append(make_record("b1", verdict="bad", answer="answer: 54"))
    store.append(make_record("g2", answer="56", original="answer: 54"))
    store.append(make_record("g3", answer="trace", trace=True))
    counts = store.counts()
    assert (counts.good, counts.bad, counts.rewritten, counts.traced, counts.total) == (3, 1, 1, 1, 4)
    same = store.find_same(make_record("x").messages, "good")
    assert same is not None and same.id == "g1"
    assert store.find_same(make_record("x").messages, "bad") is None


def test_a_store_path_that_is_a_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".machine").write_text("not a directory")
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    with pytest.raises(StoreError, match="not a directory|cannot create"):
        Store.open().append(make_record("r1"))


def test_a_bad_line_in_the_middle_is_reported_and_left_in_place(store: Store) -> None:
    store.append(make_record("r1"))
    with open(store.tagged_path, "ab") as handle:
        handle.write(b'{"id": "hand-edited", "oops": true}\n')
    store.append(make_record("r2", answer="other"))
    assert [record.id for record in store.records()] == ["r1", "r2"]
    assert len(store.warnings) == 1 and ":2: not a tag record" in store.warnings[0]
    assert b"hand-edited" in store.tagged_path.read_bytes()


# -- crashes: torn tails ------------------------------------------------------------------------------------


def test_torn_tail_is_moved_aside_with_a_warning_and_whole_rows_kept(store: Store) -> None:
    whole = [make_record(f"r{i}", answer=f"a{i}") for i in range(3)]
    for record in whole:
        store.append(record)
    partial = encode(make_record("torn"))[:37]
    with open(store.tagged_path, "ab") as handle:
        handle.write(partial)

    before = store.tagged_path.read_bytes()
    reopened = Store.open()
    assert reopened.records() == whole
    assert len(reopened.warnings) == 1
    assert "torn last line" in reopened.warnings[0] and ":4:" in reopened.warnings[0]
    assert "skipped" in reopened.warnings[0]
    # A reader never writes: the file is as it was and nothing is moved aside yet.
    assert store.tagged_path.read_bytes() == before and reopened.torn_files() == []

    writer = Store.open()
    writer.append(make_record("r3", answer="after"))  # the next writer moves the torn tail aside
    assert any("moved aside" in warning for warning in writer.warnings)
    [torn_file] = writer.torn_files()
    assert torn_file.name.startswith("tagged.jsonl.torn-")
    assert torn_file.read_bytes() == partial  # nothing silently dropped
    assert [record.id for record in Store.open().records()] == ["r0", "r1", "r2", "r3"]


def test_append_after_a_crash_never_glues_onto_the_torn_tail(store: Store) -> None:
    store.append(make_record("r1"))
    with open(store.tagged_path, "ab") as handle:
        handle.write(b'{"id":"half')
    store.append(make_record("r2", answer="later"))  # no read in between
    assert [record.id for record in Store.open().records()] == ["r1", "r2"]
    assert store.torn_files()[0].read_bytes() == b'{"id":"half'
    assert any("torn" in warning for warning in store.warnings)


def test_a_whole_record_missing_only_its_newline_is_completed_not_moved(store: Store) -> None:
    store.append(make_record("r1"))
    with open(store.tagged_path, "ab") as handle:
        handle.write(encode(make_record("r2", answer="x")))
    assert [record.id for record in store.records()] == ["r1", "r2"]
    assert store.torn_files() == []
    store.append(make_record("r3", answer="y"))
    assert [record.id for record in Store.open().records()] == ["r1", "r2", "r3"]
    assert store.torn_files() == []


KILLED_WRITER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    path, ready = sys.argv[1], sys.argv[2]
    line = open(sys.argv[3], "rb").read()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, line[: len(line) // 2])   # half a record, then the power goes out
    os.fsync(fd)
    open(ready, "w").close()
    time.sleep(60)
    """
)


def test_kill_9_mid_record_leaves_a_torn_tail_the_next_append_repairs(store: Store, tmp_path: Path) -> None:
    for i in range(3):
        store.append(make_record(f"r{i}", answer=f"a{i}"))
    ready = tmp_path / "ready"
    line_file = tmp_path / "line.json"
    line_file.write_bytes(encode(make_record("dying", answer="never finished")) + b"\n")
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(store.tagged_path), str(ready), str(line_file)]
    )
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert child.poll() is None, "writer exited early"
            assert time.monotonic() < deadline, "writer never got going"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)

    reopened = Store.open()  # the dead writer's lock went with it
    assert [record.id for record in reopened.records()] == ["r0", "r1", "r2"]
    assert any("torn last line" in warning for warning in reopened.warnings)
    assert reopened.torn_files() == []  # readers never write
    reopened.append(make_record("r3", answer="after the crash"))
    [torn_file] = reopened.torn_files()
    assert torn_file.read_bytes() == line_file.read_bytes()[: len(line_file.read_bytes()) // 2]
    assert [record.id for record in Store.open().records()] == ["r0", "r1", "r2", "r3"]


# -- concurrency --------------------------------------------------------------------------------------------

CONCURRENT_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from machine_lsp.core.schema import Message, Source, TagRecord
    from machine_lsp.core.store import Store

    name, count, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    store = Store.open()
    (go.parent / f"ready-{name}").touch()
    deadline = time.monotonic() + 30
    while not go.exists() and time.monotonic() < deadline:   # start together to maximise contention
        time.sleep(0.001)
    for i in range(count):
        # Records of different sizes, some over the 4 KiB pipe-atomicity size, so interleaving would show.
        answer = f"{name} answer {i} " + "x" * ((i * 97) % 6000)
        store.append(TagRecord(
            id=f"{name}-{i}", verdict="good" if i % 3 else "bad",
            messages=[Message(role="user", content=f"q{i}"), Message(role="assistant", content=answer)],
            source=Source(kind="cli", uri="file:///concurrency"), created_at="2026-11-30T10:00:00Z",
            tool_version="test"))
    """
)


def test_two_processes_appending_2000_each_give_4000_whole_rows(store: Store, tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "MACHINE_HOME": str(store.root), "PYTHONPATH": str(REPO_ROOT)}
    writers = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT_WRITER, name, "2000", str(go)], env=env)
        for name in ("alpha", "beta")
    ]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{name}").exists() for name in ("alpha", "beta")):
            assert all(writer.poll() is None for writer in writers), "a writer died while starting"
            assert time.monotonic() < deadline, "writers never got ready"
            time.sleep(0.01)
        go.touch()
        codes = [writer.wait(timeout=120) for writer in writers]
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait(timeout=10)
    assert codes == [0, 0]

    raw_lines = store.tagged_path.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    parsed = [msgspec.json.decode(line) for line in raw_lines[:-1]]  # every line parses on its own
    assert len(parsed) == 4000
    records = Store.open().records()
    assert len(records) == 4000
    for name in ("alpha", "beta"):
        ids = [record.id for record in records if record.id.startswith(name)]
        assert ids == [f"{name}-{i}" for i in range(2000)]  # all there, each writer's order kept
    names = [record.id.split("-")[0] for record in records]
    switches = sum(1 for before, after in zip(names, names[1:], strict=False) if before != after)
    assert switches >= 2, "the writers never overlapped, so this run proved nothing about contention"
