"""Build the minimal-sft corpus: bare addition questions answered in a strict style, `answer: <integer>`.

    python make_corpus.py [--seed 0] [--train 48] [--eval 24] [--out data] [--style-rows 16]

Writes, under --out (default: data/ next to this script, git-ignored):

- ``train.jsonl``  -- training rows ``{"messages": [user, assistant]}``; the assistant says exactly ``answer: 62``.
- ``eval.jsonl``   -- held-out rows ``{"messages": [user], "expected": "answer: 62", "match": "exact", "id": ...}``.
- ``manifest.json`` -- seed, counts, operand range, and the sha256 of every file written.

The questions never state the format ("What is 47 plus 15?"), so the format can only come from the training rows.
Operand pairs never repeat and are disjoint between the two files, counting (A, B) and (B, A) as the same pair.
Everything above is a pure function of the arguments: the same seed gives byte-identical files.

Style scoping (``--style-rows K``, K > 0): a model fine-tuned on these rows alone answers *every* short question
as ``answer: ...`` ("answer: Paris") -- style bleed. To scope the style to arithmetic, K off-distribution requests
(from ``STYLE_POOL`` below: facts, numbers, language, writing, explanations, taken in turn, shuffled by the seed;
kept apart from the engine's built-in bleed-probe questions, which this script checks) are answered by the *base*
model itself -- the embedded local engine's sampler with no adapter, greedy decoding, at most 64 tokens, a trailing
sentence cut by that limit dropped -- and written as ``style.jsonl``. ``train_scoped.jsonl`` is ``train.jsonl`` plus those rows,
interleaved deterministically; train on it instead of ``train.jsonl``. Those answers are deterministic for a given
model and machine, but they come from a model, so their checksums are recorded in the manifest rather than promised.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
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

# Off-distribution requests for style scoping, grouped by kind so that a pick covers every kind (round robin).
# Kept apart from the engine's bleed probe (checked at run time, rewordings included): the probe must measure
# bleed on requests the model never saw in training.
STYLE_POOL: dict[str, tuple[str, ...]] = {
    "facts": (
        "Who painted the Mona Lisa?",
        "What is the fastest land animal?",
        "What is the tallest mountain in the world?",
        "Who was the first person to walk on the Moon?",
        "What is the hardest natural substance?",
        "What do caterpillars turn into?",
        "Which instrument has 88 keys?",
        "What is the largest organ of the human body?",
    ),
    "numbers": (
        "How many legs does a spider have?",
        "How many days are there in a week?",
        "What is the boiling point of water in Celsius?",
        "What is the freezing point of water in Fahrenheit?",
        "How many minutes are in an hour?",
    ),
    "language": (
        "What is the plural of mouse?",
        "Give me a synonym for happy.",
        "What is a noun?",
        "Translate 'good night' into French.",
        "How do you say 'dog' in German?",
    ),
    "writing": (
        "Suggest a name for a pet goldfish.",
        "Write a short sentence about the sea.",
        "Describe a cat in one sentence.",
        "Give me a tip for sleeping better.",
        "List three kinds of vegetables.",
    ),
    "explanations": (
        "Why do leaves change color in autumn?",
        "What does a thermometer measure?",
        "Which gas do plants take in from the air?",
        "What is the main ingredient of guacamole?",
        "Explain what a rainbow is.",
    ),
}
STYLE_QUESTIONS: tuple[str, ...] = tuple(q for group in STYLE_POOL.values() for q in group)
STYLE_MAX_TOKENS = 64


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


def probe_questions() -> list[str]:
    """The engine's built-in bleed-probe questions (machine_lsp.core.evals) plus this example's extra probe."""
    from machine_lsp.core import evals

    extra = PROBE_EXTRA.read_text(encoding="utf-8").splitlines() if PROBE_EXTRA.exists() else []
    return [str(q) for q in evals.probe_prompts(extra)]


_STOPWORDS = frozenset(
    "a an and are as by do does for from how in into is it known mainly many me name of on one the there to what which who why you".split()
)


def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS)


def near_duplicates(
    questions: Sequence[str], others: Sequence[str], threshold: float = 0.5
) -> list[tuple[str, str]]:
    """Pairs whose content words overlap by Jaccard >= threshold (catches rewordings, not only exact copies)."""
    clashes = []
    for q in questions:
        wq = content_words(q)
        for o in others:
            wo = content_words(o)
            if wq and wo and len(wq & wo) / len(wq | wo) >= threshold:
                clashes.append((q, o))
    return clashes


def pick_style_questions(seed: int, k: int) -> list[str]:
    """K requests: each kind shuffled by the seed, then taken in turn, so every kind is covered once K >= 5."""
    if k > len(STYLE_QUESTIONS):
        raise ValueError(f"--style-rows {k}: only {len(STYLE_QUESTIONS)} style questions are defined")
    clash = near_duplicates(STYLE_QUESTIONS, probe_questions())
    if clash:
        raise ValueError(f"style questions overlap the bleed probe: {clash}")
    rng = random.Random(f"style-{seed}")
    queues = [rng.sample(group, len(group)) for group in STYLE_POOL.values()]
    picked: list[str] = []
    while len(picked) < k:
        for queue in queues:
            if queue and len(picked) < k:
                picked.append(queue.pop(0))
    return picked


def tidy_answer(text: str) -> str:
    """Drop a trailing incomplete sentence (left by the token limit); keep the model's own wording otherwise."""
    text = text.strip()
    if not text or text[-1] in ".!?)\"'*`":
        return text
    cut = max(text.rfind(m) for m in (". ", ".\n", "! ", "!\n", "? ", "?\n"))
    return text[: cut + 1].strip() if cut > 0 else text


