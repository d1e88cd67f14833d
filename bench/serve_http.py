"""Servers over HTTP for bench/serve.py: `machine serve` (either backend) and llama.cpp's own server, driven by the
same streaming Chat Completions client, and the swap time of the llama.cpp backend.

TTFT is the time from sending a request to its first non-empty content delta, averaged over the streams of a burst;
tokens/s is the tokens of all streams (the streamed text tokenized with the model's tokenizer, the same count for
every server) over the wall time of the burst.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def llama_server_available() -> str | None:
    """None when `python -m llama_cpp.server` can run here, else why not."""
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError as exc:
        return f"llama_cpp.server is not installed ({exc}); pip install 'llama-cpp-python[server]'"
    return None


class Server:
    """A server process on 127.0.0.1; `ready` polls `path` until it answers."""

    def __init__(self, argv: list[str], cwd: Path, ready_path: str, threads: int) -> None:
        self.port = free_port()
        threads_env = {"MACHINE_SERVE_THREADS": str(threads), "MACHINE_TORCH_THREADS": str(threads)}
        env = dict(os.environ, PYTHONPATH=str(REPO), **threads_env)
        argv = [a.replace("{port}", str(self.port)) for a in argv]
        # stderr into a file, not a pipe nobody reads: a server logging a line per request fills a pipe and blocks.
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log
        )
        self.url = f"http://127.0.0.1:{self.port}"
        asyncio.run(self._wait(ready_path))

    async def _wait(self, path: str, timeout_s: float = 600) -> None:
        import aiohttp

        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    self.log.seek(0)
                    raise RuntimeError(f"{self.proc.args}: exited: {self.log.read().decode()[-2000:]}")
                try:
                    async with session.get(self.url + path) as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.5)
        raise RuntimeError(f"{self.proc.args}: not ready after {timeout_s:.0f} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def machine_serve(
    project: Path, checkpoint: Path, backend: str, threads: int, gguf_type: str | None = None
) -> Server:
    argv = [sys.executable, "-m", "machine_lsp.cli.main", "serve", str(checkpoint), "--port", "{port}"]
    argv += ["--backend", backend, "--no-log"]
    if gguf_type is not None:
        argv += ["--gguf-type", gguf_type]
    return Server(argv, project, "/health", threads)


def llama_cpp_server(model: Path, threads: int) -> Server:
    """llama-cpp-python's OpenAI server on the same GGUF. `--interrupt_requests False`: its default (True) ends the
    stream being decoded as soon as another request arrives (it serves one at a time), which cut concurrent
    streams short; with False the next request waits for the lock, as in `machine serve --workers 1`."""
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--port", "{port}"]
    argv += ["--model_alias", "machine", "--interrupt_requests", "False"]
    argv += [
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--n_ctx",
        "8192",
        "--verbose",
        "False",
    ]
    return Server(argv, REPO, "/v1/models", threads)


async def _one(session: Any, url: str, question: str, max_tokens: int, sent: float) -> tuple[float, str]:
    body = {
        "model": "machine",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    first: float | None = None
    text = ""
    done = False
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for raw in response.content:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
            if done or not line.startswith("data:"):
                continue
            choices = json.loads(line[5:]).get("choices") or [{}]
            delta = (choices[0].get("delta") or {}).get("content") or ""
            if delta and first is None:
                first = time.perf_counter()
            text += delta
    if not done:  # a stream that ends without [DONE] was cut short: its numbers would flatter the server
        raise RuntimeError(f"{url}: the stream ended before data: [DONE] after {len(text)} characters")
    return (first or time.perf_counter()) - sent, text


async def burst_http(
    url: str, questions: list[str], max_tokens: int, tokenizer: Any
) -> tuple[float, float, list]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=1800)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        started = time.perf_counter()
        done = await asyncio.gather(*(_one(session, url, q, max_tokens, started) for q in questions))
        wall = time.perf_counter() - started
    texts = [text for _, text in done]
    tokens = sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts)
    return statistics.mean(t for t, _ in done), tokens / wall, texts


def swap_time(checkpoint: Path, threads: int, gguf_type: str) -> dict[str, float]:
    """A new checkpoint made servable by llama.cpp, the steps of `gguf_export.ensure_model_gguf` for a checkpoint
    with no cache yet: merge; write the GGUF (f32 or f16; the f32 source of a quantized type); quantize it (q8_0
    only); open a context on it. Seconds per step (quantize absent when there is none)."""
    from machine_lsp.engines import gguf_export

    cache = gguf_export.cached_model_path(checkpoint, gguf_type).parent  # type: ignore[arg-type]
    if cache.exists():
        import shutil

        shutil.rmtree(cache)
    marks = [time.perf_counter()]
    base = gguf_export.base_for(gguf_export.smollm2.MODEL_NAME)
    state = gguf_export.merged_state(checkpoint, gguf_export.smollm2.MODEL_NAME)
    marks.append(time.perf_counter())
    written_type = "f32" if gguf_type in gguf_export.QUANTIZED else gguf_type
    written = gguf_export.write_model(state, base, cache / f"swap-probe-{written_type}.gguf", written_type)  # type: ignore[arg-type]
    marks.append(time.perf_counter())
    path = written
    if gguf_type in gguf_export.QUANTIZED:
        path = gguf_export.quantize(written, cache / f"swap-probe-{gguf_type}.gguf", gguf_type)  # type: ignore[arg-type]
        marks.append(time.perf_counter())
    from machine_lsp.serve.llama_backend import LlamaModel

    llm = LlamaModel(path=path, threads=threads, context_length=8192).open(threads)
    llm.eval([1, 2])
    marks.append(time.perf_counter())
    llm.close()
    for probe in {written, path}:
        probe.unlink()
    steps = ["merge", f"write the {written_type} GGUF", *(["quantize"] if path != written else []), "load"]
    return {step: end - start for step, start, end in zip(steps, marks[:-1], marks[1:], strict=True)}
