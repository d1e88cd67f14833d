"""Helpers for the llama.cpp backend tests: the minimal-sft eval prompts and decoding through a generator."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MAX_TOKENS = 16


def minimal_sft_prompts(tmp: Path) -> list[list[dict]]:
    """The user turns of examples/minimal-sft's held-out rows (its own generator, default seed and sizes)."""
    spec = importlib.util.spec_from_file_location(
        "minimal_sft_corpus", REPO / "examples/minimal-sft/make_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    assert corpus.main(["--out", str(tmp)]) == 0
    rows = [json.loads(line) for line in (tmp / "eval.jsonl").read_text().splitlines()]
    assert len(rows) == 24
    return [[m for m in row["messages"] if m["role"] != "assistant"] for row in rows]


def token_prompts(prompts: list[list[dict]], renderer: Any) -> list[list[int]]:
    from machine_lsp.core.schema import Message
    from machine_lsp.engines import render

    return [render.prompt_tokens([Message(**m) for m in p], renderer) for p in prompts]


def decode_all(
    generator: Any, prompts: list[list[int]], max_tokens: int
) -> list[tuple[list[int], str | None]]:
    """Every prompt through `generator` at once (start/submit/stream/close, as server.py uses it)."""
    from machine_lsp.serve.generation import Generation

    async def run() -> list[tuple[list[int], str | None]]:
        generator.start()
        try:
            gens = [generator.submit(Generation(prompt=p, max_tokens=max_tokens)) for p in prompts]
            for g in gens:
                async for _ in g.stream():
                    pass
            return [(g.tokens, g.finish_reason) for g in gens]
        finally:
            await asyncio.get_running_loop().run_in_executor(None, generator.close)

    return asyncio.run(run())