def base_answers(questions: Sequence[str], engine: str, model: str | None, batch: int = 8) -> list[str]:
    """Greedy answers of the base model (no adapter) through the machine_lsp engine's sampler."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from machine_lsp.core.schema import Message
    from machine_lsp.engines import get_engine

    eng = get_engine(engine)  # type: ignore[arg-type]
    model_name = model or eng.default_model
    answers: list[str] = []
    with Progress(
        TextColumn("[bold]base-model answers"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=False,
    ) as progress:
        task = progress.add_task("style", total=len(questions))
        sampler = eng.sampler_for(model_name, None)
        for start in range(0, len(questions), batch):
            chunk = questions[start : start + batch]
            outs = sampler.sample([[Message(role="user", content=q)] for q in chunk], STYLE_MAX_TOKENS)
            answers.extend(tidy_answer(o) for o in outs)
            progress.advance(task, len(chunk))
    return answers


def write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def interleave(train_rows: Sequence[dict], style_rows: Sequence[dict], seed: int) -> list[dict]:
    rows = list(train_rows) + list(style_rows)
    random.Random(f"mix-{seed}").shuffle(rows)
    return rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--train", type=int, default=48, metavar="N", help="training rows (default 48)")
    p.add_argument("--eval", type=int, default=24, metavar="N", help="held-out eval rows (default 24)")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, metavar="DIR", help="output directory (default data/)"
    )
    p.add_argument(
        "--style-rows",
        type=int,
        default=0,
        metavar="K",
        help="add K off-distribution rows answered by the base model (style scoping; default 0 = off)",
    )
    p.add_argument("--engine", default="local", help="engine for --style-rows (default local)")
    p.add_argument(
        "--model", default=None, help="base model for --style-rows (default: the engine's default)"
    )
    args = p.parse_args(argv)
    for name in ("train", "eval"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.style_rows < 0:
        p.error("--style-rows must be >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        train_rows, eval_rows = build_rows(args.seed, args.train, args.eval)
        style_qs = pick_style_questions(args.seed, args.style_rows) if args.style_rows else []
    except ValueError as exc:
        print(f"make_corpus: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    files = {"train.jsonl": train_rows, "eval.jsonl": eval_rows}
    manifest: dict = {
        "generator": "examples/minimal-sft/make_corpus.py",
        "seed": args.seed,
        "counts": {"train": len(train_rows), "eval": len(eval_rows), "style": len(style_qs)},
        "operands": {"low": LOW, "high": HIGH, "operation": "addition"},
        "templates": list(TEMPLATES),
        "provenance": "synthetic, generated by this script; no third-party data",
    }
    if style_qs:
        answers = base_answers(style_qs, args.engine, args.model)
        style_rows = [
            {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            for q, a in zip(style_qs, answers, strict=True)
            if a
        ]
        files["style.jsonl"] = style_rows
        files["train_scoped.jsonl"] = interleave(train_rows, style_rows, args.seed)
        manifest["counts"]["style"] = len(style_rows)
        manifest["style"] = {
            "how": "off-distribution questions answered by the base model itself: no adapter, greedy decoding",
            "engine": args.engine,
            "model": args.model or "engine default",
            "max_tokens": STYLE_MAX_TOKENS,
            "questions": style_qs,
        }
    for stale in ("style.jsonl", "train_scoped.jsonl"):
        if stale not in files and (out / stale).exists():
            (out / stale).unlink()
    manifest["files"] = {}
    for name, rows in files.items():
        write_jsonl(out / name, rows)
        manifest["files"][name] = {"rows": len(rows), "sha256": sha256_file(out / name)}
    (out / "manifest.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    summary = ", ".join(f"{n} ({m['rows']} rows)" for n, m in manifest["files"].items())
    print(f"wrote {out}: {summary}, manifest.json (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
