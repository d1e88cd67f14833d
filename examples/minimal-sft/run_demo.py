"""`make demo`: the whole minimal-sft loop, headless, on the embedded local model, with the real `machine` CLI.

    python run_demo.py [--scope auto|off] [--steps 30] [--seed 0] [--workdir demo]

Stages (each one a `machine` command, printed before it runs; the CLI draws the progress bars):
corpus -> validate -> tag the rows into the store -> scaffold SFT -> smoke -> eval init -> baseline -> retrain
(scoped with anchor rows, gated on the held-out rows) -> evaluate checkpoint -> compare -> bleed probe. The work
directory (default `demo/` next to this script, git-ignored) is recreated on every run and made its own machine-lsp
project (`demo/.machine/`). Wall time per stage goes to `demo/timings.json`.

`--scope off` trains on the arithmetic rows alone (no anchor rows), for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
PROBE_RESULT = "eval_results/probe-trained.json"
console = Console()


@dataclass
class Stage:
    name: str
    argv: list[str]
    more: list[list[str]] = field(default_factory=list)  # further commands of the same stage, run in turn
    seconds: float = 0.0
    rc: int | None = None
    extra: dict[str, str] = field(default_factory=dict)


def machine_argv() -> list[str]:
    """The `machine` console script of this interpreter's environment (the module when it is not installed)."""
    script = Path(sys.executable).parent / "machine"
    return [str(script)] if script.exists() else [sys.executable, "-m", "machine_lsp.cli.main"]


def shown(argv: Sequence[str]) -> str:
    parts = list(argv)
    if parts[: len(machine_argv())] == machine_argv():
        parts = ["machine", *parts[len(machine_argv()) :]]
    if parts[0] == sys.executable:
        parts[0] = "python"
    return shlex.join(parts)


def latest_checkpoint(project: Path) -> str:
    """The final checkpoint address of the newest finished `retrain` (or `train-run`) in the project's store."""
    best: tuple[str, str] | None = None
    for manifest_path in (project / ".machine" / "runs").glob("*/manifest.json"):
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if manifest.get("job") not in ("train-run", "retrain") or manifest.get("status") != "done":
            continue
        address = manifest.get("last_checkpoint")
        if address and (best is None or manifest["created_at"] > best[0]):
            best = (manifest["created_at"], address)
    if best is None:
        raise RuntimeError(f"no finished train-run with a checkpoint under {project / '.machine' / 'runs'}")
    return best[1]


def print_probe(path: Path) -> None:
    """The bleed probe's questions and the checkpoint's actual answers, from the probe's result file."""
    probe = json.loads(path.read_text(encoding="utf-8"))["probe"]
    table = Table(
        title=f"bleed probe: {probe['bled']}/{probe['n']} answers took the trained format ({path.name})"
    )
    table.add_column("question")
    table.add_column("checkpoint's answer")
    table.add_column("probe set")
    table.add_column("bleeds", justify="center")
    for row in probe["rows"]:
        table.add_row(row["question"], row["output"], row["source"], "[red]yes[/]" if row["bleeds"] else "no")
    console.print(table)


def run_stage(index: int, total: int, stage: Stage, cwd: Path) -> None:
    console.rule(f"[bold cyan][{index}/{total}] {stage.name}")
    console.print(
        f"[dim]$ {shown(stage.argv)}" + (f"  (and {len(stage.more)} more like it)" if stage.more else "")
    )
    start = time.perf_counter()
    for argv in [stage.argv, *stage.more]:
        proc = subprocess.run(argv, cwd=cwd, check=False, stdout=subprocess.DEVNULL if stage.more else None)
        stage.rc = proc.returncode
        if proc.returncode != 0:
            raise SystemExit(
                f"run_demo: stage '{stage.name}' failed with exit code {proc.returncode}: {shown(argv)}"
            )
    stage.seconds = time.perf_counter() - start
    console.print(f"[dim]{stage.name}: {stage.seconds:.1f} s (exit 0)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--scope",
        choices=("auto", "off"),
        default="auto",
        help="anchor rows in the run (default auto; off: none)",
    )
    p.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    p.add_argument("--train", type=int, default=48, metavar="N")
    p.add_argument("--eval", type=int, default=24, metavar="N")
    p.add_argument(
        "--workdir", type=Path, default=HERE / "demo", help="recreated on every run (default demo/)"
    )
    return p.parse_args(argv)


