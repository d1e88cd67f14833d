"""The job event protocol: every event round-trips; the wire form matches docs/ARCHITECTURE.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from machine_lsp.jobs import events as ev


def test_wire_form_matches_contract() -> None:
    line = ev.encode_event(
        ev.Step(step=12, total=60, loss=0.42, lr=5e-4, tokens=197, seconds_per_step=3.1, eta_seconds=150.0)
    )
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "event": "step",
        "step": 12,
        "total": 60,
        "loss": 0.42,
        "lr": 5e-4,
        "tokens": 197,
        "seconds_per_step": 3.1,
        "eta_seconds": 150.0,
    }
    start = json.loads(ev.encode_event(ev.Start(job="train-run", run_id="r1", run_dir="/x", total=60)))
    assert start["event"] == "start" and start["total"] == 60 and start["job"] == "train-run"


@pytest.mark.parametrize(
    "event",
    [
        ev.Start(job="validate", run_id="r", run_dir="/r"),
        ev.Step(step=1, total=None, loss=1.5, lr=1e-4, tokens=10, seconds_per_step=0.5),
        ev.Progress(done=5000, total=100000, message="validated 5000/100000 rows"),
        ev.Checkpoint(name="step-10", address="local://r/step-10", step=10),
        ev.Eval(name="baseline", accuracy=0.5, correct=12, n=24, result_path="eval_results/baseline.json"),
        ev.Log(level="warning", message="hm"),
        ev.Done(result={"rows": 3, "nested": {"a": [1, 2]}}, message="ok"),
        ev.Error(message="boom", kind="crash"),
    ],
)
def test_round_trip(event: ev.Event) -> None:
    assert ev.decode_event(ev.encode_event(event)) == event
    assert ev.decode_event(ev.encode_event(event).decode()) == event
    assert ev.event_to_dict(event)["event"] == type(event).__struct_config__.tag


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"", "empty"),
        (b"not json", "not a job event"),
        (b'{"event":"nope"}', "not a job event"),
        (b'{"event":"step","step":"x"}', "not a job event"),
        (b'{"event":"progress"}', "not a job event"),
    ],
)
def test_bad_lines_raise_precise_error(line: bytes, reason: str) -> None:
    with pytest.raises(ev.EventDecodeError, match=reason):
        ev.decode_event(line)


def test_iter_events_skips_blank_lines() -> None:
    lines = [ev.encode_event(ev.Log(message="a")), b"\n", ev.encode_event(ev.Done(message="b"))]
    assert [type(e).__name__ for e in ev.iter_events(lines)] == ["Log", "Done"]


def test_events_module_stays_light() -> None:
    code = (
        "import sys, machine_lsp.jobs.events, machine_lsp.core.runs, machine_lsp.core.evals, machine_lsp.jobs.verbs,"
        " machine_lsp.jobs.runner, machine_lsp.cli.train_commands, machine_lsp.scaffold.support,"
        " machine_lsp.scaffold.writer;"
        "heavy = [m for m in ('torch','transformers','tinker','tinker_cookbook','peft') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
