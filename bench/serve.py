"""`machine serve` generation benchmark: time to first token and tokens/s for 1 and 8 concurrent streams.

Three ways to answer the same requests with the same LoRA checkpoint (SmolLM2-135M + a real adapter):

* served: `machine_lsp.serve.generation.BatchGenerator` on the model with the LoRA merged (what `machine serve` runs);
* batched, adapter unmerged: the same batcher on the peft model (base + adapter matmuls every step);
* plain loop: transformers `generate` one request at a time on the peft model (what a hand-written server does).

All requests arrive together; every stream decodes exactly --max-tokens tokens (stop tokens ignored) so the
three do the same work. TTFT is measured per stream from the moment the burst is sent, then averaged. tokens/s is
all streams' tokens over the wall time of the burst. Greedy outputs are checked to agree across the three.

Run: MACHINE_TORCH_THREADS=1 .venv/bin/python bench/serve.py [--checkpoint DIR] [--max-tokens 48] [--rounds 2]
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


async def burst_batched(
    loaded: Any, prompts: list[list[int]], max_tokens: int
) -> tuple[float, float, list[list[int]]]:
    from machine_lsp.serve.generation import BatchGenerator, Generation

    generator = BatchGenerator(loaded, max_batch=32)
    generator.start()
    try:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, help="a local checkpoint directory (default: make one)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import torch
    from rich.console import Console
    from rich.table import Table

    from machine_lsp.engines import render
    from machine_lsp.serve import generation

    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or make_checkpoint(Path(tmp))
        merged = generation.load(checkpoint, merge=True)
        unmerged = generation.load(checkpoint, merge=False)
        for loaded in (merged, unmerged):
            loaded.stop_ids = set()  # every stream decodes exactly --max-tokens tokens
        prompts = [
            render.prompt_tokens([Message(role="user", content=q)], merged.renderer) for q in QUESTIONS
        ]
        results: dict[tuple[str, int], list[tuple[float, float]]] = {}
        outputs: dict[tuple[str, int], list[list[int]]] = {}
        for _ in range(args.rounds):
            for streams in (1, 8):
                batch = prompts[:streams]
                for name, run in (
                    (
                        "served (batched, LoRA merged)",
                        lambda b: asyncio.run(burst_batched(merged, b, args.max_tokens)),
                    ),
                    (
                        "batched, adapter unmerged",
                        lambda b: asyncio.run(burst_batched(unmerged, b, args.max_tokens)),
                    ),
                    ("plain generate loop (peft)", lambda b: burst_plain(unmerged.model, b, args.max_tokens)),
                ):
                    ttft, rate, out = run(batch)
                    results.setdefault((name, streams), []).append((ttft, rate))
                    outputs[(name, streams)] = out
        for streams in (1, 8):
            names = [n for n, s in outputs if s == streams]
            reference = outputs[(names[0], streams)]
            agree = sum(
                1 for n in names[1:] for a, b in zip(outputs[(n, streams)], reference, strict=True) if a == b
            )
            console.print(
                f"{streams} stream(s): greedy outputs agree on {agree}/{len(reference) * (len(names) - 1)}"
            )

    table = Table(title=f"machine serve generation, {args.max_tokens} tokens/stream, median of {args.rounds}")
    for column in ("method", "streams", "TTFT (s)", "tokens/s", "vs plain loop"):
        table.add_column(column)
    lines = ["| method | streams | TTFT (s) | tokens/s | vs plain loop |", "|---|---|---|---|---|"]
    for streams in (1, 8):
        plain = statistics.median(r for _, r in results[("plain generate loop (peft)", streams)])
        for (name, s), values in results.items():
            if s != streams:
                continue
            ttft = statistics.median(t for t, _ in values)
            rate = statistics.median(r for _, r in values)
            row = [name, str(s), f"{ttft:.2f}", f"{rate:.1f}", f"{rate / plain:.2f}x"]
            table.add_row(*row)
            lines.append("| " + " | ".join(row) + " |")
    console.print(table)
    print("\n".join(lines))
    print(
        f"torch threads: {torch.get_num_threads()}; checkpoint: {checkpoint if args.checkpoint else 'fresh 1-step LoRA'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
