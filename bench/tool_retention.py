"""Tool retention through a style retrain, measured with a base model that calls tools (issue 18's third measure).

The embedded SmolLM2-135M calls a tool on none of the gate's tool probes, bare or inside an agent's system prompt
and tools (docs/TRAINING.md), so against it the gate's tool retention is "not measurable". This script makes a base
that does call tools and runs the product's loop on it, unchanged:

1. *Teacher*: a project tags --tool-rows tool-call turns (user request -> assistant `tool_calls`, with the OpenAI
   `tools` declared; requests unlike the gate's probes) and trains on them (`train-run`, scope off). The checkpoint's
   LoRA is merged into a plain transformers directory: the tool-calling base.
2. *Style*: a fresh project names that directory as `[train] model`, tags --tags `answer: N` turns (as
   bench/retrain_phases.py) and runs `machine retrain` with its defaults, with `[train] scope = "auto"` (the
   default: anchors) and with `"off"`; the style rows asked bare, and asked where the same tools are offered (an
   agent's context: there a taught style can take the place of a tool call). Each gate samples its reference (that
   base) and the candidate on the 10 built-in tool probes and counts the probes where the base calls a tool and the
   candidate still does.

Run: MACHINE_TORCH_THREADS=2 .venv/bin/python bench/tool_retention.py [--tags 20] [--tool-rows 32]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.retrain_phases import tag as tag_style  # noqa: E402
from machine_lsp.core import runs  # noqa: E402
from machine_lsp.core.schema import Message, Source, TagRecord, ToolCall, ToolFunction  # noqa: E402
from machine_lsp.core.store import Store  # noqa: E402
from machine_lsp.core.tool_probes import LIST_FILES, READ_FILE, RUN_SHELL, WEATHER  # noqa: E402

ALL_TOOLS = (READ_FILE, LIST_FILES, RUN_SHELL, WEATHER)
# (tool, argument, request): none is one of the gate's probes (core/tool_probes.py) or a rewording of one.
TEACHER_REQUESTS: tuple[tuple[dict[str, Any], str, str], ...] = (
    *(
        (READ_FILE, p, f"Please read {p} for me.")
        for p in ("notes.md", "app/main.py", "CHANGELOG", "Makefile")
    ),
    *(
        (READ_FILE, p, f"What is written in {p}?")
        for p in ("todo.txt", "LICENSE", "src/util.rs", "index.html")
    ),
    *((LIST_FILES, d, f"What is inside the {d} folder?") for d in ("lib", "tests", "assets", "scripts")),
    *((LIST_FILES, d, f"Give me a listing of {d}.") for d in ("build", "examples", "bin", "config")),
    *((RUN_SHELL, c, f"Execute `{c}`.") for c in ("git status", "make", "npm test", "cargo build")),
    *((RUN_SHELL, c, f"Please run {c} in the shell.") for c in ("uname -a", "df -h", "whoami", "date")),
    *((WEATHER, c, f"How is the weather in {c} today?") for c in ("Berlin", "Lima", "Oslo", "Cairo")),
    *((WEATHER, c, f"Is it raining in {c}?") for c in ("Madrid", "Seoul", "Denver", "Nairobi")),
)


def tag_tool_calls(project: Path, n: int) -> None:
    store = Store.open(project)
    for i, (tool, value, request) in enumerate(TEACHER_REQUESTS[:n]):
        fn = tool["function"]
        argument = next(iter(fn["parameters"]["properties"]))
        call = ToolCall(
            id=f"call_{i}", function=ToolFunction(name=fn["name"], arguments=json.dumps({argument: value}))
        )
        store.append(
            TagRecord(
                id=f"t{i}",
                verdict="good",
                messages=[
                    Message(role="user", content=request),
                    Message(role="assistant", content="", tool_calls=[call]),
                ],
                source=Source(
                    kind="session_log",
                    uri=f"file:///logs/tools{i % 4}.jsonl",
                    line=i + 1,
                    end_line=i + 1,
                    session_id=f"tools{i % 4}",
                ),
                created_at="2026-12-04T10:00:00.000Z",
                tool_version="0.1.0",
                trace=True,
                extra={"tools": list(ALL_TOOLS)},
            )
        )


def job(project: Path, verb: str) -> tuple[float, dict[str, Any], Path]:
    env = {k: v for k, v in os.environ.items() if k not in ("MACHINE_HOME", "TINKER_API_KEY")}
    env.update(PYTHONPATH=str(REPO), MACHINE_TORCH_THREADS=env.get("MACHINE_TORCH_THREADS", "2"))
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "machine_lsp.jobs", verb, "--args-json", "{}"],
        cwd=project,
        capture_output=True,
        env=env,
        timeout=7200,
        stdin=subprocess.DEVNULL,
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{verb} failed: {done.stdout.decode()[-3000:]}{done.stderr.decode()[-3000:]}")
    run_dir, manifest = runs.list_runs(project / ".machine" / "runs")[0]  # newest first
    assert manifest is not None and manifest.result is not None
    return wall, manifest.result, run_dir


def merged_base(run_dir: Path, out: Path) -> Path:
    """The run's last checkpoint's LoRA merged into the embedded model: a transformers directory."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from machine_lsp.engines import smollm2

    base = smollm2.model_dir()
    checkpoints = sorted((run_dir / "checkpoints").iterdir(), key=lambda p: p.stat().st_mtime)
    lm = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    merged = PeftModel.from_pretrained(lm, str(checkpoints[-1])).merge_and_unload()
    merged.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(out))
    shutil.copy(base / smollm2.MARKER_FILE, out / smollm2.MARKER_FILE)  # the same chat format as SmolLM2
    return out


