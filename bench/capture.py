"""Capture benchmark: reading 50 MB harness logs, and the language server's first code action on one.

The logs are built from logs the real harnesses wrote (tests/fixtures/claude_code/claude-code-2.1.332-echo-hi.jsonl,
tests/fixtures/codex/rollout-0.171.0-echo-hi.jsonl) by repeating them with fresh ids as ONE ever-growing session
(each copy continues the previous one): the worst case, since every turn's conversation holds everything before it.

Measures, per log: turns/s and MB/s of `load_turns` (plain and --trace); in the real server (stdio, VS Code
capabilities): time from didOpen to the first code-action reply on the log's last assistant line, code-action p50
after that, and hover on that line (the first hover reads the whole buffer; a second one on the unchanged buffer
reuses its turns).

The recording proxy (`--part proxy`, `bench/proxy_bench.py`): added latency per request, streaming time to first
byte and throughput at 8 concurrent streams, through `machine capture proxy` vs direct, against a fast local
endpoint. Its table goes into docs/BENCHMARKS.md between the `capture` markers (unless --no-write); the log tables
are printed (docs/BENCHMARKS.md keeps them by hand, with their notes).

Usage: python bench/capture.py [--part logs|proxy|all] [--mb 50] [--requests 200] [--json out.json] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from doc_section import write_generated  # noqa: E402  (bench/ is the script's own folder)
from proxy_bench import measure as measure_proxy  # noqa: E402
from proxy_bench import table as proxy_table  # noqa: E402

from machine_lsp.core.transcripts import load_turns  # noqa: E402

SERVER = [sys.executable, "-m", "machine_lsp.lsp"]
CLAUDE = ROOT / "tests" / "fixtures" / "claude_code" / "claude-code-2.1.332-echo-hi.jsonl"
CODEX = ROOT / "tests" / "fixtures" / "codex" / "rollout-0.171.0-echo-hi.jsonl"


def grow_claude(target_bytes: int) -> str:
    lines = [json.loads(line) for line in CLAUDE.read_text().splitlines() if line.strip()]
    out: list[str] = []
    size = 0
    copy = 0
    last_uuid: str | None = None
    while size < target_bytes:
        tail = last_uuid
        for obj in lines:
            obj = json.loads(json.dumps(obj))
            if "uuid" in obj:
                obj["uuid"] = f"{obj['uuid']}-{copy}"
                parent = obj.get("parentUuid")
                obj["parentUuid"] = f"{parent}-{copy}" if parent else tail
                last_uuid = obj["uuid"]
            message = obj.get("message")
            if isinstance(message, dict) and isinstance(message.get("id"), str):
                message["id"] = f"{message['id']}-{copy}"
            text = json.dumps(obj, separators=(",", ":"))
            out.append(text)
            size += len(text) + 1
        copy += 1
    return "\n".join(out) + "\n"


def grow_codex(target_bytes: int) -> str:
    lines = [json.loads(line) for line in CODEX.read_text().splitlines() if line.strip()]
    out: list[str] = []
    size = 0
    copy = 0
    while size < target_bytes:
        for obj in lines:
            if copy and obj.get("type") == "session_meta":
                continue
            obj = json.loads(json.dumps(obj))
            payload = obj.get("payload")
            if isinstance(payload, dict):
                for key in ("call_id", "id"):
                    if isinstance(payload.get(key), str) and obj.get("type") == "response_item":
                        payload[key] = f"{payload[key]}-{copy}"
            text = json.dumps(obj, separators=(",", ":"))
            out.append(text)
            size += len(text) + 1
        copy += 1
    return "\n".join(out) + "\n"


def read_speed(path: Path, trace: bool) -> dict:
    started = time.perf_counter()
    turns = load_turns(path, trace=trace)
    seconds = time.perf_counter() - started
    mb = path.stat().st_size / 1e6
    return {
        "turns": len(turns),
        "seconds": round(seconds, 2),
        "turns_per_s": round(len(turns) / seconds, 1),
        "mb_per_s": round(mb / seconds, 1),
    }


async def server_times(path: Path, text: str) -> dict:
    turns = load_turns(path)
    last_line0 = max(turn.end_line for turn in turns) - 1
    client: LanguageClient = await ClientServerConfig(server_command=SERVER).start()
    client.feature("machine/jobEvent")(lambda params: None)
    results: dict = {}
    try:
        await client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities("visual-studio-code"),
                root_uri=path.parent.as_uri(),
                initialization_options={"machine": {"debounceMs": 0, "maxFileMB": 128}},
            )
        )
        uri = path.as_uri()

        def action_params(line0: int) -> types.CodeActionParams:
            return types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(
                    start=types.Position(line=line0, character=0), end=types.Position(line=line0, character=0)
                ),
                context=types.CodeActionContext(diagnostics=[]),
            )

        opened = time.perf_counter()
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="jsonl", version=1, text=text)
            )
        )
        first = await asyncio.wait_for(client.text_document_code_action_async(action_params(last_line0)), 300)
        results["first_code_action_ms"] = round((time.perf_counter() - opened) * 1000, 1)
        results["first_code_action_titles"] = len(first or [])
        latencies = []
        for _ in range(20):
            started = time.perf_counter()
            await asyncio.wait_for(client.text_document_code_action_async(action_params(last_line0)), 60)
            latencies.append((time.perf_counter() - started) * 1000)
        results["code_action_p50_ms"] = round(statistics.median(latencies), 2)
        results["code_action_max_ms"] = round(max(latencies), 2)
        started = time.perf_counter()
        await asyncio.wait_for(
            client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    position=types.Position(line=last_line0, character=2),
                )
            ),
            600,
        )
        results["hover_ms"] = round((time.perf_counter() - started) * 1000, 1)
        started = time.perf_counter()  # the same unchanged buffer again: its turns are kept
        await asyncio.wait_for(
            client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    position=types.Position(line=last_line0, character=4),
                )
            ),
            600,
        )
        results["hover_again_ms"] = round((time.perf_counter() - started) * 1000, 1)
        await asyncio.wait_for(client.shutdown_session(), 30)
    finally:
        if client._server is not None and client._server.returncode is None:
            client._server.kill()
        await client.stop()
    return results


def logs_part(mb: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="machine-capture-bench-"))
    (tmp / ".machine").mkdir()
    target = int(mb * 1e6)
    results = {}
    for name, grow in (("claude_code", grow_claude), ("codex", grow_codex)):
        text = grow(target)
        path = tmp / f"{name}.jsonl"
        path.write_text(text)
        row: dict = {"mb": round(len(text.encode()) / 1e6, 1), "lines": text.count("\n")}
        row["plain"] = read_speed(path, trace=False)
        row["trace"] = read_speed(path, trace=True)
        row["server"] = asyncio.run(server_times(path, text))
        results[name] = row
        print(f"{name}: {json.dumps(row)}", file=sys.stderr)
    return results


def logs_table(results: dict) -> str:
    lines = [
        "| log | MB | lines | plain turns | plain s | plain turns/s | trace turns | trace s | trace turns/s "
        "| first code action ms | code action p50 ms | hover on last line ms | hover again ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results.items():
        plain, trace, server = row["plain"], row["trace"], row["server"]
        lines.append(
            f"| {name} | {row['mb']} | {row['lines']} | {plain['turns']} | {plain['seconds']} | {plain['turns_per_s']} "
            f"| {trace['turns']} | {trace['seconds']} | {trace['turns_per_s']} | {server['first_code_action_ms']} "
            f"| {server['code_action_p50_ms']} | {server['hover_ms']} | {server['hover_again_ms']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=("logs", "proxy", "all"), default="all")
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--requests", type=int, default=200, help="proxy: sequential requests measured")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-write", action="store_true", help="do not update docs/BENCHMARKS.md")
    args = parser.parse_args()
    results: dict = {}
    sections = []
    load_start = os.getloadavg()[0]
    if args.part in ("logs", "all"):
        results["logs"] = logs_part(args.mb)
        sections.append(logs_table(results["logs"]))
    if args.part in ("proxy", "all"):
        results["proxy"] = measure_proxy(args.requests, 8)
        sections.append(proxy_table(results["proxy"], args.requests, 8))
    when = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    mb = f" --mb {args.mb:g}" if args.part != "proxy" else ""
    load = f"load average {load_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
    body = (
        f"_(bench/capture.py --part {args.part}{mb} --requests {args.requests})_ — measured {when} on "
        f"{os.cpu_count()} cores, {load}.\n\n" + "\n\n".join(sections)
    )
    print()
    print(body)
    if not args.no_write and "proxy" in results:  # the log tables are kept by hand, with their notes
        proxy_body = body.split("\n\n", 1)[0] + "\n\n" + sections[-1]
        write_generated(
            "capture", proxy_body, heading="### The recording proxy (`bench/capture.py --part proxy`)"
        )
        print("\nwrote the proxy table into docs/BENCHMARKS.md (between the capture markers)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
