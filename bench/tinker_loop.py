"""Tinker training loop benchmark against the local SkyRL tx server: pipelined vs one call at a time.

Same Datums (the arithmetic rows, one batch size, so one JAX shape after the warm-up) through the engine's own
`TinkerTrainer` on the real tinker SDK, i.e. what `machine train run --engine tinker` runs:

* sequential (the loop before it was pipelined): `trainer.forward_backward(batch)`, then `trainer.optim_step(lr)`,
  each waiting on its future (two waits per step);
* pipelined (the job loop now, like `tinker_cookbook.supervised.train`): `trainer.submit_step(batch, lr)` sends
  `forward_backward` and `optim_step` back to back for step i, then step i-1's result is awaited while step i is in
  flight (about one wait per step).

Also reports the server's start time (when `--serve` starts it), the JAX compile time of each shape from the
server log, and the server's RSS (API + engine processes).

Run: .venv/bin/python bench/tinker_loop.py --serve [--steps 6] [--batch 4]     (starts and stops a server)
     .venv/bin/python bench/tinker_loop.py --base-url http://127.0.0.1:8000     (an already running one)
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TINKER_TELEMETRY", "0")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from doc_section import write_generated  # noqa: E402  (bench/ is the script's own folder)
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from machine_lsp.core.schema import Message  # noqa: E402

PAIRS = [(3, 4), (12, 30), (7, 8), (21, 5), (9, 9), (40, 2), (6, 7), (15, 15)]


def _rows() -> list[list[Message]]:
    return [
        [
            Message(role="user", content=f"What is {a} plus {b}?"),
            Message(role="assistant", content=f"answer: {a + b}"),
        ]
        for a, b in PAIRS
    ]


def _rss_mb(pid: int) -> float:
    """Resident memory of `pid`'s process group (the API server and its engine)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ProcessLookupError):
            continue
    return total / 1024


def _compile_times(log: Path) -> list[str]:
    text = " ".join(log.read_text(errors="replace").split()) if log.exists() else ""
    return re.findall(r"JIT compil\w* for \w+ seq_len=\d+[^0-9]*?(?:in|took) [0-9.]+ ?s", text)


def _sequential(trainer: Any, batches: list[list[Any]], lr: float) -> list[float]:
    times = []
    for batch in batches:
        t0 = time.perf_counter()
        trainer.forward_backward(batch)
        trainer.optim_step(lr)
        times.append(time.perf_counter() - t0)
    return times


def _pipelined(trainer: Any, batches: list[list[Any]], lr: float) -> tuple[list[float], int]:
    """The job loop's order (machine_lsp.jobs.train_loop.TrainLoop.run): submit step i, then finish step i-1."""
    times, in_flight_max = [], 0
    pending: Any = None
    t0 = time.perf_counter()
    for batch in batches:
        submitted = trainer.submit_step(batch, lr)
        in_flight_max = max(in_flight_max, 2 + (2 if pending is not None else 0))
        if pending is not None:
            pending.result()
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
        pending = submitted
    if pending is not None:
        pending.result()
        times.append(time.perf_counter() - t0)
    return times, in_flight_max


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", help="a running server (default: start one with --serve)")
    parser.add_argument(
        "--serve", action="store_true", help="start a local server for the benchmark, then stop it"
    )
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--nice", type=int, default=15)
    parser.add_argument(
        "--no-write", action="store_true", help="do not write the table into docs/BENCHMARKS.md"
    )
    args = parser.parse_args()
    console = Console()
    rows: list[tuple[str, str]] = []
    machine_dir: Path | None = None
    record = None
    if args.serve:
        from machine_lsp.tinker_server import process

        machine_dir = Path(tempfile.mkdtemp(prefix="tinker-bench-")) / ".machine"
        t0 = time.perf_counter()
        record = process.start(machine_dir, nice=args.nice, progress=lambda m: console.print(f"[dim]{m}[/]"))
        rows.append(("server start (venv ready, to engine loaded)", f"{time.perf_counter() - t0:.1f} s"))
        base_url = record.base_url
    elif args.base_url:
        base_url = args.base_url
    else:
        parser.error("pass --serve or --base-url")
    try:
        from machine_lsp.engines import render
        from machine_lsp.engines.base import LoraSettings
        from machine_lsp.engines.tinker.tinker_engine import TinkerEngine

        engine = TinkerEngine(base_url=base_url)
        model = (
            engine.resolve_model(engine.default_model) if engine.preflight().models else engine.default_model
        )
        renderer = engine.renderer(model)
        datums = [render.to_datum(r, renderer, max_length=64) for r in _rows()]
        batches = [datums[(i * args.batch) % len(datums) :][: args.batch] for i in range(args.steps)]
        batches = [b if len(b) == args.batch else datums[: args.batch] for b in batches]
        trainer = engine.create_trainer(
            model, LoraSettings(rank=8), Path(tempfile.mkdtemp(prefix="tinker-bench-run-"))
        )
        lr = 1e-4
        t0 = time.perf_counter()
        _sequential(trainer, batches[:1], lr)  # warm-up: compiles the one shape
        rows.append(("warm-up step (includes the compile)", f"{time.perf_counter() - t0:.1f} s"))
        seq = _sequential(trainer, batches, lr)
        pipe, in_flight = _pipelined(trainer, batches, lr)
        t0 = time.perf_counter()
        trainer.forward_backward(batches[0])
        fb_only = time.perf_counter() - t0
        t0 = time.perf_counter()
        trainer.optim_step(lr)
        optim_only = time.perf_counter() - t0
        rows += [
            (
                "sequential s/step (median: forward_backward, then optim_step)",
                f"{sorted(seq)[len(seq) // 2]:.2f}",
            ),
            (
                "pipelined s/step (median: submit_step, one step in flight)",
                f"{sorted(pipe)[len(pipe) // 2]:.2f}",
            ),
            ("pipelined requests in flight (max)", str(in_flight)),
            ("forward_backward alone", f"{fb_only:.2f} s"),
            ("optim_step alone", f"{optim_only:.2f} s"),
        ]
        if record is not None:
            rows.append(("server RSS (API + engine)", f"{_rss_mb(record.pid):.0f} MB"))
            rows += [("JAX compile", line) for line in _compile_times(Path(record.log))]
    finally:
        if machine_dir is not None:
            from machine_lsp.tinker_server import process

            process.stop(machine_dir)
    table = Table(title=f"Tinker loop on SkyRL tx ({args.steps} steps, batch {args.batch})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    when = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    body = (
        f"_(bench/tinker_loop.py {'--serve ' if args.serve else ''}--steps {args.steps} --batch {args.batch})_ — "
        f"measured {when} on {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
        "SmolLM2-135M, LoRA rank 8, one JAX shape.\n\n| measure | value |\n| --- | ---: |\n"
        + "\n".join(f"| {name} | {value} |" for name, value in rows)
    )
    if not args.no_write:
        write_generated("tinker_loop", body, heading="## Tinker loop against the local SkyRL tx server")
        console.print("wrote the table into docs/BENCHMARKS.md (between its tinker_loop markers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
