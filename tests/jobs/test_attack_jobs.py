"""Jobs under attack (issue 9): names that escape the project, symlinked run dirs, secrets in URLs, time bounds.

The real job process runs in each case (`python -m machine_lsp.jobs VERB`); Tinker cases stop at the network
boundary (a closed port or a server that accepts and never answers), as in test_job_tinker.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAKE_KEY = "tml-FAKEKEY-never-log-me-0123456789"
SECRET = "hunter2-url-secret"


def everything_written(project: Path, *texts: str) -> str:
    parts = list(texts)
    for path in (project / ".machine").rglob("*"):
        if path.is_file():
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


# -- 5. the eval result name goes through the one name check ------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "name"),
    [
        ("eval-baseline", "../../x"),
        ("eval-baseline", "/tmp/elsewhere/x"),
        ("eval-baseline", ".."),
        ("eval-probe", "../../x"),
    ],
)
def test_eval_name_cannot_write_outside_the_project(
    tinker_project: Path, run_job, job_env, tmp_path: Path, verb: str, name: str
) -> None:
    before = sorted(p.name for p in tmp_path.parent.iterdir())
    code, events, err = run_job(
        tinker_project,
        verb,
        {"data": "eval.jsonl", "name": name},
        timeout=120,
        env=job_env(HOME=str(tmp_path)),
    )
    assert code == 1, err[-2000:]
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "usage"
    assert "eval result name" in events[-1]["message"] and "not a valid name" in events[-1]["message"]
    assert not (tinker_project / "eval_results").exists()
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == before


# -- 2. a symlinked runs dir is never followed ---------------------------------------------------------------------


def test_a_symlinked_runs_dir_is_refused_and_nothing_written_through_it(
    tinker_project: Path, run_job, job_env, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tinker_project / ".machine" / "runs").symlink_to(elsewhere)
    code, events, err = run_job(
        tinker_project, "validate", {"path": "train.jsonl"}, timeout=60, env=job_env()
    )
    assert code == 1, err[-2000:]
    assert events[-1]["event"] == "error" and "symbolic link" in events[-1]["message"]
    assert list(elsewhere.iterdir()) == []


# -- 7. credentials in TINKER_BASE_URL are never stored or printed --------------------------------------------------


def test_redact_url() -> None:
    from machine_lsp.core.redact import redact_url, redact_urls

    assert redact_url("https://user:secret@host.example/tinker") == "https://***@host.example/tinker"
    assert redact_url("http://token@127.0.0.1:8080") == "http://***@127.0.0.1:8080"
    assert redact_url("https://host.example/x?a=b@c") == "https://host.example/x?a=b@c"  # no userinfo
    assert redact_url("https://u:p@ss@host/") == "https://***@host/"
    text = 'cannot reach http://u:pw@h:1/x and "https://a:b@c/d", mail me@example.com'
    assert redact_urls(text) == 'cannot reach http://***@h:1/x and "https://***@c/d", mail me@example.com'


def test_tinker_base_url_credentials_never_reach_the_run_dir(
    tinker_project: Path, run_job, job_env, tmp_path: Path, closed_port: int
) -> None:
    url = f"https://machine-user:{SECRET}@127.0.0.1:{closed_port}/services/tinker"
    code, events, err = run_job(
        tinker_project,
        "train-smoke",
        {"engine": "tinker", "data": "train.jsonl"},
        timeout=90,
        env=job_env(HOME=str(tmp_path), TINKER_API_KEY=FAKE_KEY, TINKER_BASE_URL=url),
    )
    assert code == 1, err[-2000:]
    assert events[-1]["event"] == "error" and "connection refused" in events[-1]["message"]
    assert "https://***@127.0.0.1:" in events[-1]["message"]  # the URL is still shown, without its secret
    written = everything_written(tinker_project, err, json.dumps(events))
    assert SECRET not in written and "machine-user" not in written
    assert FAKE_KEY not in written


# -- 8. the "no answer" preflight bound counts the job's start-up ------------------------------------------------------


PREFLIGHT_BOUND_S = 20.0  # TinkerEngine's promise: the job knows within 20 s of its start
SLOW_START_S = 10.0  # a start-up this slow happens on a loaded machine; here it is made certain
# What may pass between the deadline and the error line reaching the test: a thread waking and one write. The
# margin is set from the bug this guards against, not from a stopwatch of this machine: a bound counted from the
# preflight call instead of the process start ends SLOW_START_S later (30 s), far past 20 s + ROOM_S even when a
# loaded machine delays the wake-up by seconds.
ROOM_S = 6.0


def test_no_answer_preflight_ends_within_the_bound_counted_from_the_job_start(
    tinker_project: Path, job_env, tmp_path: Path, silent_server: int
) -> None:
    """The job's "no answer" error comes within the 20 s bound counted from the interpreter's own start, even when
    that start-up takes 10 s (a sitecustomize that sleeps: part of the process start, before any of the job's code
    runs). Times are read on the system-wide monotonic clock: the interpreter's first instant (written by the
    sitecustomize) and the moment the error line arrives; spawn and tear-down, which only a loaded machine makes
    slow, are outside the measure."""
    slow = tmp_path / "slow-start"
    slow.mkdir()
    first_instant = tmp_path / "first-instant"
    (slow / "sitecustomize.py").write_text(
        f"import time\nopen({str(first_instant)!r}, 'w').write(repr(time.monotonic()))\ntime.sleep({SLOW_START_S})\n"
    )
    env = job_env(
        HOME=str(tmp_path), TINKER_API_KEY=FAKE_KEY, TINKER_BASE_URL=f"http://127.0.0.1:{silent_server}"
    )
    env["PYTHONPATH"] = f"{slow}:{env['PYTHONPATH']}"
    args = json.dumps({"engine": "tinker", "data": "train.jsonl"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "machine_lsp.jobs", "train-smoke", "--args-json", args],
        cwd=tinker_project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    arrivals = [(time.monotonic(), json.loads(line)) for line in proc.stdout if line.strip()]
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 1, stderr[-2000:]
    error_at, error = arrivals[-1]
    assert error["event"] == "error" and "did not answer within 20 s" in error["message"]
    started = float(first_instant.read_text())
    assert error_at - started < PREFLIGHT_BOUND_S + ROOM_S, (
        f"{error_at - started:.1f} s from the process start"
    )
