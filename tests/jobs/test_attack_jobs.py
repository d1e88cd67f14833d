"""Jobs under attack (issue 9): names that escape the project, symlinked run dirs, secrets in URLs, time bounds.

The real job process runs in each case (`python -m machine_lsp.jobs VERB`); Tinker cases stop at the network
boundary (a closed port or a server that accepts and never answers), as in test_job_tinker.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

FAKE_KEY = "tml-FAKEKEY-never-log-me-0123456789"
SECRET = "hunter2-url-secret"


def write_rows(project: Path) -> None:
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


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    project: Path, run_job, job_env, tmp_path: Path, verb: str, name: str
) -> None:
    write_rows(project)
    before = sorted(p.name for p in tmp_path.parent.iterdir())
    code, events, err = run_job(
        project,
        verb,
        {"data": "eval.jsonl", "name": name},
        timeout=120,
        env=job_env(HOME=str(tmp_path)),
    )
    assert code == 1, err[-2000:]
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "usage"
    assert "eval result name" in events[-1]["message"] and "not a valid name" in events[-1]["message"]
    assert not (project / "eval_results").exists()
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == before


# -- 2. a symlinked runs dir is never followed ---------------------------------------------------------------------


def test_a_symlinked_runs_dir_is_refused_and_nothing_written_through_it(
    project: Path, run_job, job_env, tmp_path: Path
) -> None:
    write_rows(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / ".machine" / "runs").symlink_to(elsewhere)
    code, events, err = run_job(project, "validate", {"path": "train.jsonl"}, timeout=60, env=job_env())
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
    project: Path, run_job, job_env, tmp_path: Path
) -> None:
    write_rows(project)
    url = f"https://machine-user:{SECRET}@127.0.0.1:{_closed_port()}/services/tinker"
    code, events, err = run_job(
        project,
        "train-smoke",
        {"engine": "tinker", "data": "train.jsonl"},
        timeout=90,
        env=job_env(HOME=str(tmp_path), TINKER_API_KEY=FAKE_KEY, TINKER_BASE_URL=url),
    )
    assert code == 1, err[-2000:]
    assert events[-1]["event"] == "error" and "connection refused" in events[-1]["message"]
    assert "https://***@127.0.0.1:" in events[-1]["message"]  # the URL is still shown, without its secret
    written = everything_written(project, err, json.dumps(events))
    assert SECRET not in written and "machine-user" not in written
    assert FAKE_KEY not in written


# -- 8. the "no answer" preflight bound counts the job's start-up ------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


PREFLIGHT_BOUND_S = 20.0  # TinkerEngine's promise: the job knows within 20 s of its start
SLOW_START_S = 6.0  # a start-up this slow happens on a loaded machine; here it is made certain
ROOM_S = 4.0  # what may follow the bound: writing the manifest, the final events, the process exit


def test_no_answer_preflight_ends_within_the_bound_counted_from_the_job_start(
    project: Path, job_env, tmp_path: Path, silent_server: int
) -> None:
    """The whole job, spawn to exit, fits in the 20 s bound plus a few seconds of tear-down, even when the
    interpreter's own start-up takes 6 s (a sitecustomize that sleeps: part of the process start, before any of
    the job's code runs). Measuring the bound from the preflight call instead ended at 20 s + start-up."""
    write_rows(project)
    slow = tmp_path / "slow-start"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(f"import time\ntime.sleep({SLOW_START_S})\n")
    env = job_env(
        HOME=str(tmp_path), TINKER_API_KEY=FAKE_KEY, TINKER_BASE_URL=f"http://127.0.0.1:{silent_server}"
    )
    env["PYTHONPATH"] = f"{slow}:{env['PYTHONPATH']}"
    args = json.dumps({"engine": "tinker", "data": "train.jsonl"})
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "machine_lsp.jobs", "train-smoke", "--args-json", args],
        cwd=project,
        capture_output=True,
        timeout=120,
        env=env,
    )
    wall = time.monotonic() - started
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert events[-1]["event"] == "error" and "did not answer within 20 s" in events[-1]["message"]
    assert wall < PREFLIGHT_BOUND_S + ROOM_S, f"{wall:.1f} s from spawn to exit"
