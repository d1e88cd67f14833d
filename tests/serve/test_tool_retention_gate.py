"""The gate's tool retention, measured for real: a retrain whose base model calls tools.

The embedded SmolLM2 calls no tool on the gate's tool probes, so against it retention is "not measurable"
(tests/jobs/test_job_gate.py). Here the serve suite's trained checkpoint (taught a bash call; tests/serve/conftest.py)
is merged into a plain transformers directory and named as `[train] model`: the base of a new project that tags
`answer: N` rows and runs the real `retrain` job. Its gate samples that base and the candidate on the 10 built-in tool
probes; the record must count the probes where the base calls a tool and how many the candidate kept, and the
verdict must follow the configured bound. bench/tool_retention.py is the full measurement (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from anchor_project import tag_rows  # tests/jobs (pytest's pythonpath)

from machine_lsp.core import runs
from machine_lsp.engines import smollm2


def _merged(checkpoint: Path, out: Path) -> Path:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = smollm2.model_dir()
    lm = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    PeftModel.from_pretrained(lm, str(checkpoint)).merge_and_unload().save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(out))
    shutil.copy(base / smollm2.MARKER_FILE, out / smollm2.MARKER_FILE)  # SmolLM2's chat format
    return out


@pytest.mark.slow
def test_the_gate_counts_tool_calls_kept_against_a_base_that_calls_tools(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    model = _merged(trained_checkpoint, tmp_path / "tool-base")
    project = tmp_path / "project"
    (project / ".machine").mkdir(parents=True)
    (project / "machine.toml").write_text(f'[train]\nmodel = "{model}"\n')
    tag_rows(project, 12)
    done = subprocess.run(
        [sys.executable, "-m", "machine_lsp.jobs", "retrain", "--args-json", json.dumps({"steps": 2})],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=1800,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    manifest = runs.list_runs(project / ".machine" / "runs")[0][1]
    assert manifest is not None and manifest.gate is not None
    metrics = manifest.gate["metrics"]
    assert metrics["reference"] == "base" and metrics["tool_probes"] == 10
    assert metrics["reference_tool_calls"] > 0, metrics  # this base calls tools: retention is measured
    kept, called = metrics["tool_calls_kept"], metrics["reference_tool_calls"]
    assert 0 <= kept <= called and metrics["tool_retention"] == pytest.approx(kept / called)
    reason = manifest.gate["reason"]
    if kept / called < 0.9:  # [gate] min_tool_retention's default: refused, and the reason says so
        assert manifest.gate["promoted"] is False and f"tool calls kept on {kept}/{called}" in reason, reason
    elif manifest.gate["promoted"]:
        assert f"tool calls kept {kept}/{called}" in reason, reason
