"""Long Pi sessions (issue 9): reading and tagging cost must grow linearly with the session.

Builds one Pi v3 session of N exchanges in a single chain (every 7th exchange with a bash tool call and its result,
like a real agent's), then measures per N: `load_turns` time (plain and --trace), time to tag the last turn the way
`machine good --from FILE` does (read + pick the turn + build the record), and the tracemalloc peak of the plain
read. Before this change a 20,000-exchange log took 15.7 s and 3.3 GB to tag one turn (a list per turn).

Usage: python bench/pi_long_session.py [--sizes 1000,10000,20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from machine_lsp.core.tagging import build_record  # noqa: E402
from machine_lsp.core.transcripts import load_turns, turn_at  # noqa: E402


def pi_log(exchanges: int) -> str:
    lines: list[dict] = [{"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/p"}]
    parent = None

    def add(entry_id: str, message: dict) -> None:
        nonlocal parent
        lines.append(
            {"type": "message", "id": entry_id, "parentId": parent, "timestamp": "t", "message": message}
        )
        parent = entry_id

    for i in range(exchanges):
        add(f"u{i}", {"role": "user", "content": f"question {i}: what is in the file?"})
        if i % 7 == 0:
            call = {
                "type": "toolCall",
                "id": f"c{i}",
                "name": "bash",
                "arguments": {"command": "cat notes.txt"},
            }
            add(f"t{i}", {"role": "assistant", "content": [call], "stopReason": "toolUse"})
            result = [{"type": "text", "text": "notes " * 10}]
            add(f"r{i}", {"role": "toolResult", "toolCallId": f"c{i}", "toolName": "bash", "content": result})
        text = [{"type": "text", "text": f"The file holds notes ({i})."}]
        add(
            f"a{i}",
            {"role": "assistant", "content": text, "stopReason": "stop", "model": "m", "provider": "p"},
        )
    return "\n".join(msgspec.json.encode(line).decode() for line in lines) + "\n"


def timed(func) -> tuple[float, object]:
    gc.collect()
    start = time.perf_counter()
    value = func()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,20000")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for size in (int(n) for n in args.sizes.split(",")):
            path = Path(scratch) / f"pi-{size}.jsonl"
            path.write_text(pi_log(size))
            plain_s, turns = timed(lambda p=path: load_turns(p))
            trace_s, _ = timed(lambda p=path: load_turns(p, trace=True))
            tag_s, record = timed(lambda p=path: build_record(turn_at(load_turns(p), None), "good"))
            gc.collect()
            tracemalloc.start()
            load_turns(path)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            rows.append(
                {
                    "exchanges": size,
                    "lines": size * 2 + (size + 6) // 7 * 2 + 1,
                    "mb": round(path.stat().st_size / 1e6, 1),
                    "turns": len(turns),
                    "plain_s": round(plain_s, 2),
                    "trace_s": round(trace_s, 2),
                    "tag_last_s": round(tag_s, 2),
                    "peak_mb": round(peak / 1e6, 1),
                    "last_turn_messages": len(record.messages),
                }
            )
    table = Table(title="Pi long sessions: read and tag (linear)")
    for key in rows[0]:
        table.add_column(key, justify="right")
    for row in rows:
        table.add_row(*(str(value) for value in row.values()))
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
