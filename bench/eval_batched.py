"""Local engine held-out eval benchmark: batched greedy sampling vs one-row-at-a-time `generate`.

The 24 held-out prompts of examples/minimal-sft (seed 0), rendered by the cookbook `qwen3_instruct` renderer.
Three ways to answer them greedily with the same model and the same prompt tokens:

* machine-lsp `LocalSampler.sample`: all rows in one left-padded batch, KV cache, finished rows dropped;
* transformers `generate`, one row at a time (what a plain eval loop does);
* transformers `generate` on the same left-padded batch (for reference).

Two models: the base SmolLM2 (long free-form answers, capped at --max-tokens) and the same model after 10 LoRA steps
on the 48 training rows (short `answer: N` answers) -- the two evals the minimal-sft example runs. The methods
alternate round by round; medians are reported, and outputs are checked to agree.

Run: .venv/bin/python bench/eval_batched.py [--rounds 2] [--max-tokens 32] [--train-steps 10]
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


def cut(tokens: list[int], stop: int) -> list[int]:
    return tokens[: tokens.index(stop)] if stop in tokens else tokens


def measure(
    label: str, sampler: Any, hf_model: Any, prompts: list[list[int]], max_tokens: int, rounds: int
) -> dict:
    stop = min(sampler.stop_ids)
    methods = {
        "one": lambda: generate_one_at_a_time(hf_model, prompts, max_tokens, stop),
        "hf_batched": lambda: generate_batched(hf_model, prompts, max_tokens, stop),
        "batched": lambda: sampler.sample_tokens(prompts, max_tokens),
    }
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
    agree = sum(a == b for a, b in zip(outputs["batched"], outputs["one"], strict=True))
    agree_hf = sum(a == b for a, b in zip(outputs["hf_batched"], outputs["one"], strict=True))
    generated = sum(len(o) for o in outputs["one"])
    print(f"\n### {label}: {n} prompts, max {max_tokens} new tokens, {generated} tokens generated")
    print("| method | wall s | CPU s | speed-up (CPU) | speed-up (wall) | outputs equal to one-at-a-time |")
    print("|---|---|---|---|---|---|")
    rows = [
        ("one", "transformers generate, one row at a time", "-"),
        ("hf_batched", "transformers generate, one left-padded batch", f"{agree_hf}/{n}"),
        ("batched", "machine-lsp LocalSampler (batched, KV cache, drops finished rows)", f"{agree}/{n}"),
    ]
    for key, name, same in rows:
        print(
            f"| {name} | {w[key]:.2f} | {c[key]:.2f} | {c['one'] / c[key]:.2f}x | {w['one'] / w[key]:.2f}x | {same} |"
        )
    return {"wall": w, "cpu": c, "agree": agree, "generated": generated}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--train-steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    from machine_lsp.engines import render
    from machine_lsp.engines.base import LoraSettings
    from machine_lsp.engines.local import LocalEngine

    engine = LocalEngine(threads=args.threads)
    train_rows, held = load_rows()
    print(
        f"machine load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, threads={args.threads}"
    )
    trainer = engine.create_trainer(MODEL, LoraSettings(), Path(tempfile.mkdtemp()) / "runs" / "bench-eval")
    prompts = [render.prompt_tokens(p, trainer.renderer) for p in held]
    # base model: a plain model without an adapter (what an eval of the base model loads)
    base_sampler = engine.sampler_for(MODEL, None)
    measure("base model", base_sampler, base_sampler.model, prompts, args.max_tokens, args.rounds)
    del base_sampler
    datums = render.to_datums(train_rows, trainer.renderer)
    for step in range(args.train_steps):
        batch = datums[(step * 8) % len(datums) :][:8]
        trainer.forward_backward(batch)
        trainer.optim_step(5e-4)
    measure(
        f"after {args.train_steps} LoRA steps",
        trainer.sampler(),
        trainer.model,
        prompts,
        args.max_tokens,
        args.rounds,
    )
    print(f"\nmachine load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
