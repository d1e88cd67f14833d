"""Local engine held-out eval benchmark: the hand-written batched decoder vs transformers' batched `generate`.

The 24 held-out prompts of examples/minimal-sft (seed 0), rendered by the cookbook `qwen3_instruct` renderer,
answered greedily with the same model and the same prompt tokens by:

* transformers `generate` on one left-padded batch (the reference);
* machine-lsp `LocalSampler.sample_tokens` (which now calls `generate` the same way, through the engine's batching);
* the hand-written decoder LocalSampler used before, which `machine serve` decodes with (imported from
  `serve.generation`, greedy): the same batch and KV cache, finished rows dropped from the batch (kept here so the
  decision to use `generate` for evals stays checkable);
* with --one-at-a-time, also `generate` one row at a time (what a plain eval loop does; slow).

Three workloads: the base SmolLM2 (long free-form answers, all capped at --max-tokens), the same model after
--train-steps LoRA steps on the 48 training rows (short `answer: N` answers), and that trained model on the held-out
prompts mixed with the built-in off-distribution probe questions (answers of very different lengths: where dropping
finished rows can pay). The methods alternate round by round; medians are reported, outputs are checked to agree,
and the answer lengths are printed so the workload is visible.

Run: .venv/bin/python bench/eval_batched.py [--rounds 3] [--max-tokens 32] [--train-steps 10] [--one-at-a-time]
"""

from __future__ import annotations

import argparse
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

from minimal_sft_rows import build_rows, messages  # noqa: E402  (bench/ is the script's own folder)

from machine_lsp.core.schema import Message  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def load_rows() -> tuple[list[list[Message]], list[list[Message]]]:
    train, held = build_rows()
    return [messages(r["messages"]) for r in train], [messages(r["messages"]) for r in held]


def generate_one_at_a_time(
    model: Any, prompts: list[list[int]], max_tokens: int, stop: int
) -> list[list[int]]:
    import torch

    out = []
    with torch.inference_mode():
        for tokens in prompts:
            ids = torch.tensor([tokens])
            gen = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_tokens,
                do_sample=False,
                eos_token_id=stop,
                pad_token_id=stop,
            )
            out.append(cut(gen[0, len(tokens) :].tolist(), stop))
    return out


def generate_batched(model: Any, prompts: list[list[int]], max_tokens: int, stop: int) -> list[list[int]]:
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), stop, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for j, p in enumerate(prompts):
        ids[j, width - len(p) :] = torch.tensor(p)
        mask[j, width - len(p) :] = 1
    with torch.inference_mode():
        gen = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=stop,
            pad_token_id=stop,
        )
    return [cut(row[width:].tolist(), stop) for row in gen]


