"""The recording proxy's cost, side by side with talking to the endpoint directly (used by bench/capture.py).

A fast local endpoint (its own process, aiohttp) answers Chat Completions at once: whole, or streamed as server-sent
events. `machine capture proxy` (the real CLI, its own process, recording into a temporary store) sits in front of
it. Measured from this process with aiohttp, direct vs through the proxy:
- added latency per request: the median of sequential unstreamed requests (a 30 KB agent-sized body);
- streaming time to first byte: the endpoint sends one event, waits 20 ms, then the rest; TTFB is the first event's
  arrival (a proxy that buffered would show the whole stream's time);
- throughput at 8 concurrent streams: 8 clients each streaming answers of 200 events back to back (the better of
  two rounds per path).
Direct and proxied requests alternate one by one, so on a shared machine both see the same load.

Run on its own: python bench/proxy_bench.py [--requests 200] [--streams 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
STREAM_EVENTS = 200
FIRST_EVENT_GAP_S = 0.02


def _chunk(text: str, finish: str | None = None) -> bytes:
    delta = {"content": text} if text else {}
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def _answer(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if not body.get("stream"):
        message = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return web.json_response(
            {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
        )
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(_chunk("first "))
    if body.get("gap"):
        await asyncio.sleep(FIRST_EVENT_GAP_S)
    for index in range(int(body.get("events", STREAM_EVENTS))):
        await response.write(_chunk(f"token{index} "))
    await response.write(_chunk("", "stop") + b"data: [DONE]\n\n")
    return response


def serve_endpoint(port_file: Path) -> None:
    """The fast endpoint: writes its port to `port_file`, serves until killed."""

    async def run() -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", _answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_file.write_text(str(site._server.sockets[0].getsockname()[1]))  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(run())


def _start_endpoint(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port_file = tmp / "endpoint.port"
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.proxy_bench import serve_endpoint; "
    code += f"from pathlib import Path; serve_endpoint(Path({str(port_file)!r}))"
    process = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text():
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit("the bench endpoint did not start")
        time.sleep(0.05)
    return process, f"http://127.0.0.1:{port_file.read_text()}"


def _start_proxy(upstream: str, tmp: Path) -> tuple[subprocess.Popen[str], str]:
    code = "import sys; from machine_lsp.cli.main import main; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MACHINE_HOME": str(tmp / ".machine")}
    argv = [sys.executable, "-c", code, "capture", "proxy", "--upstream", upstream, "--port", "0"]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready, _, _ = select.select([process.stdout], [], [], 60) if process.stdout else ([], [], [])
    line = process.stdout.readline() if ready and process.stdout else ""
    if not line.startswith("recording proxy at "):
        raise SystemExit(f"the proxy did not start: {line!r}")
    return process, line.split()[3]


AGENT_BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are a coding agent. " * 600},
        {"role": "user", "content": "Please run `echo hi`."},
    ],
}


async def _latencies(client: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        async with client.post(f"{url}/v1/chat/completions", json=AGENT_BODY) as response:
            await response.read()
        out.append((time.perf_counter() - started) * 1000)
    return out


async def _ttfbs(client: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    out = []
    body = {**AGENT_BODY, "stream": True, "gap": True, "events": 20}
    for _ in range(count):
        started = time.perf_counter()
        async with client.post(f"{url}/v1/chat/completions", json=body) as response:
            await response.content.readuntil(b"\n\n")
            out.append((time.perf_counter() - started) * 1000)
            await response.read()
    return out


async def _throughput(url: str, streams: int, per_stream: int) -> dict[str, float]:
    body = {**AGENT_BODY, "stream": True, "events": STREAM_EVENTS}
    received = 0

    async def one(client: aiohttp.ClientSession) -> None:
        nonlocal received
        for _ in range(per_stream):
            async with client.post(f"{url}/v1/chat/completions", json=body) as response:
                data = await response.read()  # not `received += len(await ...)`: that loads `received` first
                received += len(data)

    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=streams)) as client:
        await asyncio.gather(*(one(client) for _ in range(streams)))
    seconds = time.perf_counter() - started
    return {
        "streams_per_s": round(streams * per_stream / seconds, 1),
        "mb_per_s": round(received / seconds / 1e6, 2),
    }


async def _measure(urls: dict[str, str], requests: int, streams: int) -> dict[str, dict[str, float]]:
    """Direct and proxied requests alternate one by one, so both paths see the same load on a shared machine."""
    latency: dict[str, list[float]] = {name: [] for name in urls}
    ttfb: dict[str, list[float]] = {name: [] for name in urls}
    async with aiohttp.ClientSession() as client:
        for url in urls.values():
            await _latencies(client, url, 10)  # warm up both paths (connections, imports)
        for _ in range(requests):
            for name, url in urls.items():
                latency[name] += await _latencies(client, url, 1)
        for _ in range(max(20, requests // 5)):
            for name, url in urls.items():
                ttfb[name] += await _ttfbs(client, url, 1)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in urls}
    for _ in range(2):
        for name, url in urls.items():
            rounds[name].append(await _throughput(url, streams, max(5, requests // 20)))
    return {
        name: {
            "latency_p50_ms": round(statistics.median(latency[name]), 2),
            "ttfb_p50_ms": round(statistics.median(ttfb[name]), 2),
            "streams_per_s": max(r["streams_per_s"] for r in rounds[name]),
            "mb_per_s": max(r["mb_per_s"] for r in rounds[name]),
        }
        for name in urls
    }


def measure(requests: int = 200, streams: int = 8) -> dict[str, dict[str, float]]:
    tmp = Path(tempfile.mkdtemp(prefix="machine-proxy-bench-"))
    endpoint, upstream = _start_endpoint(tmp)
    proxy = None
    try:
        proxy, proxied = _start_proxy(upstream, tmp)
        results = asyncio.run(_measure({"direct": upstream, "proxy": proxied}, requests, streams))
    finally:
        for process in (proxy, endpoint):
            if process is not None:
                process.terminate()
                process.wait(30)
    recorded = sum(1 for path in (tmp / ".machine" / "captured").glob("*.jsonl") for _ in path.open())
    return {**results, "recorded": {"exchanges": recorded}}


def table(results: dict[str, dict[str, float]], requests: int, streams: int) -> str:
    direct, proxy = results["direct"], results["proxy"]
    rows = [
        "| path | request latency p50 ms | stream TTFB p50 ms | streams/s at "
        f"{streams} concurrent | MB/s at {streams} concurrent |",
        "|---|---|---|---|---|",
    ]
    for name, row in (("direct", direct), ("through the proxy", proxy)):
        rows.append(
            f"| {name} | {row['latency_p50_ms']} | {row['ttfb_p50_ms']} | {row['streams_per_s']} | {row['mb_per_s']} |"
        )
    added = round(proxy["latency_p50_ms"] - direct["latency_p50_ms"], 2)
    ttfb = round(proxy["ttfb_p50_ms"] - direct["ttfb_p50_ms"], 2)
    ratio = round(proxy["streams_per_s"] / direct["streams_per_s"], 2) if direct["streams_per_s"] else 0
    rows.append("")
    rows.append(
        f"Added by the proxy: {added} ms per request (median of {requests}, 30 KB bodies), {ttfb} ms to the first "
        f"streamed byte, throughput {ratio}x direct at {streams} concurrent streams of {STREAM_EVENTS} events; "
        f"{results['recorded']['exchanges']} exchanges recorded."
    )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--streams", type=int, default=8)
    args = parser.parse_args()
    print(table(measure(args.requests, args.streams), args.requests, args.streams))


if __name__ == "__main__":
    main()
