"""`machine jobs list|cancel` under attack (issue 9): run refs that point outside the runs dir, reused pids.

A "victim" is a real, innocent process (a sleeping Python whose command line even contains `machine_lsp.jobs`,
which fooled the old liveness rule); a manifest pointing at it must never get it signalled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from machine_lsp.core import runs

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "home" / "project"  # so that ../../x is tmp_path/x
    (project / ".machine" / "runs").mkdir(parents=True)
    return project


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "machine_lsp.jobs"])
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{proc.pid}/stat").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def machine(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    env.pop("MACHINE_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_ticks(pid: int) -> int:
    """The process's start time from /proc/<pid>/stat (read here, independently of the code under test)."""
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


def write_manifest(run_dir: Path, pid: int, pid_start: int | None) -> None:
    run_dir.mkdir(parents=True)
    manifest = {
        "id": run_dir.name,
        "job": "train-run",
        "status": "running",
        "created_at": "2026-11-30T10:00:00Z",
        "updated_at": "2026-11-30T10:00:00Z",
        "cwd": str(run_dir),
        "pid": pid,
    }
    if pid_start is not None:  # None: a manifest from before start times were recorded
        manifest["pid_start"] = pid_start
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


# -- 5. one name check for run ids -------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_cancel_of_a_run_outside_the_runs_dir_is_refused(
    project: Path, tmp_path: Path, victim: subprocess.Popen[bytes], form: str
) -> None:
    outside = tmp_path / "x"
    write_manifest(outside, victim.pid, start_ticks(victim.pid))
    ref = "../../x" if form == "relative" else str(outside)
    assert (project / ref).resolve() == outside
    done = machine(project, "jobs", "cancel", ref)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and ref in done.stderr
    time.sleep(0.5)
    assert victim.poll() is None, "the process named by a manifest outside .machine/runs was signalled"


def test_a_run_path_inside_the_runs_dir_still_works(project: Path) -> None:
    run_dir = project / ".machine" / "runs" / "20261130-100000-train-run-abcd"
    write_manifest(run_dir, 999_999_999, None)
    done = machine(project, "jobs", "cancel", ".machine/runs/20261130-100000-train-run-abcd")
    assert "20261130-100000-train-run-abcd" in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_check_name() -> None:
    for good in ("20261130-101500-train-run-3fa2", "step-60", "final", "baseline", "my_model.v2+lora"):
        assert runs.check_name(good) == good
    for bad in (
        "",
        ".",
        "..",
        "../../x",
        "/etc/passwd",
        "a/b",
        "a\\b",
        ".hidden",
        "-rf",
        "a\0b",
        "x" * 129,
        "é",
    ):
        with pytest.raises(ValueError, match="not a valid name"):
            runs.check_name(bad)
    with pytest.raises(ValueError):
        runs.run_dir(Path("/runs"), "../x")


# -- 6. one liveness rule for list and cancel ----------------------------------------------------------------


@pytest.mark.parametrize("recorded", ["wrong start time", "old manifest"])
def test_list_and_cancel_agree_on_a_dead_job_whose_pid_was_reused(
    project: Path, victim: subprocess.Popen[bytes], recorded: str
) -> None:
    run_id = "20261130-100000-train-run-dead"
    if recorded == "wrong start time":
        # The job died and its pid went to the victim, which started later than the job did.
        write_manifest(project / ".machine" / "runs" / run_id, victim.pid, start_ticks(victim.pid) - 1)
    else:
        # No start time recorded; the pid now belongs to a process that is not a job at all.
        plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        victim.kill()
        victim.wait()
        victim = plain
        write_manifest(project / ".machine" / "runs" / run_id, plain.pid, None)
    try:
        listed = machine(project, "jobs", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        [entry] = json.loads(listed.stdout)
        assert entry["effective_status"] == "lost"
        assert "lost" in machine(project, "jobs", "list").stdout
        cancelled = machine(project, "jobs", "cancel", run_id)
        assert cancelled.returncode == 1 and "is gone (status lost)" in cancelled.stdout
        time.sleep(0.5)
        assert victim.poll() is None, "cancel signalled a process that is not the job"
    finally:
        if victim.poll() is None:
            victim.kill()
        victim.wait(timeout=10)


def test_a_live_job_is_running_for_both(project: Path, victim: subprocess.Popen[bytes]) -> None:
    run_id = "20261130-100000-train-run-live"
    write_manifest(project / ".machine" / "runs" / run_id, victim.pid, start_ticks(victim.pid))
    manifest = runs.read_manifest(project / ".machine" / "runs" / run_id)
    assert runs.job_alive(manifest) and runs.effective_status(manifest) == "running"
    [entry] = json.loads(machine(project, "jobs", "list", "--json").stdout)
    assert entry["effective_status"] == "running"


# -- 2. the runs dir is never followed through a symlink --------------------------------------------------------


def test_symlinked_runs_dir_is_refused_by_jobs_list(tmp_path: Path) -> None:
    project = tmp_path / "project"
    elsewhere = tmp_path / "elsewhere"
    (project / ".machine").mkdir(parents=True)
    elsewhere.mkdir()
    write_manifest(elsewhere / "20261130-100000-train-run-abcd", 999_999_999, None)
    (project / ".machine" / "runs").symlink_to(elsewhere)
    done = machine(project, "jobs", "list")
    assert done.returncode == 3 and "symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert "train-run-abcd" not in done.stdout
