"""Build the minimal-sft corpus: bare addition questions answered in a strict style, `answer: <integer>`.

    python make_corpus.py [--seed 0] [--train 48] [--eval 24] [--out data]

Writes, under --out (default: data/ next to this script, git-ignored):

- ``train.jsonl``  -- training rows ``{"messages": [user, assistant]}``; the assistant says exactly ``answer: 62``.
- ``eval.jsonl``   -- held-out rows ``{"messages": [user], "expected": "answer: 62", "match": "exact", "id": ...}``.
- ``manifest.json`` -- seed, counts, operand range, and the sha256 of every file written.

The questions never state the format ("What is 47 plus 15?"), so the format can only come from the training rows.
Operand pairs never repeat and are disjoint between the two files, counting (A, B) and (B, A) as the same pair.
Everything above is a pure function of the arguments: the same seed gives byte-identical files.

Style scoping is not done here: trained from the store (tag these rows, then `machine retrain`), a run adds anchor
rows itself -- the base model's own answers to other prompts (machine.toml `[train] scope`, docs/TRAINING.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data"
PROBE_EXTRA = (
    HERE / "probe_extra.txt"
)  # held-out probe questions of this example (`train eval probe --questions`)
LOW, HIGH = 10, 99  # two-digit operands, inclusive

# Bare questions; none of them mentions the answer format.
TEMPLATES = (
    "What is {a} plus {b}?",
    "What's {a} plus {b}?",
    "How much is {a} plus {b}?",
    "What is {a} + {b}?",
)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def draw_pairs(rng: random.Random, count: int) -> list[tuple[int, int]]:
    """`count` distinct operand pairs; (a, b) and (b, a) count as the same pair. Order within a pair is random."""
    span = HIGH - LOW + 1
    available = span * (span + 1) // 2
    if count > available:
        raise ValueError(f"asked for {count} pairs; only {available} distinct pairs of {LOW}..{HIGH} exist")
    seen: set[tuple[int, int]] = set()
    pairs: list[tuple[int, int]] = []
    while len(pairs) < count:
        a, b = rng.randint(LOW, HIGH), rng.randint(LOW, HIGH)
        key = (min(a, b), max(a, b))
        if key in seen:
            continue
        seen.add(key)
        pairs.append((a, b))
    return pairs


def question(rng: random.Random, a: int, b: int) -> str:
    return rng.choice(TEMPLATES).format(a=a, b=b)


def build_rows(seed: int, n_train: int, n_eval: int) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    pairs = draw_pairs(rng, n_train + n_eval)
    train_rows = [
        {
            "messages": [
                {"role": "user", "content": question(rng, a, b)},
                {"role": "assistant", "content": f"answer: {a + b}"},
            ]
        }
        for a, b in pairs[:n_train]
    ]
    eval_rows = [
        {
            "messages": [{"role": "user", "content": question(rng, a, b)}],
            "expected": f"answer: {a + b}",
            "match": "exact",
            "id": f"eval-{i:03d}",
        }
        for i, (a, b) in enumerate(pairs[n_train:], start=1)
    ]
    return train_rows, eval_rows


def write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_files(out: Path, files: dict[str, list[dict]], manifest: dict) -> None:
    """Write every file, then manifest.json naming each one's rows and sha256 (under `files`, last)."""
    manifest["files"] = {}
    for name, rows in files.items():
        write_jsonl(out / name, rows)
        manifest["files"][name] = {"rows": len(rows), "sha256": sha256_file(out / name)}
    (out / "manifest.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--train", type=int, default=48, metavar="N", help="training rows (default 48)")
    p.add_argument("--eval", type=int, default=24, metavar="N", help="held-out eval rows (default 24)")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, metavar="DIR", help="output directory (default data/)"
    )
    args = p.parse_args(argv)
    for name in ("train", "eval"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        train_rows, eval_rows = build_rows(args.seed, args.train, args.eval)
    except ValueError as exc:
        print(f"make_corpus: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    files = {"train.jsonl": train_rows, "eval.jsonl": eval_rows}
    manifest: dict = {
        "generator": "examples/minimal-sft/make_corpus.py",
        "seed": args.seed,
        "counts": {"train": len(train_rows), "eval": len(eval_rows)},
        "operands": {"low": LOW, "high": HIGH, "operation": "addition"},
        "templates": list(TEMPLATES),
        "provenance": "synthetic, generated by this script; no third-party data",
    }
    for stale in ("style.jsonl", "train_scoped.jsonl"):  # written by earlier versions of this script
        if (out / stale).exists():
            (out / stale).unlink()
    write_files(out, files, manifest)
    summary = ", ".join(f"{n} ({m['rows']} rows)" for n, m in manifest["files"].items())
    print(f"wrote {out}: {summary}, manifest.json (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
