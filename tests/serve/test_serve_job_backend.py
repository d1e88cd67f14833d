"""The editors' `serve` job loads its model through the CLI's seam (`llama_backend.load_backend`) with the CLI's
defaults: the real job (`python -m machine_lsp.jobs serve`, as the language server starts it) on the serve suite's
trained checkpoint serves the llama.cpp backend's default GGUF (the file is mapped in the job's process) and answers
as `machine serve` (the suite's `trained_server`, llama.cpp with its defaults) answers, token for token."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from serve_helpers import ServeProcess, env

QUESTION = {"messages": [{"role": "user", "content": "What is 12 plus 30?"}], "max_tokens": 8, "model": "m"}


def run_job(project: Path, args: dict) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "machine_lsp.jobs", "serve", "--args-json", json.dumps(args)]
    return subprocess.Popen(
        argv, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env()
    )


def events_until(job: subprocess.Popen[str], kinds: set[str], timeout: float = 300) -> list[dict]:
    """The job's events up to the first of `kinds` (or its end)."""
    assert job.stdout is not None
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    for line in job.stdout:
        seen.append(json.loads(line))
        if seen[-1]["event"] in kinds or time.monotonic() > deadline:
            break
    return seen


def answer(url: str) -> str:
    reply = httpx.post(f"{url}/v1/chat/completions", json=QUESTION, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


@pytest.mark.slow
def test_serve_job_loads_like_the_cli(trained_project: Path, trained_server: ServeProcess) -> None:
    from machine_lsp.engines import gguf_export
    from machine_lsp.serve.checkpoints import resolve

    job = run_job(trained_project, {"checkpoint": "latest", "port": 0, "no_log": True, "follow": False})
    try:
        events = events_until(job, {"ready", "error", "done"})
        assert events[-1]["event"] == "ready", events
        loading = [e["message"] for e in events if e["event"] == "progress"]
        default = gguf_export.DEFAULT_TYPE
        assert any(f"with llama.cpp ({default} GGUF)" in m for m in loading), loading
        directory = resolve("latest", trained_project / ".machine").directory
        assert directory is not None
        served = gguf_export.cached_model_path(directory, default)
        assert str(served) in Path(f"/proc/{job.pid}/maps").read_text()  # llama.cpp mmaps the GGUF it serves
        assert answer(events[-1]["url"]) == answer(trained_server.root)
    finally:
        job.send_signal(signal.SIGTERM)
        out, _ = job.communicate(timeout=60)
    assert job.returncode == 0 and json.loads(out.splitlines()[-1])["event"] == "done"


def test_serve_job_refuses_a_backend_it_does_not_have(tmp_path: Path) -> None:
    (tmp_path / ".machine").mkdir()
    for args, reason in [
        ({"backend": "vllm"}, "backend must be one of llama.cpp, torch, not 'vllm'"),
        ({"gguf_type": "q4_0"}, "gguf_type must be one of f32, f16, q8_0, not 'q4_0'"),
        ({"backend": "torch", "gguf_type": "f16"}, "gguf_type is the llama.cpp backend's GGUF"),
    ]:
        job = run_job(tmp_path, {"checkpoint": "base", "port": 0, **args})
        out, _ = job.communicate(timeout=120)
        error = json.loads(out.splitlines()[-1])
        assert error["event"] == "error" and error["kind"] == "usage" and reason in error["message"], error