def stages_before_checkpoint(args: argparse.Namespace) -> list[Stage]:
    """corpus -> validate -> tag -> scaffold -> smoke -> eval init -> baseline -> retrain (in the work directory)."""
    m = machine_argv()
    corpus = [sys.executable, str(HERE / "make_corpus.py"), "--out", "data", "--seed", str(args.seed)]
    corpus += ["--train", str(args.train), "--eval", str(args.eval)]
    tags = [[*m, "good", "--from", f"data/train.jsonl:{line}"] for line in range(1, args.train + 1)]
    sft = [*m, "train", "sft", "--engine", "local", "--eval-data", "data/eval.jsonl"]
    retrain = [*m, "retrain", "--steps", str(args.steps), "--scope", args.scope, "--yes"]
    return [
        Stage("build corpus", corpus),
        Stage("validate", [*m, "train", "validate", "data/train.jsonl", "--eval", "data/eval.jsonl"]),
        Stage(f"tag {args.train} rows", tags[0], more=tags[1:]),
        Stage("scaffold SFT", sft),
        Stage("smoke (2 steps)", [*m, "train", "smoke", "--yes"]),
        Stage("eval init", [*m, "train", "eval", "init"]),
        Stage("baseline", [*m, "train", "eval", "baseline", "--data", "data/eval.jsonl", "--probe", "--yes"]),
        Stage("retrain", retrain),
    ]


def stages_after_checkpoint(checkpoint: str, work: Path) -> list[Stage]:
    """evaluate the checkpoint -> compare with the baseline -> bleed probe (built-in + probe_extra.txt)."""
    m = machine_argv()
    extra = os.path.relpath(HERE / "probe_extra.txt", work)
    evaluate = [*m, "train", "eval", "checkpoint", checkpoint, "--data", "data/eval.jsonl", "--probe"]
    compare = [*m, "train", "eval", "compare", "eval_results/baseline.json", "eval_results/trained.json"]
    probe = [*m, "train", "eval", "probe", checkpoint, "--questions", extra, "--out", PROBE_RESULT, "--yes"]
    return [
        Stage("evaluate checkpoint", [*evaluate, "--out", "eval_results/trained.json", "--yes"]),
        Stage("compare", compare),
        Stage("bleed probe", probe),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work: Path = args.workdir.resolve()
    if work == HERE or HERE.is_relative_to(work):
        raise SystemExit("run_demo: --workdir must be a directory of its own")
    shutil.rmtree(work, ignore_errors=True)
    (work / ".machine").mkdir(parents=True)
    os.environ.pop("MACHINE_HOME", None)  # the work directory is the project

    stages = stages_before_checkpoint(args)
    total = len(stages) + 3
    started = time.perf_counter()
    console.print(
        f"[bold]minimal-sft demo[/] in {work} · scope {args.scope} · {args.steps} steps · seed {args.seed}"
    )
    for i, stage in enumerate(stages, start=1):
        run_stage(i, total, stage, work)

    checkpoint = latest_checkpoint(work)
    tail = stages_after_checkpoint(checkpoint, work)
    for i, stage in enumerate(tail, start=len(stages) + 1):
        run_stage(i, total, stage, work)
    stages += tail
    print_probe(work / PROBE_RESULT)
    wall = time.perf_counter() - started

    table = Table(title=f"minimal-sft demo: wall time per stage (total {wall:.0f} s)")
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for stage in stages:
        table.add_row(stage.name, f"{stage.seconds:.1f}")
    console.print(table)
    record = {
        "scope": args.scope,
        "steps": args.steps,
        "seed": args.seed,
        "checkpoint": checkpoint,
        "total_seconds": round(wall, 1),
        "load_average_at_end": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
        "stages": [
            {
                "name": s.name,
                "command": shown(s.argv),
                "commands": 1 + len(s.more),
                "seconds": round(s.seconds, 1),
            }
            for s in stages
        ],
    }
    (work / "timings.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    console.print(f"[dim]timings: {work / 'timings.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
