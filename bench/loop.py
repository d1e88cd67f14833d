"""The loop, measured with the real parts: tag -> `machine retrain` -> the running `machine serve promoted` swaps.

A fresh project; `machine serve promoted` on 127.0.0.1 (the base SmolLM2, nothing promoted yet). --tags arithmetic
questions are asked through it and each served turn is tagged with `machine good --from FILE:LINE --as "answer: N"`
(the CLI, as a user would). Then, with the server still up:

* loop latency: from the last tag to the first answer written by the new checkpoint (`machine retrain` with its
  defaults: sized from the rows, scoped with anchors, gated; the server swaps on the promotion by itself);
* style: --questions new arithmetic questions, answered in the `answer: N` form (evals.format_ok);
* bleed: the first --probes of evals.BUILTIN_PROBES answered in that form (evals.bleeds);
* tool retention: the gate's own tool probe (core/tool_probes.py) from the run's manifest: of the probes where the
  reference (the base) calls a tool, how many the new checkpoint still calls one on;
* swap under load: 4 clients stream back to back while the served checkpoint is rolled back to base and promoted
  again; every request that fails, or whose logged checkpoint is neither, is counted.
* the loop again (--more, 4 by default): that many more tags, `machine retrain` against the promoted checkpoint
  (its reference answers now largely cached), and its latency, or the gate's reason when it promotes nothing;
* where each retrain's time went: the job's own `timings` and greedy-answer cache counts.

All requests are greedy (temperature 0). Plain API requests, no agent prompt: tests/serve/test_loop_pi.py runs
the same loop with the real Pi. Run: MACHINE_TORCH_THREADS=1 .venv/bin/python bench/loop.py [--tags 20]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine_lsp.core import evals, promotions, runs  # noqa: E402

WAIT_S = 1800.0  # bounds for a loaded machine, not expectations
TAGGED = [(a + 3, 2 * a + 5) for a in range(40)]
NEW = [(a + 50, a + 17) for a in range(10)]


def machine(project: Path, *argv: str, timeout: float = WAIT_S) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise SystemExit(f"machine {' '.join(argv)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MACHINE_HOME", "TINKER_API_KEY")}
    env.update(PYTHONPATH=str(REPO), MACHINE_TORCH_THREADS=env.get("MACHINE_TORCH_THREADS", "1"))
    return env


class Server:
    """`machine serve promoted` in the project, on a free 127.0.0.1 port, kept up for the whole benchmark."""

    def __init__(self, project: Path, max_tokens: int) -> None:
        self.project = project
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "machine_lsp.cli.main", "serve", "promoted", "--port", str(free_port())]
            + ["--max-tokens", str(max_tokens)],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=_env(),
            stdin=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "serving CHECKPOINT at http://127.0.0.1:PORT/v1 ..."
        if not line.startswith("serving "):
            self.proc.kill()
            raise SystemExit(f"machine serve did not start: {line!r}")
        self.url = next(w for w in line.split() if w.startswith("http://")).rstrip(";/")
        self.root = self.url.removesuffix("/v1")

    def health(self) -> dict[str, Any]:
        return httpx.get(self.root + "/health", timeout=60).json()

    def ask(self, question: str, max_tokens: int = 32) -> str:
        body = {
            "model": "machine",
            "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        reply = httpx.post(self.url + "/chat/completions", json=body, timeout=WAIT_S)
        reply.raise_for_status()
        return reply.json()["choices"][0]["message"]["content"] or ""

    def wait_for(self, checkpoint: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.health()["checkpoint"] != checkpoint:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the server did not swap to {checkpoint}: {self.health()}")
            time.sleep(0.1)

    def rows(self) -> list[tuple[Path, int, dict[str, Any]]]:
        out = []
        for path in sorted((self.project / ".machine" / "served").glob("*.jsonl")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                out.append((path, number, json.loads(line)))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def question(a: int, b: int) -> str:
    return f"What is {a} plus {b}?"


def tag(server: Server, project: Path, first: int, n: int) -> None:
    """Ask TAGGED[first:first+n] through the server, then tag each of those served turns with its `answer: N`."""
    wanted = {question(a, b): a + b for a, b in TAGGED[first : first + n]}
    logged = len(server.rows())
    for asked in wanted:
        server.ask(asked)
    for path, number, row in server.rows()[logged:]:
        total = wanted[str(row["messages"][-2]["content"])]
        machine(project, "good", "--from", f"{path}:{number}", "--as", f"answer: {total}")


def retrain_and_swap(server: Server, project: Path) -> dict[str, Any]:
    """Loop latency: the last tag is done; retrain, wait for the swap, ask once."""
    start = time.monotonic()
    machine(project, "retrain", "--yes")
    trained = time.monotonic()
    promoted = promotions.read_log(project / ".machine").current()
    gate = retrain_result(project).get("gate") or {}
    if promoted is None or not gate.get("promoted"):
        return {"refused": gate.get("reason") or "no gate verdict", "retrain_s": trained - start}
    server.wait_for(promoted)
    swapped = time.monotonic()
    first = server.ask(question(*NEW[0]))
    done = time.monotonic()
    return {
        "checkpoint": promoted,
        "retrain_s": trained - start,
        "swap_s": swapped - trained,
        "latency_s": done - start,
        "first_answer": first,
    }


def retrain_result(project: Path) -> dict[str, Any]:
    """The newest retrain's result: its gate, its seconds per phase and its greedy-answer cache counts."""
    manifests = [m for _, m in runs.list_runs(project / ".machine" / "runs") if m and m.gate]  # newest first
    return dict(manifests[0].result or {}) if manifests else {}


