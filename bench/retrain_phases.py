"""Where a `machine retrain` spends its time, phase by phase, on the bench/loop.py case (20 tagged rows).

A fresh project gets --tags `answer: N` rows in the store (four sessions, as `machine good` would write them); then
the `retrain` job runs --runs times in a row (run 2 on the same rows plus --more new tags, with run 1's checkpoint
promoted: the reference is then a checkpoint, not the base). Each phase's seconds are read from the job's own record
(the manifest's `result.timings`, written by jobs/phase_clock.py), next to the job's wall time from this script.
Run: MACHINE_TORCH_THREADS=1 nice -n 10 .venv/bin/python bench/retrain_phases.py [--tags 20] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
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

from machine_lsp.core import runs  # noqa: E402
from machine_lsp.core.schema import Message, Source, TagRecord  # noqa: E402
from machine_lsp.core.store import Store  # noqa: E402


def tag(project: Path, first: int, n: int, tools: list[dict[str, Any]] | None = None) -> None:
    """`n` good `answer: N` tags from question `first` on, over four sessions; with `tools`, tagged where those
    tools were offered (an agent's context)."""
    store = Store.open(project)
    for a in range(first, first + n):
        store.append(
            TagRecord(
                id=f"r{a}",
                verdict="good",
                messages=[
                    Message(role="user", content=f"What is {a + 3} plus {2 * a + 5}?"),
                    Message(role="assistant", content=f"answer: {3 * a + 8}"),
                ],
                source=Source(
                    kind="session_log",
                    uri=f"file:///logs/s{a % 4}.jsonl",
                    line=a + 1,
                    end_line=a + 1,
                    session_id=f"s{a % 4}",
                ),
                created_at="2026-12-03T10:00:00.000Z",
                tool_version="0.1.0",
                extra={"tools": tools} if tools else {},
            )
        )


def retrain(project: Path) -> tuple[float, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k not in ("MACHINE_HOME", "TINKER_API_KEY")}
    env.update(PYTHONPATH=str(REPO), MACHINE_TORCH_THREADS=env.get("MACHINE_TORCH_THREADS", "1"))
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "machine_lsp.jobs", "retrain", "--args-json", "{}"],
        cwd=project,
        capture_output=True,
        env=env,
        timeout=3600,
        stdin=subprocess.DEVNULL,
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"retrain failed: {done.stdout.decode()[-3000:]}{done.stderr.decode()[-3000:]}")
    newest = runs.list_runs(project / ".machine" / "runs")[0][1]  # newest first
    assert newest is not None and newest.result is not None
    return wall, newest.result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tags", type=int, default=20)
    parser.add_argument("--more", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    reports = []
    with tempfile.TemporaryDirectory(prefix="machine-phases-") as tmp:
        project = Path(tmp)
        (project / ".machine").mkdir()
        tag(project, 0, args.tags)
        for n in range(args.runs):
            if n:
                tag(project, args.tags + (n - 1) * args.more, args.more)
            wall, result = retrain(project)
            reports.append((wall, result))
    print_table(reports, args, load)


def print_table(reports: list[tuple[float, dict[str, Any]]], args: argparse.Namespace, load: float) -> None:
    from rich.console import Console
    from rich.table import Table

    threads = os.environ.get("MACHINE_TORCH_THREADS", "1")
    table = Table(title=f"machine retrain by phase, {args.tags} tags, MACHINE_TORCH_THREADS={threads}")
    table.add_column("phase")
    for n, (_wall, result) in enumerate(reports, start=1):
        ref = (result.get("gate") or {}).get("metrics", {}) or {}
        table.add_column(f"run {n} (s; reference {ref.get('reference', '?')})", justify="right")
    phases: list[str] = []
    for _wall, result in reports:
        phases += [p for p in result.get("timings", {}) if p not in phases]
    for phase in phases:
        table.add_row(phase, *(_cell(r.get("timings", {}).get(phase)) for _w, r in reports))
    table.add_row("job wall time (process start to exit)", *(f"{w:.1f}" for w, _r in reports))
    console = Console(width=140)
    console.print(table)
    for n, (_wall, result) in enumerate(reports, start=1):
        cache = result.get("greedy_cache")
        reason = (result.get("gate") or {}).get("reason")
        console.print(
            f"run {n}: {result.get('steps_run')} steps; greedy answers cache {json.dumps(cache)}; {reason}"
        )
    console.print(
        f"load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} "
        f"cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def _cell(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


if __name__ == "__main__":
    main()
