"""`machine sessions` and `--from last` when OpenCode's database is corrupt, unreadable or locked: one note for
that source, every other session still listed, no traceback, and a bounded wait on a lock.

One real Pi session and one real OpenCode database (both agents run once against the scripted endpoint); each
case breaks a copy of the database in a data folder of its own, then runs the real CLI in a child process.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from capture_agents import AgentMissing, AgentRun, agent_executable
from harness_runs import TEXT_PROMPT
from model_endpoint import ModelEndpoint
from opencode_run import OpenCodeRun

REPO = Path(__file__).resolve().parents[2]
LOCKED_SESSIONS = 20  # each one cost two 2-second lock waits before: ~80 s


class World(msgspec.Struct):
    root: Path
    project: Path
    env: dict[str, str]
    database: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    for name in ("pi", "opencode"):
        try:
            agent_executable(name)
        except AgentMissing as exc:
            if os.environ.get("CI", "").lower() in ("true", "1"):
                pytest.fail(f"{exc} (CI must run the real agents)")
            pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("broken-db")
    env: dict[str, str] = {}
    with ModelEndpoint() as served:
        for run in (AgentRun("pi", root, served), OpenCodeRun("opencode", root, served)):
            run.run(f"{TEXT_PROMPT} ({run.name})")
            env.update(run.env())
            database = getattr(run, "database", None) or Path()
    yield World(root, root / "project", env, database)


def broken_copy(world: World, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A data folder holding a copy of the real database (and its WAL), and the env that points OpenCode's home there."""
    data = tmp_path / "data"
    (data / "opencode").mkdir(parents=True)
    for side in ("", "-wal"):
        source = world.database.with_name(world.database.name + side)
        if source.exists():
            shutil.copyfile(source, data / "opencode" / source.name)
    env = {**world.env, "XDG_DATA_HOME": str(data), "MACHINE_HOME": str(tmp_path / ".machine")}
    return data / "opencode" / "opencode.db", env


def machine(world: World, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=world.project,
        env={**env, "PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def listed(world: World, env: dict[str, str]) -> tuple[list[dict], str]:
    done = machine(world, env, "sessions", "--json", "--limit", "100")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout), done.stderr


def assert_one_note_and_pi_still_listed(world: World, env: dict[str, str], *words: str) -> None:
    sessions, err = listed(world, env)
    assert [s["harness"] for s in sessions] == ["pi"], sessions
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "opencode" in notes[0] and "opencode.db" in notes[0], err
    for word in words:
        assert word in notes[0], notes
    tagged = machine(world, env, "good", "--from", "last")
    assert tagged.returncode == 0 and "Traceback" not in tagged.stderr, tagged.stderr
    (row,) = [json.loads(line) for line in Path(env["MACHINE_HOME"], "tagged.jsonl").read_text().splitlines()]
    assert "(pi)" in row["messages"][-2]["content"]  # the Pi session's turn, the newest readable one


def test_the_real_database_is_listed(world: World, tmp_path: Path) -> None:
    _database, env = broken_copy(world, tmp_path)
    sessions, _err = listed(world, env)
    assert sorted(s["harness"] for s in sessions) == ["opencode", "pi"], sessions


def test_a_corrupt_database_gets_one_note(world: World, tmp_path: Path) -> None:
    database, env = broken_copy(world, tmp_path)
    database.with_name("opencode.db-wal").unlink(missing_ok=True)
    database.write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    assert_one_note_and_pi_still_listed(world, env, "not an OpenCode database")


def test_a_database_whose_wal_cannot_be_read_gets_one_note(world: World, tmp_path: Path) -> None:
    database, env = broken_copy(world, tmp_path)
    wal = database.with_name("opencode.db-wal")
    wal.unlink(missing_ok=True)
    wal.mkdir()  # unreadable for every user, root included
    assert_one_note_and_pi_still_listed(world, env, "cannot")


def test_an_unreadable_database_gets_one_note(world: World, tmp_path: Path) -> None:
    database, env = broken_copy(world, tmp_path)
    database.with_name("opencode.db-wal").unlink(missing_ok=True)
    if os.geteuid() != 0:
        database.chmod(0)  # permission denied
    else:  # root reads any mode: a file whose every read fails (EIO) stands in for one it may not read
        database.unlink()
        database.symlink_to("/proc/self/mem")
    try:
        assert_one_note_and_pi_still_listed(world, env, "cannot")
    finally:
        if not database.is_symlink():
            database.chmod(0o644)


HOLD_LOCK = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("begin exclusive")
print("locked", flush=True)
sys.stdin.read()  # held until the test closes our stdin
"""


def test_a_locked_database_is_waited_on_once_and_still_listed(world: World, tmp_path: Path) -> None:
    database, env = broken_copy(world, tmp_path)
    with sqlite3.connect(database) as connection:
        connection.execute("pragma journal_mode=delete")  # a writer's exclusive lock then blocks every reader
        columns = [row[1] for row in connection.execute("pragma table_info(session)")]
        picked = ", ".join("id || '-{n}'" if c == "id" else c for c in columns)
        for n in range(LOCKED_SESSIONS):
            connection.execute(
                f"insert into session select {picked.format(n=n)} from session where parent_id is null and id not like '%-%'"
            )
    before = database.read_bytes()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        sessions, _err = listed(world, env)
        took = time.monotonic() - started
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert sorted(s["harness"] for s in sessions).count("opencode") == LOCKED_SESSIONS + 1, sessions
    assert "pi" in {s["harness"] for s in sessions}
    # One 2-second wait for the lock, then a copy: generous for a loaded machine, far below the ~80 s of a wait
    # per session (the bug this guards against).
    assert took < 40, took
    assert database.read_bytes() == before  # read, never written