def project_with(root: Path, name: str, toml: str) -> Path:
    project = root / name
    (project / ".machine").mkdir(parents=True)
    (project / "machine.toml").write_text(toml)
    return project


ARMS = (
    "auto-bare",
    "off-bare",
    "auto-tools",
    "off-tools",
)  # [train] scope, then how the style rows are asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tags", type=int, default=20)
    parser.add_argument("--tool-rows", type=int, default=len(TEACHER_REQUESTS))
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument(
        "--keep-base", type=Path, help="keep the tool-calling base here (reused when it exists)"
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="machine-tools-") as tmp:
        root = Path(tmp)
        model = args.keep_base or root / "tool-base"
        teacher_wall, teacher_result = 0.0, {"steps_run": "reused"}
        if not (model / "config.json").is_file():
            teacher = project_with(root, "teacher", '[train]\nscope = "off"\n')
            tag_tool_calls(teacher, args.tool_rows)
            teacher_wall, teacher_result, teacher_run = job(teacher, "train-run")
            merged_base(teacher_run, model)
        reports = []
        for arm in args.arms.split(","):
            scope, context = arm.split("-")
            toml = f'[train]\nmodel = "{model}"\nscope = "{scope}"\n'
            project = project_with(root, f"style-{arm}", toml)
            tag_style(project, 0, args.tags, list(ALL_TOOLS) if context == "tools" else None)
            wall, result, _run = job(project, "retrain")
            reports.append((f"{scope}, {context}", wall, result))
    print_table(teacher_wall, teacher_result, reports, args, load)


def print_table(
    teacher_wall: float,
    teacher: dict[str, Any],
    reports: list[tuple[str, float, dict[str, Any]]],
    args: argparse.Namespace,
    load: float,
) -> None:
    from rich.console import Console
    from rich.table import Table

    threads = os.environ.get("MACHINE_TORCH_THREADS", "2")
    table = Table(
        title=f"tool retention through a style retrain, {args.tags} tags, MACHINE_TORCH_THREADS={threads}"
    )
    for column in (
        "[train] scope, style rows asked",
        "steps",
        "tool probes",
        "base calls a tool",
        "kept by the retrained",
        "retention",
        "bleed (base -> new)",
        "held-out right (base -> new)",
        "held-out form (new)",
        "promoted",
        "retrain s",
    ):
        table.add_column(column, justify="left" if column == "[train] scope, style rows asked" else "right")
    for scope, wall, result in reports:
        table.add_row(scope, *_cells(result), f"{wall:.1f}")
    console = Console(width=160)
    console.print(table)
    console.print(
        f"teacher: {args.tool_rows} tool-call rows, {teacher.get('steps_run')} steps, {teacher_wall:.1f} s"
    )
    for scope, _wall, result in reports:
        console.print(f"scope {scope}: {(result.get('gate') or {}).get('reason')}")
        console.print(f"  anchors: {json.dumps(result.get('anchors'))[:300]}")
    console.print(
        f"load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} "
        f"cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def _cells(result: dict[str, Any]) -> list[str]:
    gate = result.get("gate") or {}
    m = gate.get("metrics") or {}
    retention = m.get("tool_retention")
    return [
        str(result.get("steps_run")),
        str(m.get("tool_probes")),
        str(m.get("reference_tool_calls")),
        str(m.get("tool_calls_kept")),
        "not measurable" if retention is None else f"{retention:.0%}",
        f"{m.get('reference_bleed_rate', 0):.0%} -> {m.get('candidate_bleed_rate', 0):.0%}",
        f"{m.get('reference_correct')}/{m.get('eval_rows')} -> {m.get('candidate_correct')}/{m.get('eval_rows')}",
        f"{m.get('candidate_format_rate', 0):.0%}",
        str(gate.get("promoted")),
    ]


if __name__ == "__main__":
    main()