def serve_decoder(sampler: Any, model: Any, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """The hand-written decoder, as `machine serve` runs it (`serve.generation.BatchGenerator`, greedy): one
    left-padded wave with a KV cache, rows that reached a stop token dropped from the batch
    (`DynamicCache.batch_select_indices`). LocalSampler decoded this way before it switched to `generate`. Its
    overhead over a bare loop (a 5 ms collect wait, one thread hand-off per token) is part of what serving costs."""
    import asyncio

    from machine_lsp.serve.generation import BatchGenerator, Generation, Loaded

    loaded = Loaded(
        tokenizer=sampler.tokenizer,
        renderer=sampler.renderer,
        model=model,
        stop_ids=set(sampler.stop_ids),
        pad_id=sampler.pad_id,
        context_length=model.config.max_position_embeddings,
        base_model=MODEL,
        checkpoint=None,
    )
    width = max(len(p) for p in prompts)
    generator = BatchGenerator(loaded, max_batch=len(prompts), max_prefill_tokens=width * len(prompts))

    async def decode() -> list[list[int]]:
        wave = [generator.submit(Generation(prompt=list(p), max_tokens=max_tokens)) for p in prompts]
        for generation in wave:
            async for _ in generation.stream():
                pass
        assert generator.waves == 1 and all(g.finish_reason in {"stop", "length"} for g in wave)
        return [g.tokens for g in wave]

    generator.start()
    try:
        return asyncio.run(decode())
    finally:
        generator.close()


def cut(tokens: list[int], stop: int) -> list[int]:
    return tokens[: tokens.index(stop)] if stop in tokens else tokens


def measure(
    label: str,
    sampler: Any,
    hf_model: Any,
    prompts: list[list[int]],
    max_tokens: int,
    rounds: int,
    one_at_a_time: bool,
) -> dict:
    stop = min(sampler.stop_ids)
    methods = {
        "hf_batched": lambda: generate_batched(hf_model, prompts, max_tokens, stop),
        "batched": lambda: sampler.sample_tokens(prompts, max_tokens),
        "hand": lambda: serve_decoder(sampler, hf_model, prompts, max_tokens),
    }
    if one_at_a_time:
        methods["one"] = lambda: generate_one_at_a_time(hf_model, prompts, max_tokens, stop)
    wall: dict[str, list[float]] = {k: [] for k in methods}
    cpu: dict[str, list[float]] = {k: [] for k in methods}
    outputs: dict[str, list[list[int]]] = {}
    hf_model.eval()
    for _ in range(rounds):
        for key, run in methods.items():
            t, c = time.perf_counter(), time.process_time()
            outputs[key] = run()
            wall[key].append(time.perf_counter() - t)
            cpu[key].append(time.process_time() - c)
    w = {k: statistics.median(v) for k, v in wall.items()}
    c = {k: statistics.median(v) for k, v in cpu.items()}
    n = len(prompts)
    lengths = sorted(len(o) for o in outputs["hf_batched"])
    agree = sum(a == b for a, b in zip(outputs["batched"], outputs["hf_batched"], strict=True))
    agree_hand = sum(a == b for a, b in zip(outputs["hand"], outputs["hf_batched"], strict=True))
    print(
        f"\n### {label}: {n} prompts, max {max_tokens} new tokens, {sum(lengths)} tokens generated "
        f"(answer lengths min {lengths[0]}, median {lengths[n // 2]}, max {lengths[-1]})"
    )
    print("| method | wall s | CPU s | vs batched `generate` (CPU) | outputs equal to batched `generate` |")
    print("|---|---:|---:|---:|---|")
    rows = [
        ("hf_batched", "transformers `generate`, one left-padded batch", "-"),
        ("batched", "machine-lsp LocalSampler (now `generate` on the same batch)", f"{agree}/{n}"),
        ("hand", "hand-written decoder, drops finished rows (`machine serve`'s)", f"{agree_hand}/{n}"),
    ]
    if one_at_a_time:
        same = sum(a == b for a, b in zip(outputs["one"], outputs["hf_batched"], strict=True))
        rows.append(("one", "transformers `generate`, one row at a time", f"{same}/{n}"))
    for key, name, equal in rows:
        print(f"| {name} | {w[key]:.2f} | {c[key]:.2f} | {c['hf_batched'] / c[key]:.2f}x | {equal} |")
    return {"wall": w, "cpu": c, "agree": agree, "agree_hand": agree_hand, "lengths": lengths}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--train-steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--one-at-a-time", action="store_true", help="also time one-row-at-a-time generate")
    args = parser.parse_args(argv)

    from machine_lsp.core import evals
    from machine_lsp.engines import render
    from machine_lsp.engines.base import LoraSettings
    from machine_lsp.engines.local.local import LocalEngine

    engine = LocalEngine(threads=args.threads)
    train_rows, held = load_rows()
    print(
        f"machine load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, threads={args.threads}"
    )
    trainer = engine.create_trainer(MODEL, LoraSettings(), Path(tempfile.mkdtemp()) / "runs" / "bench-eval")
    prompts = [render.prompt_tokens(p, trainer.renderer) for p in held]
    # base model: a plain model without an adapter (what an eval of the base model loads)
    base_sampler = engine.sampler_for(MODEL, None)
    measure(
        "base model",
        base_sampler,
        base_sampler.model,
        prompts,
        args.max_tokens,
        args.rounds,
        args.one_at_a_time,
    )
    del base_sampler
    datums = render.to_datums(train_rows, trainer.renderer)
    for step in range(args.train_steps):
        batch = datums[(step * 8) % len(datums) :][:8]
        trainer.forward_backward(batch)
        trainer.optim_step(5e-4)
    trained = trainer.sampler()
    label = f"after {args.train_steps} LoRA steps"
    measure(label, trained, trainer.model, prompts, args.max_tokens, args.rounds, args.one_at_a_time)
    probes = [render.prompt_tokens(evals.probe_messages(q), trainer.renderer) for q in evals.probe_prompts()]
    # 12 held-out rows (short answers) interleaved with the 12 probe questions (free-form answers)
    mixed = [prompt for pair in zip(prompts[:12], probes[:12], strict=True) for prompt in pair]
    measure(
        f"{label}, held-out rows mixed with the probe questions",
        trained,
        trainer.model,
        mixed,
        args.max_tokens,
        args.rounds,
        args.one_at_a_time,
    )
    print(f"\nmachine load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
