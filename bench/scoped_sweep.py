"""Why a scoped retrain is sized and weighted as it is (core.run_plan, engines.render.token_weighted), measured.

For N tagged `answer: N` turns in 4 sessions (bench/retrain_phases.py's store), one real `machine retrain` job on the
embedded SmolLM2 per contender, each in a fresh project (the base model's greedy answers are shared through the
answer cache, so the anchors and the reference's answers are the same for all three):

* before:   the rule of the previous release: whole epochs at batch 8 (a step count set to what it gave) and the
            cookbook's per-row mean loss (`loss_weighting = "row"`);
* sizing:   this release's sizing (the step floor, a grown batch), per-row mean loss;
* now:      the defaults: this release's sizing and every trained token weighing the same.

Each run ends with the eval gate: held-out tagged rows answered right (base 0), the format rate on them, and the
share of the 12 off-distribution bleed probes answered in the taught format (the gate refuses above 10%).

    MACHINE_TORCH_THREADS=2 python bench/scoped_sweep.py            # prints the table (~10 min on 2 cores)
    MACHINE_TORCH_THREADS=2 python bench/scoped_sweep.py --write    # and writes it into docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_section import write_generated  # noqa: E402
from retrain_phases import retrain, tag  # noqa: E402

from machine_lsp.core import run_plan  # noqa: E402

TAG_COUNTS = (12, 24, 60, 120)
CONTENDERS = ("before", "sizing", "now")


def run_job(project: Path, toml: str) -> tuple[float, dict[str, Any]]:
    (project / "machine.toml").write_text(f"[train]\n{toml}\n")
    return retrain(project)


def old_steps(plan: dict[str, Any]) -> int:
    """The steps the previous release's rule gave these rows: whole epochs at the configured batch."""
    size = run_plan.size_run(
        plan["rows"],
        plan.get("grown_from") or plan["batch_size"],
        trained_tokens_per_epoch=round(plan["trained_tokens"] * plan["batches_per_epoch"] / plan["steps"]),
    )
    return size.steps


def sweep(root: Path) -> list[dict[str, Any]]:
    cache = root / "greedy-cache"
    results = []
    for n in TAG_COUNTS:
        plan: dict[str, Any] = {}
        for name in ("now", "sizing", "before"):  # "now" first: its plan gives the old rule's step count
            project = root / f"{name}-{n}"
            (project / ".machine").mkdir(parents=True)
            if cache.exists():
                shutil.copytree(cache, project / ".machine" / "cache" / "greedy")
            tag(project, 0, n)
            toml = {
                "now": "",
                "sizing": 'loss_weighting = "row"',
                "before": f'loss_weighting = "row"\nsteps = {old_steps(plan) if plan else 0}',
            }[name]
            wall, result = run_job(project, toml)
            if name == "now":
                plan = dict(
                    result["plan"],
                    batches_per_epoch=-(-result["plan"]["rows"] // result["plan"]["batch_size"]),
                )
            greedy = project / ".machine" / "cache" / "greedy"
            if greedy.exists():
                shutil.copytree(greedy, cache, dirs_exist_ok=True)
            gate = result.get("gate") or {}
            metrics = gate.get("metrics") or {}
            results.append(
                {
                    "tags": n,
                    "contender": name,
                    "rows": result["plan"]["rows"],
                    "anchors": result["plan"].get("anchors", 0),
                    "steps": result.get("steps_run"),
                    "batch": result["plan"]["batch_size"],
                    "right": f"{metrics.get('candidate_correct')}/{metrics.get('eval_rows')}",
                    "format": metrics.get("candidate_format_rate"),
                    "bleed": metrics.get("candidate_bleed_rate"),
                    "promoted": gate.get("promoted"),
                    "seconds": wall,
                }
            )
            print(results[-1], flush=True)
    return results


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| tags | contender | rows (anchors) | steps x batch | held-out right | format | bleed | gate | job s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['tags']} | {r['contender']} | {r['rows']} ({r['anchors']}) | {r['steps']} x {r['batch']} | "
            f"{r['right']} | {pct(r['format'])} | {pct(r['bleed'])} | "
            f"{'promoted' if r['promoted'] else 'refused'} | {r['seconds']:.0f} |"
        )
    threads = os.environ.get("MACHINE_TORCH_THREADS", "1")
    lines.append("")
    lines.append(
        f"One run per cell, MACHINE_TORCH_THREADS={threads}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
    )
    lines.append("")
    lines.append(
        "\"now\" runs first for each tag count and samples the base model's answers (anchors, the gate's reference); "
        "the other two read them from the answer cache, hence its longer job time."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="machine-scoped-") as tmp:
        results = sweep(Path(tmp))
    text = table(results)
    print(text)
    if args.write:
        write_generated("scoped_sweep", text, heading="## A scoped retrain: steps, batch and loss weighting")


if __name__ == "__main__":
    main()
