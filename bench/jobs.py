"""Job runner benchmark: wall time of `python -m machine_lsp.jobs VERB` children, start to end, as the CLI and the
language server run them (through machine_lsp.jobs.client), and how each one ended.

Cases: `validate` on a 6-row file (the runner's own overhead); `train-smoke` on Tinker with no key, with a key
without the `tml-` prefix, against a closed port and against a server that accepts and never answers (each must
fail with a precise message inside the 20 s preflight bound); `train-smoke` on the local engine (6 rows, batch 4:
imports, model load, 2 steps, one sample). Every case runs in a fresh temporary project with HOME pointing at an
empty directory (no stored Tinker login); medians of --rounds.

Run: .venv/bin/python bench/jobs.py [--rounds 1] [--skip-local] [--skip-silent] [--no-write]
Writes its table into docs/BENCHMARKS.md between the `jobs` markers (see doc_section.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from doc_section import write_generated  # noqa: E402  (bench/ is the script's own folder)

from machine_lsp.jobs import events as ev  # noqa: E402
from machine_lsp.jobs.client import JobProcess, job_command  # noqa: E402

FAKE_KEY = "tml-FAKEKEY0123456789abcdef"
ROWS = [(3, 4), (12, 30), (7, 8), (21, 5), (9, 9), (40, 2)]


@dataclass
class Case:
    label: str
    verb: str
    args: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""


def _project(root: Path) -> Path:
    (root / ".machine").mkdir(parents=True)
    lines = [
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": f"What is {a} plus {b}?"},
                    {"role": "assistant", "content": f"answer: {a + b}"},
                ]
            }
        )
        for a, b in ROWS
    ]
    (root / "train.jsonl").write_text("\n".join(lines) + "\n")
    return root


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINKER_") and k != "MACHINE_HOME"}
    env.update(HOME=str(home), TINKER_TELEMETRY="0", PYTHONPATH=str(REPO), MACHINE_TORCH_THREADS="1")
    env.update(extra)
    return env


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


def run_case(case: Case) -> tuple[float, str]:
    """(wall seconds from spawn to exit, how it ended) for one fresh run of `case`."""
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        project = _project(Path(tmp) / "proj")
        started = time.perf_counter()
        job = JobProcess.start(job_command(case.verb, case.args), cwd=project, env=_env(Path(tmp), case.env))
        for _line in job:
            pass
        outcome = job.wait(grace_s=120)
        wall = time.perf_counter() - started
    final = outcome.final
    message = final.message if isinstance(final, ev.Done | ev.Error) else f"exit {outcome.returncode}"
    if FAKE_KEY in message:
        raise SystemExit("the fake key leaked into a job message")
    return wall, f"{outcome.status}: {' '.join(message.split())[:90]}"


def cases(skip_local: bool, skip_silent: bool) -> Iterator[Case]:
    smoke = {"engine": "tinker", "data": "train.jsonl"}
    yield Case("`validate` on a 6-row file", "validate", {"path": "train.jsonl"}, note="runner overhead")
    yield Case("`train-smoke --engine tinker`, no key", "train-smoke", smoke)
    yield Case(
        "`train-smoke --engine tinker`, key without `tml-`",
        "train-smoke",
        smoke,
        {"TINKER_API_KEY": "sk-not-a-tinker-key"},
    )
    yield Case(
        "`train-smoke --engine tinker`, closed port",
        "train-smoke",
        smoke,
        {"TINKER_API_KEY": FAKE_KEY, "TINKER_BASE_URL": f"http://127.0.0.1:{_closed_port()}"},
    )
    if not skip_silent:
        yield Case(
            "`train-smoke --engine tinker`, a server that accepts and never answers",
            "train-smoke",
            smoke,
            {"TINKER_API_KEY": FAKE_KEY, "TINKER_BASE_URL": "SILENT"},
            note="preflight bound 20 s",
        )
    if not skip_local:
        yield Case(
            "`train-smoke` local, 6 rows, batch 4",
            "train-smoke",
            {"engine": "local", "data": "train.jsonl", "batch_size": 4},
            note="imports, model load, 2 steps, one 24-token sample",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--skip-local", action="store_true", help="skip the local train-smoke (~25 s)")
    parser.add_argument("--skip-silent", action="store_true", help="skip the silent server case (~25 s)")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    if not args.skip_local:
        from machine_lsp.engines import smollm2

        smollm2.ensure_model()  # converted once and cached; not part of any job's time
    load_start = os.getloadavg()[0]
    lines = ["| job | wall s (median) | how it ended | note |", "|---|---:|---|---|"]
    for case in cases(args.skip_local, args.skip_silent):
        walls, ended = [], ""
        for _ in range(args.rounds):
            if case.env.get("TINKER_BASE_URL") == "SILENT":
                with _silent_server() as port:
                    env = dict(case.env, TINKER_BASE_URL=f"http://127.0.0.1:{port}")
                    wall, ended = run_case(Case(case.label, case.verb, case.args, env))
            else:
                wall, ended = run_case(case)
            walls.append(wall)
        line = f"| {case.label} | {statistics.median(walls):.2f} | {ended.replace('|', '/')} | {case.note} |"
        print(line, flush=True)
        lines.append(line)
    when = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    load = f"load average {load_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
    body = (
        f"_(bench/jobs.py --rounds {args.rounds})_ — measured {when} on {os.cpu_count()} cores, {load}"
        f"{' (other processes shared the cores)' if max(load_start, os.getloadavg()[0]) >= 1.5 else ''}.\n\n"
        + "\n".join(lines)
    )
    print()
    print(body)
    if not args.no_write:
        write_generated("jobs", body, heading="## Jobs and eval")
        print("\nwrote the table into docs/BENCHMARKS.md (## Jobs and eval, between its markers)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
