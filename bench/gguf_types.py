"""Which GGUF type `machine serve --backend llama.cpp` serves: greedy answers of each type against the torch backend.

On the 24 held-out rows of examples/minimal-sft (its own generator, default seed), for the base model and a
checkpoint trained on the example's train.jsonl (`machine train run`, --steps, fresh unless --checkpoint): the torch
backend's greedy answers (the reference, `generation.BatchGenerator`) and the llama.cpp backend's for each type in
`gguf_export.GGUF_TYPES` (1 thread, 1 context). Per type: rows whose token streams equal torch's, the first token
where the others differ, the answers in the `answer: N` form and the exact matches with the expected answer (the
same counts for torch first). Prints a markdown table.

Run: .venv/bin/python bench/gguf_types.py [--checkpoint DIR] [--steps 10] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FORM = re.compile(r"^answer: -?\d+$")
Answers = list[tuple[list[int], str | None]]


def corpus(out: Path) -> tuple[list[dict], list[dict]]:
    """examples/minimal-sft's train rows and held-out rows, made by its own script."""
    subprocess.run(
        [sys.executable, str(REPO / "examples/minimal-sft/make_corpus.py"), "--out", str(out)], check=True
    )
    read = lambda name: [json.loads(line) for line in (out / name).read_text().splitlines()]  # noqa: E731
    return read("train.jsonl"), read("eval.jsonl")


def train(project: Path, data: Path, steps: int) -> Path:
    (project / ".machine").mkdir(parents=True)
    argv = [sys.executable, "-m", "machine_lsp.cli.main", "train", "run", "--yes", "--data", str(data)]
    done = subprocess.run(
        [*argv, "--steps", str(steps), "--save-every", "0"], cwd=project, capture_output=True
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr.decode()[-2000:])
    from machine_lsp.serve.checkpoints import resolve

    directory = resolve("latest", project / ".machine").directory
    assert directory is not None
    return directory


def decode_all(generator: Any, prompts: list[list[int]], max_tokens: int) -> Answers:
    from machine_lsp.serve.generation import Generation

    async def run() -> Answers:
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


def scores(answers: Answers, expected: list[str], tokenizer: Any) -> tuple[int, int]:
    texts = [tokenizer.decode(tokens).strip() for tokens, _ in answers]
    return sum(bool(FORM.match(t)) for t in texts), sum(t == e for t, e in zip(texts, expected, strict=True))


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def rows_for(name: str, checkpoint: Path | None, prompts: list, expected: list[str], args: Any) -> list[str]:
    from machine_lsp.engines import gguf_export
    from machine_lsp.serve import generation, llama_backend

    store = (
        checkpoint.parents[3] if checkpoint is not None else None
    )  # <project>/.machine/runs/ID/checkpoints/N
    reference = generation.load(checkpoint, store_root=store)
    want = decode_all(generation.BatchGenerator(reference), prompts, args.max_tokens)
    tokenizer = reference.tokenizer
    form, exact = scores(want, expected, tokenizer)
    lines = [f"| {name} | torch (reference) | - | - | {form}/24 | {exact}/24 | - |"]
    del reference
    for gguf_type in gguf_export.GGUF_TYPES:
        started = time.perf_counter()
        loaded = llama_backend.load(checkpoint, store_root=store, threads=1, gguf_type=gguf_type)
        ready = time.perf_counter() - started
        got = decode_all(llama_backend.generator_for(loaded), prompts, args.max_tokens)
        same = sum(g == w for g, w in zip(got, want, strict=True))
        differs = [first_difference(g[0], w[0]) for g, w in zip(got, want, strict=True) if g != w]
        where = ", ".join(str(i) for i in sorted(differs)) or "-"
        form, exact = scores(got, expected, tokenizer)
        lines.append(
            f"| {name} | llama.cpp {gguf_type} | {same}/24 | {where} | {form}/24 | {exact}/24 | {ready:.1f} s |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, help="a checkpoint directory (default: train one)")
    parser.add_argument("--steps", type=int, default=10, help="training steps of the fresh checkpoint")
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()

    from machine_lsp.core.schema import Message
    from machine_lsp.engines import render

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _, held_out = corpus(root / "data")
        checkpoint = args.checkpoint or train(root / "project", root / "data" / "train.jsonl", args.steps)
        _, renderer = render.load_tokenizer_and_renderer("HuggingFaceTB/SmolLM2-135M-Instruct")
        user_turns = [[Message(**m) for m in row["messages"] if m["role"] != "assistant"] for row in held_out]
        prompts = [render.prompt_tokens(turns, renderer) for turns in user_turns]
        expected = [row["expected"] for row in held_out]
        trained = f"trained ({args.steps} steps)" if args.checkpoint is None else str(args.checkpoint)
        lines = [
            f"Greedy, {args.max_tokens} tokens, the 24 held-out rows of examples/minimal-sft "
            f"(`python bench/gguf_types.py --steps {args.steps} --max-tokens {args.max_tokens}`).",
            "",
            "| model | backend | token streams = torch | first differing token | `answer: N` form | exact | "
            "GGUF ready |",
            "|---|---|---|---|---|---|---|",
            *rows_for("base", None, prompts, expected, args),
            *rows_for(trained, checkpoint, prompts, expected, args),
        ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
