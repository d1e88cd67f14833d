"""Long session logs through the real language server: tag and hover time, peak memory, event-loop stalls.

For each log format (a generator below; add Claude Code / Codex by listing theirs in FORMATS) and each size
(1k, 10k, 40k entries): open the log, hover on the last assistant entry while pinging the server every 10 ms
(`machine.server.info`; the longest ping answer is the longest stall of the event loop), then tag that entry.
Target: time linear in the entries, no ping waiting more than 100 ms. The turns are built in a worker process
(machine_lsp/lsp/turns.py): its peak memory is reported separately.

Usage: python bench/long_session.py [--sizes 1000,10000,40000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "lsp"))

from raw_client import RawClient  # noqa: E402


def pi_log(entries: int) -> tuple[str, int]:
    """A Pi v3 session log of `entries` message entries (user / assistant alternating, one chain) and the 1-based
    line of its last assistant entry."""
    lines = [json.dumps({"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/w"})]
    parent = None
    for index in range(entries):
        role = "user" if index % 2 == 0 else "assistant"
        entry_id = f"e{index:06d}"
        text = f"{role} turn {index}: " + "some words of the conversation " * 4
        message = {"role": role, "content": text if role == "user" else [{"type": "text", "text": text}]}
        lines.append(
            json.dumps(
                {"type": "message", "id": entry_id, "parentId": parent, "timestamp": "t", "message": message}
            )
        )
        parent = entry_id
    last_assistant = len(lines) if entries % 2 == 0 else len(lines) - 1
    return "\n".join(lines) + "\n", last_assistant


#: format name -> generator(entries) -> (text, line of an assistant entry to hover and tag)
FORMATS: dict[str, Callable[[int], tuple[str, int]]] = {"pi": pi_log}


def rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_peak_rss_mb(pid: int) -> float:
    """Peak RSS of the server's child processes (the turns worker), summed."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                total += rss_peak_mb(int(child))
            except OSError:
                continue
    return total


def measure(client: RawClient, path: Path, text: str, line: int) -> dict[str, float]:
    uri = client.open(path, text)
    client.call("workspace/executeCommand", {"command": "machine.server.info"})  # the open is handled
    started = time.perf_counter()
    hover_id = client.request(
        "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": line - 1, "character": 0}}
    )
    # Pings while the hover runs: each is answered only when the event loop gets to it.
    waits = []
    while hover_id not in client.responses and time.perf_counter() - started < 300:
        sent = time.perf_counter()
        client.call("workspace/executeCommand", {"command": "machine.server.info"}, timeout=300)
        waits.append(time.perf_counter() - sent)
        time.sleep(0.01)
    hover = client.reply(hover_id, timeout=300)
    hover_s = time.perf_counter() - started
    assert "result" in hover and hover["result"], hover
    started = time.perf_counter()
    tagged = client.call(
        "workspace/executeCommand",
        {"command": "machine.tag", "arguments": [{"uri": uri, "line": line, "verdict": "good"}]},
        timeout=300,
    )
    tag_s = time.perf_counter() - started
    assert "result" in tagged, tagged
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return {
        "hover_s": hover_s,
        "tag_s": tag_s,
        "pings": len(waits),
        "max_ping_ms": max(waits, default=0) * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,40000")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    results = []
    for name, generate in FORMATS.items():
        for size in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                (root / ".machine").mkdir()
                client = RawClient(root)
                client.initialize()
                text, line = generate(size)
                row = {"format": name, "entries": size, "mb": len(text) / 1e6}
                row.update(measure(client, root / "session.jsonl", text, line))
                row["peak_rss_mb"] = rss_peak_mb(client.proc.pid)
                row["worker_peak_rss_mb"] = children_peak_rss_mb(client.proc.pid)
                client.close()
                results.append(row)
    print(
        "| format | entries | MB | hover s | tag s | longest ping wait ms | server peak RSS MB | worker peak RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['format']} | {r['entries']} | {r['mb']:.1f} | {r['hover_s']:.2f} | {r['tag_s']:.2f} "
            f"| {r['max_ping_ms']:.0f} | {r['peak_rss_mb']:.0f} | {r['worker_peak_rss_mb']:.0f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
