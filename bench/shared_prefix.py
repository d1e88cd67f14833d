"""Local engine sampling inside an agent's context: one prefill of the shared prefix vs a plain left-padded batch.

The gate of `machine retrain` asks the built-in bleed probe twice per model: bare, and inside the tagged rows' context
(an agent's system prompt and `tools`, thousands of tokens). Every in-context probe starts with the same tokens.
Answered greedily with the same model and prompt tokens by:

* `LocalSampler` as it is: prompts that share a long prefix are batched together, the prefix is prefilled once and
  its KV cache repeated for the batch (`local_sampler.batches`);
* the same sampler with sharing off: prompts batched by length (what it does for prompts with nothing in common);
* one left-padded batch of every prompt, sorted by length (transformers `generate` as a plain eval loop calls it,
  and what `LocalSampler` did before sharing).

The context is what an agent sends: a system prompt carrying the project's instructions (this repo's CONTRIBUTING.md,
as agents put AGENTS.md or CLAUDE.md there) and the tools of the built-in tool probes. Methods alternate round by
round; medians are reported and outputs are checked to agree.

Run: .venv/bin/python bench/shared_prefix.py [--rounds 3] [--threads 1] [--context-chars 6000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine_lsp.core import evals  # noqa: E402
from machine_lsp.core.schema import Message  # noqa: E402
from machine_lsp.core.tool_probes import TOOL_PROBES  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROBE_TOKENS = 16  # the gate's BLEED_PROBE_TOKENS


def context(chars: int) -> evals.ProbeContext:
    instructions = (REPO / "CONTRIBUTING.md").read_text()[:chars]
    tools: dict[str, Any] = {}
    for probe_tools, _question in TOOL_PROBES:
        for tool in probe_tools:
            tools[tool["function"]["name"]] = tool
    system = Message(
        role="system", content="You are a coding agent working in this project.\n\n" + instructions
    )
    return evals.ProbeContext(system=(system,), tools=tuple(tools.values()))


def one_batch(sampler: Any, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Every prompt in left-padded batches of `sample_batch_size`, sorted by length: no sharing, no grouping."""
    import torch

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    size = sampler.engine.sample_batch_size
    out: list[list[int]] = [[] for _ in prompts]
    with torch.inference_mode():
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            for i, tokens in zip(
                chunk, sampler._greedy([prompts[i] for i in chunk], max_tokens), strict=True
            ):
                out[i] = tokens
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context-chars", type=int, default=6000)
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from machine_lsp.engines import render
    from machine_lsp.engines.local import local_sampler
    from machine_lsp.engines.local.local import LocalEngine

    engine = LocalEngine(threads=args.threads)
    sampler = engine.sampler_for(MODEL, None)
    questions = evals.probe_prompts()
    bare = [(evals.probe_messages(q), None) for q in questions]
    in_context = evals.context_probes(questions, [context(args.context_chars)])
    prompts = [render.prompt_tokens(m, sampler.renderer, tools) for m, tools in bare + in_context]
    groups = local_sampler.batches(prompts, engine.sample_batch_size)
    shared = max(prefix for _, prefix in groups)
    lengths = sorted({len(p) for p in prompts[len(bare) :]})

    def sharing() -> list[list[int]]:
        return sampler.sample_tokens(prompts, PROBE_TOKENS)

    def by_length() -> list[list[int]]:
        kept = local_sampler.MIN_SHARED_PREFIX
        local_sampler.MIN_SHARED_PREFIX = 10**9
        try:
            return sampler.sample_tokens(prompts, PROBE_TOKENS)
        finally:
            local_sampler.MIN_SHARED_PREFIX = kept

    def plain() -> list[list[int]]:
        return one_batch(sampler, prompts, PROBE_TOKENS)

    methods = {
        "shared prefix, one prefill (LocalSampler)": sharing,
        "batched by length, no sharing": by_length,
        "one left-padded batch (plain generate)": plain,
    }
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    outputs: dict[str, list[list[int]]] = {}
    for _ in range(args.rounds):
        for name, method in methods.items():
            started = time.perf_counter()
            outputs[name] = method()
            seconds[name].append(time.perf_counter() - started)
            print(f"round {len(seconds[name])}: {name}: {seconds[name][-1]:.1f} s", flush=True)

    reference = outputs["one left-padded batch (plain generate)"]
    table = Table(
        title=(
            f"bleed probe, {len(bare)} bare + {len(in_context)} in an agent context "
            f"({lengths[0]}-{lengths[-1]} tokens, {shared} shared), {PROBE_TOKENS} new tokens, "
            f"{args.threads} thread(s), median of {args.rounds}"
        )
    )
    for column in ("method", "seconds", "vs plain batch", "outputs equal to plain"):
        table.add_column(column, justify="left" if column == "method" else "right")
    base = statistics.median(seconds["one left-padded batch (plain generate)"])
    for name in methods:
        median = statistics.median(seconds[name])
        same = sum(a == b for a, b in zip(outputs[name], reference, strict=True))
        table.add_row(name, f"{median:.1f}", f"{base / median:.2f}x", f"{same}/{len(reference)}")
    Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
