"""Helpers for the llama.cpp backend tests: the minimal-sft eval prompts and decoding through a generator."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MAX_TOKENS = 16
ANSWER_FORM = re.compile(r"^answer: -?\d+$")  # examples/minimal-sft's strict style


def minimal_sft_eval(tmp: Path) -> list[dict]:
    """examples/minimal-sft's held-out rows (its own generator, default seed and sizes): messages and expected."""
    spec = importlib.util.spec_from_file_location(
        "minimal_sft_corpus", REPO / "examples/minimal-sft/make_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    assert corpus.main(["--out", str(tmp)]) == 0
    rows = [json.loads(line) for line in (tmp / "eval.jsonl").read_text().splitlines()]
    assert len(rows) == 24
    return rows


def minimal_sft_prompts(rows: list[dict]) -> list[list[dict]]:
    """The user turns of the held-out rows."""
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


def assert_as_right(
    torch_out: list,
    llama_out: list,
    expected: list[str],
    tokenizer: Any,
    *,
    exact: bool = True,
    max_flips: int = 0,
) -> dict[str, int]:
    """The rounded types' tolerance: per row, the same `answer: N` form verdict and (`exact`) the same exact-match
    verdict as torch's answer, on all but `max_flips` rows; token streams may differ. Returns torch's counts;
    prints the streams identical and the llama.cpp side's exact matches."""
    counts = {"form": 0, "exact": 0, "same_tokens": 0, "llama_exact": 0}
    flips = []
    for i, ((want, _), (got, _), right) in enumerate(zip(torch_out, llama_out, expected, strict=True)):
        want_text, got_text = tokenizer.decode(want).strip(), tokenizer.decode(got).strip()
        verdicts = [(bool(ANSWER_FORM.match(t)), t == right or not exact) for t in (want_text, got_text)]
        if verdicts[0] != verdicts[1]:
            flips.append(f"row {i}: torch {want_text!r}, llama.cpp {got_text!r}, want {right!r}")
        counts["form"] += verdicts[0][0]
        counts["exact"] += want_text == right
        counts["llama_exact"] += got_text == right
        counts["same_tokens"] += want == got
    assert len(flips) <= max_flips, "; ".join(flips)
    print(
        f"\nllama.cpp vs torch: {counts['same_tokens']}/{len(expected)} token streams identical, form "
        f"{counts['form']} (both), exact {counts['llama_exact']} (torch {counts['exact']})"
    )
    return counts
