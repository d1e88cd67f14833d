"""Tinker training loop benchmark against the local SkyRL tx server: pipelined vs one call at a time.

Same Datums (the arithmetic rows, one batch size, so one JAX shape after the warm-up) through the real tinker SDK:

* sequential: `forward_backward(batch).result()`, then `optim_step(...).result()`, per step (two waits per step);
* pipelined (what `tinker_cookbook.supervised.train` does): submit `forward_backward` and `optim_step` back to back
  for step i, then wait on step i-1's results while step i is in flight (about one wait per step).

Also reports the server's start time (when `--serve` starts it), the JAX compile time of each shape from the
server log, and the server's RSS (API + engine processes).

Run: .venv/bin/python bench/tinker_loop.py --serve [--steps 6] [--batch 4]     (starts and stops a server)
     .venv/bin/python bench/tinker_loop.py --base-url http://127.0.0.1:8000     (an already running one)
"""

from __future__ import annotations

import argparse
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


def _sequential(client: Any, batches: list[list[Any]], adam: Any) -> list[float]:
    times = []
    for batch in batches:
        t0 = time.perf_counter()
        client.forward_backward(batch, "cross_entropy").result()
        client.optim_step(adam).result()
        times.append(time.perf_counter() - t0)
    return times


def _pipelined(client: Any, batches: list[list[Any]], adam: Any) -> tuple[list[float], int]:
    times, in_flight_max = [], 0
    pending: tuple[Any, Any] | None = None
    t0 = time.perf_counter()
    for batch in batches:
        submitted = (client.forward_backward(batch, "cross_entropy"), client.optim_step(adam))
        in_flight_max = max(in_flight_max, 2 + (2 if pending else 0))
        if pending is not None:
            pending[0].result()
            pending[1].result()
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
        pending = submitted
    if pending is not None:
        pending[0].result()
        pending[1].result()
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
        import tinker

        from machine_lsp.engines import render
        from machine_lsp.engines.tinker_engine import TinkerEngine

        engine = TinkerEngine(base_url=base_url)
        model = (
            engine.resolve_model(engine.default_model) if engine.preflight().models else engine.default_model
        )
        renderer = engine.renderer(model)
        datums = [render.to_datum(r, renderer, max_length=64) for r in _rows()]
        batches = [datums[(i * args.batch) % len(datums) :][: args.batch] for i in range(args.steps)]
        batches = [b if len(b) == args.batch else datums[: args.batch] for b in batches]
        client = engine.service().create_lora_training_client(base_model=model, rank=8).result()
        adam = tinker.AdamParams(learning_rate=1e-4)
        t0 = time.perf_counter()
        _sequential(client, batches[:1], adam)  # warm-up: compiles the one shape
        rows.append(("warm-up step (includes the compile)", f"{time.perf_counter() - t0:.1f} s"))
        seq = _sequential(client, batches, adam)
        pipe, in_flight = _pipelined(client, batches, adam)
        t0 = time.perf_counter()
        client.forward_backward(batches[0], "cross_entropy").result()
        fb_only = time.perf_counter() - t0
        t0 = time.perf_counter()
        client.optim_step(adam).result()
        optim_only = time.perf_counter() - t0
        rows += [
            ("sequential s/step (median)", f"{sorted(seq)[len(seq) // 2]:.2f}"),
            ("pipelined s/step (median)", f"{sorted(pipe)[len(pipe) // 2]:.2f}"),
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