class Streamer(threading.Thread):
    """One client streaming chat completions back to back until told to stop; failures are kept."""

    def __init__(self, server: Server, index: int, until: threading.Event) -> None:
        super().__init__(daemon=True)
        self.server, self.index, self.until = server, index, until
        self.done = 0
        self.failures: list[str] = []

    def run(self) -> None:
        with httpx.Client(timeout=WAIT_S) as client:
            while not self.until.is_set():
                try:
                    self._one(client)
                    self.done += 1
                except Exception as exc:  # counted: the benchmark reports every failure
                    self.failures.append(f"{type(exc).__name__}: {exc}")

    def _one(self, client: httpx.Client) -> None:
        a, b = NEW[(self.index + self.done) % len(NEW)]
        body = {
            "model": "machine",
            "messages": [{"role": "user", "content": question(a, b)}],
            "max_tokens": 24,
            "stream": True,
        }
        finished = None
        with client.stream("POST", self.server.url + "/chat/completions", json=body) as reply:
            if reply.status_code != 200:
                raise RuntimeError(f"status {reply.status_code}")
            for line in reply.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    finished = json.loads(line[6:])["choices"][0].get("finish_reason") or finished
        if finished not in ("stop", "length"):
            raise RuntimeError("stream ended without a finish reason")


