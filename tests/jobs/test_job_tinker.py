"""Tinker jobs up to the network boundary: each failure is precise, inside the time bound, and the key never leaks."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

FAKE_KEY = "tml-FAKEKEY-never-log-me-0123456789"


def _no_key_anywhere(project: Path, *texts: str) -> None:
    for path in (project / ".machine").rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path
    for text in texts:
        assert FAKE_KEY not in text


@pytest.mark.parametrize(
    "env, kind_text",
    [
        ({}, "no Tinker API key: set TINKER_API_KEY"),
        ({"TINKER_API_KEY": "sk-wrong-provider-key"}, "is not a Tinker API key (keys start with 'tml-')"),
        ({"TINKER_API_KEY": FAKE_KEY, "TINKER_BASE_URL": "closed"}, "connection refused on 127.0.0.1:"),
    ],
    ids=["missing-key", "bad-key", "closed-port"],
)
def test_train_smoke_on_tinker_fails_clearly_within_bound(
    tinker_project: Path, run_job, job_env, tmp_path: Path, closed_port: int, env: dict, kind_text: str
) -> None:
    env = dict(env)
    if env.get("TINKER_BASE_URL") == "closed":
        env["TINKER_BASE_URL"] = f"http://127.0.0.1:{closed_port}"
    started = time.monotonic()
    code, events, err = run_job(
        tinker_project,
        "train-smoke",
        {"engine": "tinker", "data": "train.jsonl"},
        timeout=60,
        env=job_env(HOME=str(tmp_path), **env),
    )
    elapsed = time.monotonic() - started
    assert code == 1, err[-2000:]
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "engine"
    assert kind_text in events[-1]["message"]
    assert (
        elapsed < 20 + 15
    )  # the 20 s preflight bound plus interpreter start and imports on a loaded machine
    # refused by the pre-flight: not a run, so no run directory is left (jobs.runner)
    assert not Path(events[0]["run_dir"]).exists()
    _no_key_anywhere(tinker_project, err, json.dumps(events))


def test_tinker_checkpoint_address_selects_the_tinker_engine(
    tinker_project: Path, run_job, job_env, tmp_path: Path
) -> None:
    code, events, err = run_job(
        tinker_project,
        "eval-checkpoint",
        {"data": "eval.jsonl", "checkpoint": "tinker://run-1/sampler_weights/step-10"},
        timeout=60,
        env=job_env(HOME=str(tmp_path)),
    )
    assert code == 1
    assert events[-1]["kind"] == "engine" and "no Tinker API key" in events[-1]["message"]
    assert not Path(events[0]["run_dir"]).exists()  # refused by the pre-flight: no run left behind
