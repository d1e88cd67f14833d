"""Build the minimal-preference corpus: chatty arithmetic answers tagged bad, some rewritten, few good rows.

    python make_corpus.py [--seed 0] [--good 8] [--rewrites 8] [--bad 24] [--eval 24] [--out data]

The taught style is minimal-sft's, `answer: <integer>`; the questions never state it. What a user would have tagged
in the editor, written as the files `machine export` gives for those tags (under --out, default data/):

- ``sft_full.jsonl`` -- every good answer SFT can use: the good rows plus the rewrites applied (the store's good
  rows, as `machine train sft` reads them): ``--good + --rewrites`` rows.
- ``sft_half.jsonl`` -- half of them: the rewrites alone (the good answers the preference arms also see).
- ``sft_other_half.jsonl`` -- the other half: the good rows alone (how much the choice of the half matters).
- ``pairs.jsonl``    -- one pair per rewrite, in the cookbook's comparison format (`machine export pairs`): the
  rewrite is chosen (label "A"), the model's chatty original rejected.
- ``pairs_wrong_sum.jsonl`` -- the same chosen answers against ``answer: N`` with a wrong N (1 to 9 off): pairs
  that differ in the digits, not the style (what a user tags when the model kept the format and slipped).
- ``kto.jsonl``      -- every tag as a KTO example (`machine export kto`): the rewrites desirable; the rewritten
  originals and the other ``--bad`` chatty answers undesirable.
- ``eval.jsonl``     -- held-out rows graded ``exact`` against ``answer: N``.
- ``manifest.json``  -- seed, counts and the sha256 of every file.

The chatty answers are right about the sum: what is bad about them is the style, so a held-out row that is wrong
after training is an arithmetic slip or a format miss, both counted by the eval. Operand pairs never repeat and are
disjoint between training and held-out rows, (A, B) and (B, A) counted as one. Same seed, same bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data"


def _load_sft_corpus() -> ModuleType:
    """minimal-sft's generator: its operands, question templates, pair drawing and file writing are this corpus's
    too (loaded by path: this file has the same name)."""
    spec = importlib.util.spec_from_file_location(
        "minimal_sft_make_corpus", HERE.parent / "minimal-sft" / "make_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_sft = _load_sft_corpus()
LOW, HIGH, TEMPLATES = _sft.LOW, _sft.HIGH, _sft.TEMPLATES
draw_pairs = _sft.draw_pairs

# What a chatty assistant says instead of the one line the user wants (all of them right about the sum).
CHATTY = (
    "Sure! {a} plus {b} equals {s}. Let me know if you have any other questions!",
    "Great question! To add {a} and {b}, add the ones, then the tens. The result is {s}.",
    "The sum of {a} and {b} is {s}. I hope this helps!",
    "Let's work it out step by step: {a} + {b} = {s}. So the answer is {s}.",
    "Of course! When you add {a} and {b}, you get {s}.",
)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


class Corpus:
    """Every file's rows, drawn from one seeded generator in a fixed order."""

    def __init__(self, seed: int, good: int, rewrites: int, bad: int, n_eval: int) -> None:
        rng = random.Random(seed)
        pairs = draw_pairs(rng, good + rewrites + bad + n_eval)
        asked = [(rng.choice(TEMPLATES).format(a=a, b=b), a, b) for a, b in pairs]
        chatty = [rng.choice(CHATTY).format(a=a, b=b, s=a + b) for _, a, b in asked]
        g, r, x = good, good + rewrites, good + rewrites + bad
        self.good = [[user(q), assistant(f"answer: {a + b}")] for q, a, b in asked[:g]]
        self.rewritten = [
            ([user(q)], f"answer: {a + b}", chatty[i]) for i, (q, a, b) in enumerate(asked[g:r], g)
        ]
        self.bad = [([user(q)], chatty[i]) for i, (q, _, _) in enumerate(asked[r:x], r)]
        self.eval = [
            {"messages": [user(q)], "expected": f"answer: {a + b}", "match": "exact", "id": f"eval-{i:03d}"}
            for i, (q, a, b) in enumerate(asked[x:], start=1)
        ]
        # Drawn last, so every other file keeps its bytes: what the model said had it kept the style and slipped
        # on the sum (1 to 9 off), for the pairs that differ in the digits rather than the style
        slips = [rng.choice((-1, 1)) * rng.randint(1, 9) for _ in self.rewritten]
        self.wrong_sums = [
            f"answer: {int(better.split()[1]) + d}"
            for (_, better, _), d in zip(self.rewritten, slips, strict=True)
        ]

    def files(self) -> dict[str, list[dict]]:
        rewrites = [{"messages": [*prompt, assistant(better)]} for prompt, better, _ in self.rewritten]
        pairs = [
            {
                "comparison": {
                    "prompt_conversation": prompt,
                    "completion_A": [assistant(better)],
                    "completion_B": [assistant(original)],
                },
                "label": "A",
            }
            for prompt, better, original in self.rewritten
        ]
        kto = [
            {"prompt": prompt, "completion": [assistant(text)], "label": label}
            for prompt, better, original in self.rewritten
            for text, label in ((better, True), (original, False))
        ] + [{"prompt": prompt, "completion": [assistant(text)], "label": False} for prompt, text in self.bad]
        return {
            "sft_full.jsonl": [{"messages": m} for m in self.good] + rewrites,
            "sft_half.jsonl": rewrites,
            "sft_other_half.jsonl": [{"messages": m} for m in self.good],
            "pairs.jsonl": pairs,
            "pairs_wrong_sum.jsonl": [
                {**pair, "comparison": {**pair["comparison"], "completion_B": [assistant(wrong)]}}
                for pair, wrong in zip(pairs, self.wrong_sums, strict=True)
            ],
            "kto.jsonl": kto,
            "eval.jsonl": self.eval,
        }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--good", type=int, default=8, metavar="N", help="rows tagged good as they were (default 8)"
    )
    p.add_argument(
        "--rewrites", type=int, default=8, metavar="N", help="bad rows given a rewrite (default 8)"
    )
    p.add_argument("--bad", type=int, default=24, metavar="N", help="more bad rows, no rewrite (default 24)")
    p.add_argument("--eval", type=int, default=24, metavar="N", help="held-out rows (default 24)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR")
    args = p.parse_args(argv)
    for name in ("rewrites", "eval"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    for name in ("good", "bad"):
        if getattr(args, name) < 0:
            p.error(f"--{name} must be >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        corpus = Corpus(args.seed, args.good, args.rewrites, args.bad, args.eval)
    except ValueError as exc:
        print(f"make_corpus: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {
        "generator": "examples/minimal-preference/make_corpus.py",
        "seed": args.seed,
        "counts": {"good": args.good, "rewrites": args.rewrites, "bad": args.bad, "eval": args.eval},
        "provenance": "synthetic, generated by this script; no third-party data",
        "files": {},
    }
    _sft.write_files(out, corpus.files(), manifest)
    summary = ", ".join(f"{n} ({m['rows']})" for n, m in manifest["files"].items())
    print(f"wrote {out}: {summary}, manifest.json (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