def swap_under_load(server: Server, project: Path, checkpoint: str) -> dict[str, Any]:
    """4 streams while the server swaps to base and back to the new checkpoint."""
    logged_before = len(server.rows())
    stop = threading.Event()
    clients = [Streamer(server, i, stop) for i in range(4)]
    for client in clients:
        client.start()
    time.sleep(2)
    machine(project, "train", "rollback")
    server.wait_for("base")
    machine(project, "train", "promote", checkpoint)
    server.wait_for(checkpoint)
    time.sleep(2)
    stop.set()
    for client in clients:
        client.join(WAIT_S)
    rows = [row for _, _, row in server.rows()[logged_before:]]
    mixed = [r for r in rows if r.get("checkpoint") not in ("base", checkpoint)]
    return {
        "requests": sum(c.done for c in clients) + sum(len(c.failures) for c in clients),
        "failed": sum(len(c.failures) for c in clients),
        "mixed": len(mixed) + abs(len(rows) - sum(c.done for c in clients)),
        "swaps": server.health()["swaps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tags", type=int, default=20)
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--more", type=int, default=4, help="tags added before a second retrain (0: none)")
    args = parser.parse_args()
    from machine_lsp.engines import smollm2

    smollm2.ensure_model()
    with tempfile.TemporaryDirectory(prefix="machine-loop-bench-") as tmp:
        project = Path(tmp)
        (project / ".machine").mkdir()
        server = Server(project, args.max_tokens)
        try:
            report = measure(server, project, args)
        finally:
            server.stop()
    print_table(report, args)


def measure(server: Server, project: Path, args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    tag(server, project, 0, args.tags)
    tagged_s = time.monotonic() - started
    loop = retrain_and_swap(server, project)
    if "refused" in loop:
        raise SystemExit(f"the first retrain promoted nothing: {loop['refused']}")
    first = retrain_result(project)
    styled = sum(evals.format_ok(server.ask(question(a, b))) for a, b in NEW[: args.questions])
    bleed_rx = evals.compile_pattern(evals.default_bleed_pattern(), "bleed pattern")
    probes = evals.BUILTIN_PROBES[: args.probes]
    bled = sum(evals.bleeds(server.ask(q, 48), bleed_rx) for q in probes)
    swap = swap_under_load(server, project, loop["checkpoint"])
    again: dict[str, Any] = {}
    if args.more:  # the loop once more: a few more tags, retrain against the promoted checkpoint, swap
        tag(server, project, args.tags, args.more)
        again = retrain_and_swap(server, project) | {"result": retrain_result(project)}
    return {
        **loop,
        "tagged_s": tagged_s,
        "styled": styled,
        "bled": bled,
        "probes": len(probes),
        "gate": (first.get("gate") or {}).get("metrics") or {},
        "result": first,
        "again": again,
        "swap": swap,
        "load": (load_start, os.getloadavg()[0]),
    }


def print_table(report: dict[str, Any], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    gate, swap = report["gate"], report["swap"]
    base_calls = gate.get("reference_tool_calls")
    kept = (
        f"{gate['tool_calls_kept']}/{base_calls}"
        if base_calls
        else f"not measurable (the base calls a tool on 0 of {gate.get('tool_probes', '?')} probes)"
    )
    table = Table(
        title=f"machine retrain loop, {args.tags} tags, MACHINE_TORCH_THREADS={_env()['MACHINE_TORCH_THREADS']}"
    )
    for column in ("measure", "result", "target"):
        table.add_column(column)
    table.add_row("loop latency (last tag -> first new answer)", f"{report['latency_s']:.1f} s", "<= 60 s")
    table.add_row("  of which retrain (train + gate)", f"{report['retrain_s']:.1f} s", "")
    table.add_row("  of which swap (promoted -> serving)", f"{report['swap_s']:.1f} s", "")
    again = report["again"]
    add_second_loop(table, again, args.more)
    table.add_row("new questions in the taught style", f"{report['styled']}/{args.questions}", ">= 9/10")
    table.add_row("bleed on probes", f"{report['bled']}/{report['probes']}", "<= 1/10")
    table.add_row("tool calls kept (gate's tool probe)", kept, ">= 90%")
    table.add_row(
        "swap under 4 streams: failed / mixed-up requests",
        f"{swap['failed']} / {swap['mixed']} of {swap['requests']} ({swap['swaps']} swaps)",
        "0",
    )
    console = Console(width=120)
    console.print(table)
    console.print(
        f"first answer of the new checkpoint: {report['first_answer']!r}; tagging took {report['tagged_s']:.0f} s"
    )
    keys = ("eval_rows", "candidate_correct", "reference_correct", "mcnemar_p", "candidate_bleed_rate")
    console.print(f"gate: {json.dumps({k: gate.get(k) for k in keys})}")
    console.print(phase_table(report["result"], (again or {}).get("result")))
    console.print(
        f"load average (1 min) {report['load'][0]:.1f} at the start, {report['load'][1]:.1f} at the end, "
        f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def add_second_loop(table: Any, again: dict[str, Any], more: int) -> None:
    """The second loop's rows: its latency, or the gate's reason when it promoted nothing (then nothing swaps)."""
    if again.get("refused"):
        table.add_row(
            f"loop again: {more} more tags, retrain",
            f"{again['retrain_s']:.1f} s; gate refused, no swap: {again['refused']}",
            "",
        )
    elif again:
        table.add_row(f"loop again: {more} more tags, latency", f"{again['latency_s']:.1f} s", "<= 60 s")
        table.add_row(
            "  of which retrain / swap", f"{again['retrain_s']:.1f} s / {again['swap_s']:.1f} s", ""
        )


def phase_table(first: dict[str, Any], second: dict[str, Any] | None) -> Any:
    """Seconds per phase of each retrain, from the job's own record (`timings`), with its answer-cache counts."""
    from rich.table import Table

    results = [r for r in (first, second) if r]
    table = Table(title="where each retrain's time went (seconds, from the job's result)")
    table.add_column("phase")
    for n, result in enumerate(results, start=1):
        reference = ((result.get("gate") or {}).get("metrics") or {}).get("reference", "?")
        table.add_column(f"retrain {n} (reference {reference})", justify="right")
    phases: list[str] = []
    for result in results:
        phases += [p for p in result.get("timings", {}) if p not in phases]
    for phase in phases:
        cells = [result.get("timings", {}).get(phase) for result in results]
        table.add_row(phase, *("-" if c is None else f"{c:.1f}" for c in cells))
    table.add_row("greedy answers: cached / sampled", *(_cache(r) for r in results))
    return table


def _cache(result: dict[str, Any]) -> str:
    cache = result.get("greedy_cache") or {}
    return f"{cache.get('hits', '?')} / {cache.get('sampled', '?')}"


if __name__ == "__main__":
    main()
