"""The Tinker engine up to the network boundary: no key, bad key, closed port, silent server, offline rendering.

Each service case runs in a fresh child process (the SDK leaves threads behind when a call is abandoned) and
must fail with a precise message inside its time bound. HOME points at an empty directory so no stored login is
used, and a fake key must never appear in the output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_KEY = "tml-FAKEKEY0123456789abcdef"

PROBE = r"""
import json, os, sys, time
import tinker  # imported first so the measured time is the preflight's own bound, not a loaded machine's import
from machine_lsp.engines.tinker import tinker_engine as te
t0 = time.monotonic()
try:
    te.preflight(timeout=float(sys.argv[1]))
    out = {"ok": True}
except te.TinkerUnavailable as exc:
    out = {"ok": False, "reason": exc.reason, "message": str(exc)}
out["seconds"] = time.monotonic() - t0
print(json.dumps(out), flush=True)
os._exit(0)
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINKER_")}
    env.update(HOME=str(tmp_path), TINKER_TELEMETRY="0", PYTHONPATH=str(REPO))
    env.update(extra)
    return env


def te_bound() -> float:
    """The preflight's default deadline (20 s)."""
    from machine_lsp.engines.tinker import tinker_engine as te

    return te.PREFLIGHT_TIMEOUT_S


def _preflight(tmp_path: Path, bound: float = 20.0, **env: str) -> tuple[dict, float, str]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(bound)],
        capture_output=True,
        text=True,
        timeout=bound + 40,  # + interpreter start and `import tinker` on a loaded machine
        env=_env(tmp_path, **env),
    )
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall, proc.stdout + proc.stderr


# Timing: assert only the bound that is the feature (the preflight answers within its deadline), with room for a
# loaded 2-core machine; how fast each case is goes in bench/jobs.py, not here (CONTRIBUTING.md, "Speed").
ROOM_S = 10.0


def test_missing_key(tmp_path: Path, closed_port: int) -> None:
    out, _, text = _preflight(tmp_path, TINKER_BASE_URL=f"http://127.0.0.1:{closed_port}")
    assert out["ok"] is False and out["reason"] == "missing-key"
    assert "TINKER_API_KEY" in out["message"] and "--engine local" in out["message"]
    assert out["seconds"] < te_bound() + ROOM_S


def test_bad_key_without_prefix(tmp_path: Path) -> None:
    out, _, text = _preflight(tmp_path, TINKER_API_KEY="sk-not-a-tinker-key")
    assert out == {"ok": False, "reason": "bad-key", "message": out["message"], "seconds": out["seconds"]}
    assert "start with 'tml-'" in out["message"] and out["seconds"] < te_bound() + ROOM_S
    assert "sk-not-a-tinker-key" not in text


def test_closed_local_port(tmp_path: Path, closed_port: int) -> None:
    port = closed_port
    out, _, text = _preflight(tmp_path, TINKER_API_KEY=FAKE_KEY, TINKER_BASE_URL=f"http://127.0.0.1:{port}")
    assert out["ok"] is False and out["reason"] == "refused"
    assert f"127.0.0.1:{port}" in out["message"] and "connection refused" in out["message"]
    assert out["seconds"] < te_bound() + ROOM_S
    assert FAKE_KEY not in text


def test_server_that_accepts_but_never_answers_is_bounded(tmp_path: Path, silent_server: int) -> None:
    out, _, text = _preflight(
        tmp_path, bound=4.0, TINKER_API_KEY=FAKE_KEY, TINKER_BASE_URL=f"http://127.0.0.1:{silent_server}"
    )
    assert out["ok"] is False and out["reason"] == "timeout"
    assert "did not answer within 4 s" in out["message"]
    assert 3.5 < out["seconds"] < 4.0 + ROOM_S  # it waited for its 4 s bound, and no longer
    assert FAKE_KEY not in text


def test_tinker_paths() -> None:
    from machine_lsp.engines.base import EngineError
    from machine_lsp.engines.tinker import tinker_engine as te

    addr = "tinker://run-123/sampler_weights/step-10"
    assert te.split_tinker_path(addr) == ("run-123", "sampler_weights", "step-10")
    assert te.state_path_for(addr) == "tinker://run-123/weights/step-10"
    assert te.sampler_path_for("tinker://run-123/weights/final") == "tinker://run-123/sampler_weights/final"
    for bad in ("tinker://run/foo/x", "tinker://run/weights", "local://r/x", "tinker:///weights/x"):
        with pytest.raises(EngineError):
            te.split_tinker_path(bad)


def test_inkling_renders_offline_into_the_same_datums() -> None:
    """The default Tinker model and its recommended renderer work offline; rows become weighted Datums."""
    from machine_lsp.core.schema import Message
    from machine_lsp.engines import render
    from machine_lsp.engines.tinker.tinker_engine import DEFAULT_MODEL, TinkerEngine

    engine = TinkerEngine()
    assert engine.renderer_name(DEFAULT_MODEL) == "tml_v0"
    renderer = engine.renderer(DEFAULT_MODEL)
    msgs = [Message(role="user", content="What is 2 + 3?"), Message(role="assistant", content="answer: 5")]
    datum = render.to_datum(msgs, renderer)
    inputs, targets, weights = render.datum_tokens(datum)
    assert len(inputs) == len(targets) == len(weights) > 5
    assert sum(weights) == pytest.approx(1.0)  # cookbook "mean" reduction
    trained = [t for t, w in zip(targets, weights, strict=True) if w > 0]
    tok = engine.tokenizer(DEFAULT_MODEL)
    assert "answer: 5" in tok.decode(trained)
    prompt = renderer.build_generation_prompt(render.cookbook_messages(msgs[:1]))
    assert prompt.length < len(inputs)
