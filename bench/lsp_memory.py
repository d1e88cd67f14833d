"""Language-server memory over long editing sessions (real server over stdio, push diagnostics).

1. A 10,000-edit session: one-character incremental edits to a 2,000-row chat JSONL file, RSS sampled every 1,000.
2. 12 full replacements of an 8 MB file (each with different rows), then didClose: RSS after each step.
A fixed budget is the target: RSS must level off, not grow with the number of edits or replacements.

Usage: python bench/lsp_memory.py [--edits 10000] [--replacements 12] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "lsp"))

from raw_client import RawClient  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rows(count: int, salt: int) -> str:
    return "".join(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": f"question {salt}-{i}: " + "words " * 20},
                    {"role": "assistant", "content": f"answer {salt}-{i}: " + "more words " * 20},
                ]
            }
        )
        + "\n"
        for i in range(count)
    )


def info(client: RawClient) -> dict:
    return client.call("workspace/executeCommand", {"command": "machine.server.info"}, timeout=300)["result"]


def edit_session(client: RawClient, root: Path, edits: int) -> list[tuple[int, float, int]]:
    uri = client.open(root / "edits.jsonl", rows(2000, 0))
    samples = [(0, rss_mb(client.proc.pid), info(client)["open_requests"])]
    for version in range(2, edits + 2):
        line = version % 2000
        change = {
            "range": {"start": {"line": line, "character": 1}, "end": {"line": line, "character": 1}},
            "text": " ",
        }
        client.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]},
        )
        if (version - 1) % 1000 == 0:
            samples.append((version - 1, rss_mb(client.proc.pid), info(client)["open_requests"]))
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return samples


def replacements(client: RawClient, root: Path, count: int) -> list[tuple[str, float]]:
    per_row = len(rows(1, 0))
    row_count = 8 * 1024 * 1024 // per_row
    uri = client.open(root / "big.jsonl", rows(row_count, 0))
    info(client)
    samples = [("open", rss_mb(client.proc.pid))]
    for step in range(1, count + 1):
        client.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": step + 1},
                "contentChanges": [{"text": rows(row_count, step)}],
            },
        )
        client.wait_notification(
            "textDocument/publishDiagnostics", lambda p, v=step + 1: p.get("version") == v, 300
        )
        samples.append((f"replace {step}", rss_mb(client.proc.pid)))
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    info(client)
    samples.append(("closed", rss_mb(client.proc.pid)))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=10_000)
    parser.add_argument("--replacements", type=int, default=12)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / ".machine").mkdir()
        client = RawClient(root)
        client.initialize()
        edits = edit_session(client, root, args.edits)
        full = replacements(client, root, args.replacements)
        client.close()
    print("| edits | server RSS MB | request futures held |")
    print("|---:|---:|---:|")
    for count, mb, futures in edits:
        print(f"| {count} | {mb:.0f} | {futures} |")
    print()
    print("| 8 MB file | server RSS MB |")
    print("|---|---:|")
    for step, mb in full:
        print(f"| {step} | {mb:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"edits": edits, "replacements": full}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
