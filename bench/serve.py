"""`machine serve` generation benchmark: time to first token and tokens/s at 1, 4 and 8 concurrent streams.

The same requests with the same LoRA checkpoint (SmolLM2-135M + a real adapter), two groups:

In process (the generator interface server.py drives; every stream decodes exactly --max-tokens, stops ignored):
* torch generator: `generation.BatchGenerator` on the model with the LoRA merged (`machine serve --backend torch`);
* llama.cpp generator: `llama_backend.LlamaGenerator` on the merged GGUF of --gguf-type (`machine serve --backend
  llama.cpp --gguf-type T`; default: the type `machine serve` serves);
* plain loop: transformers `generate` one request at a time on the peft model (what a hand-written server does).

Over HTTP (streaming Chat Completions from one client, greedy, replies may stop before --max-tokens; see
bench/serve_http.py): `machine serve --backend llama.cpp`, `machine serve --backend torch`, and llama.cpp's own
server (`python -m llama_cpp.server`, llama-cpp-python[server]) on the very GGUF file `machine serve` serves (the
checkpoint's cached merged GGUF of that type: same weights, same quantization).

Each server answers one untimed request before the timed rounds. TTFT is per stream from the moment the burst is
sent, averaged; tokens/s is all streams' tokens over the wall time
of the burst. Greedy outputs are checked to agree. Then the swap time of the llama.cpp backend for the checkpoint:
merge the LoRA, write the GGUF (f16; the f32 source of q8_0), quantize it (q8_0 only), open a llama.cpp context
on it.

Run: .venv/bin/python bench/serve.py [--checkpoint DIR] [--max-tokens 48] [--rounds 2] [--threads 2] [--gguf-type T]
[--write]
Without --checkpoint, one LoRA step on a few arithmetic rows makes a fresh adapter (a real, non-zero one).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine_lsp.core.schema import Message  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUESTIONS = [
    f"What is {a} plus {b}? Explain step by step." for a, b in [(3, 4), (12, 30), (7, 8), (21, 5)] * 2
]


def make_checkpoint(root: Path) -> Path:
    from machine_lsp.engines import render
    from machine_lsp.engines.base import LoraSettings
    from machine_lsp.engines.local.local import LocalEngine

    engine = LocalEngine(store_root=root)
    trainer = engine.create_trainer(MODEL, LoraSettings(), root / "runs" / "bench")
    rows = [
        [
            Message(role="user", content=f"What is {a} plus {b}?"),
            Message(role="assistant", content=f"answer: {a + b}"),
        ]
        for a, b in [(3, 4), (12, 30), (7, 8), (21, 5)]
    ]
    trainer.forward_backward(render.to_datums(rows, trainer.renderer))
    trainer.optim_step(5e-4)
    trainer.save("bench")
    return root / "runs" / "bench" / "checkpoints" / "bench"


async def burst(
    generator: Any, prompts: list[list[int]], max_tokens: int
) -> tuple[float, float, list[list[int]]]:
    from machine_lsp.serve.generation import Generation

    generator.start()
    try:
        # One untimed token first (a fresh llama.cpp context pays its first decode; the HTTP servers are warmed the
        # same way), on the prompts' first token only, so no timed prompt finds itself cached.
        async for _ in generator.submit(Generation(prompt=prompts[0][:1], max_tokens=1)).stream():
            pass
        started = time.perf_counter()
        gens = [generator.submit(Generation(prompt=p, max_tokens=max_tokens)) for p in prompts]

        async def drain(g: Generation) -> None:
            async for _ in g.stream():
                pass

        await asyncio.gather(*(drain(g) for g in gens))
        wall = time.perf_counter() - started
    finally:
        generator.close()
    ttft = statistics.mean((g.first_token_at or started) - started for g in gens)
    tokens = sum(len(g.tokens) for g in gens)
    return ttft, tokens / wall, [g.tokens for g in gens]


class FirstToken:
    """A transformers streamer that notes when the first generated token arrives (the first `put` is the prompt)."""

    def __init__(self) -> None:
        self.calls = 0
        self.first: float | None = None

    def put(self, value: Any) -> None:
        self.calls += 1
        if self.calls == 2 and self.first is None:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


def burst_plain(
    model: Any, prompts: list[list[int]], max_tokens: int
) -> tuple[float, float, list[list[int]]]:
    import torch

    started = time.perf_counter()
    firsts, outputs = [], []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            streamer = FirstToken()
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_tokens,
                min_new_tokens=max_tokens,
                do_sample=False,
                streamer=streamer,
                pad_token_id=2,
            )
            firsts.append((streamer.first or time.perf_counter()) - started)
            outputs.append(out[0, len(prompt) :].tolist())
    wall = time.perf_counter() - started
    return statistics.mean(firsts), sum(len(o) for o in outputs) / wall, outputs


STREAMS = (1, 4, 8)


def in_process(args: argparse.Namespace, checkpoint: Path, machine_dir: Path) -> tuple[dict, dict, Any]:
    from machine_lsp.engines import render
    from machine_lsp.serve import generation, llama_backend

    merged = generation.load(checkpoint, merge=True, threads=args.threads)
    unmerged = generation.load(checkpoint, merge=False, threads=args.threads)
    gguf = llama_backend.load(
        checkpoint, store_root=machine_dir, threads=args.threads, gguf_type=args.gguf_type
    )
    for loaded in (merged, gguf):
        loaded.stop_ids = set()  # every stream decodes exactly --max-tokens tokens
    prompts = [render.prompt_tokens([Message(role="user", content=q)], merged.renderer) for q in QUESTIONS]
    contenders = {
        "torch generator (LoRA merged)": lambda b: asyncio.run(
            burst(generation.BatchGenerator(merged, max_batch=32), b, args.max_tokens)
        ),
        f"llama.cpp generator ({args.gguf_type} GGUF)": lambda b: asyncio.run(
            burst(llama_backend.LlamaGenerator(gguf), b, args.max_tokens)
        ),
        "plain generate loop (peft)": lambda b: burst_plain(unmerged.model, b, args.max_tokens),
    }
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    outputs: dict[tuple[str, int], list] = {}
    for _ in range(args.rounds):
        for streams in STREAMS:
            for name, run in contenders.items():
                ttft, rate, out = run(prompts[:streams])
                results.setdefault((name, streams), []).append((ttft, rate))
                outputs[(name, streams)] = out
    return results, outputs, merged.tokenizer


def over_http(args: argparse.Namespace, checkpoint: Path, project: Path, tokenizer: Any) -> tuple[dict, dict]:
    import serve_http

    from machine_lsp.engines import gguf_export

    kind = args.gguf_type
    servers = {
        f"machine serve --backend llama.cpp ({kind})": lambda: serve_http.machine_serve(
            project, checkpoint, "llama.cpp", args.threads, kind
        ),
        "machine serve --backend torch": lambda: serve_http.machine_serve(
            project, checkpoint, "torch", args.threads
        ),
    }
    missing = serve_http.llama_server_available()
    if missing is None:
        model = gguf_export.cached_model_path(checkpoint, kind)  # what `machine serve` serves: same file
        servers[f"llama.cpp server (llama_cpp.server, {kind})"] = lambda: serve_http.llama_cpp_server(
            model, args.threads
        )
    else:
        print(f"skipped llama.cpp's own server: {missing}")
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    outputs: dict[tuple[str, int], list] = {}
    for name, start in servers.items():
        server = start()
        try:
            # One untimed request first, for every server alike: a server's first request pays one-time costs
            # (imports, buffers) that an agent pays once per session, not per request.
            asyncio.run(serve_http.burst_http(server.url, QUESTIONS[:1], 8, tokenizer))
            for _ in range(args.rounds):
                for streams in STREAMS:
                    burst_ = serve_http.burst_http(
                        server.url, QUESTIONS[:streams], args.max_tokens, tokenizer
                    )
                    ttft, rate, texts = asyncio.run(burst_)
                    results.setdefault((name, streams), []).append((ttft, rate))
                    outputs[(name, streams)] = texts
        finally:
            server.stop()
    return results, outputs


def agreement(outputs: dict) -> list[str]:
    lines = []
    for streams in STREAMS:
        names = [n for n, s in outputs if s == streams]
        reference = outputs[(names[0], streams)]
        agree = sum(
            1 for n in names[1:] for a, b in zip(outputs[(n, streams)], reference, strict=True) if a == b
        )
        lines.append(
            f"{streams} stream(s): greedy outputs agree with {names[0]} on {agree}/{len(reference) * (len(names) - 1)}"
        )
    return lines


def table_lines(title: str, results: dict, reference: str) -> list[str]:
    lines = [
        f"**{title}**",
        "",
        f"| method | streams | TTFT (s) | tokens/s | vs {reference} |",
        "|---|---|---|---|---|",
    ]
    for streams in STREAMS:
        base = statistics.median(r for _, r in results[(reference, streams)])
        for (name, s), values in results.items():
            if s == streams:
                ttft = statistics.median(t for t, _ in values)
                rate = statistics.median(r for _, r in values)
                lines.append(f"| {name} | {s} | {ttft:.2f} | {rate:.1f} | {rate / base:.2f}x |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, help="a local checkpoint directory (default: make one)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="per contender")
    parser.add_argument(
        "--gguf-type", default=None, choices=("f32", "f16", "q8_0"), help="default: what machine serve serves"
    )
    parser.add_argument("--write", action="store_true", help="write the tables into docs/BENCHMARKS.md")
    args = parser.parse_args()
    from machine_lsp.engines import gguf_export

    args.gguf_type = args.gguf_type or gguf_export.DEFAULT_TYPE

    import serve_http

    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        machine_dir = project / ".machine"
        checkpoint = args.checkpoint or make_checkpoint(machine_dir)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        results, outputs, tokenizer = in_process(args, checkpoint, machine_dir)
        http_results, http_outputs = over_http(args, checkpoint, project, tokenizer)
        swap = serve_http.swap_time(checkpoint, args.threads, args.gguf_type)
    lines = [
        f"Measured {started}, `python bench/serve.py --max-tokens {args.max_tokens} --rounds {args.rounds} "
        f"--threads {args.threads} --gguf-type {args.gguf_type}`, median of {args.rounds}; checkpoint: "
        f"{checkpoint if args.checkpoint else 'fresh 1-step LoRA'}.",
        "",
        *table_lines("In process, exactly --max-tokens per stream", results, "plain generate loop (peft)"),
        "",
        *table_lines("Over HTTP, streaming, greedy", http_results, "machine serve --backend torch"),
        "",
        *(f"- {line}" for line in agreement(outputs) + agreement(http_outputs)),
        f"- swap to a new checkpoint (llama.cpp backend, {args.gguf_type}): "
        + " + ".join(f"{step} {seconds:.1f} s" for step, seconds in swap.items())
        + f" = {sum(swap.values()):.1f} s",
    ]
    print("\n".join(lines))
    if args.write:
        from doc_section import write_generated

        write_generated("serve", "\n".join(lines), heading="## machine serve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
