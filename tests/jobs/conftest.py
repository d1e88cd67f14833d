from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project directory with its own store."""
    (tmp_path / ".machine").mkdir()
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    return tmp_path


@pytest.fixture
def tinker_project(project: Path) -> Path:
    """`project` with four training rows (train.jsonl) and one eval row (eval.jsonl)."""
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"{a}+{a}?"},
                {"role": "assistant", "content": f"answer: {2 * a}"},
            ]
        }
        for a in range(4)
    ]
    (project / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (project / "eval.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "1+1?"}], "expected": "answer: 2"}) + "\n"
    )
    return project


def _job_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MACHINE_HOME", None)
    env.pop("TINKER_API_KEY", None)
    env["TINKER_TELEMETRY"] = "0"
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _run_job(
    project: Path, verb: str, args: dict, *, timeout: float = 120, env: dict[str, str] | None = None
) -> tuple[int, list[dict], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "machine_lsp.jobs", verb, "--args-json", json.dumps(args)],
        cwd=project,
        capture_output=True,
        timeout=timeout,
        env=env or _job_env(),
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, events, proc.stderr.decode("utf-8", "replace")


def _only_run_dir(project: Path) -> Path:
    dirs = [p for p in (project / ".machine" / "runs").iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.fixture(scope="session")
def job_env():
    return _job_env


@pytest.fixture(scope="session")
def run_job():
    return _run_job


@pytest.fixture(scope="session")
def only_run_dir():
    return _only_run_dir
