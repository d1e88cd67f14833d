"""Run the minimal-preference comparison: SFT alone vs DPO vs KTO vs SFT then DPO, on the same held-out rows.

    python run_example.py [--steps 12] [--seed 0] [--workdir work] [--arms sft-full,sft-half,dpo,kto,sft+dpo]

Every arm is one `machine train run` on its file (make_corpus.py) in one project (`work/`, recreated), then
`machine train eval checkpoint` of its final checkpoint on `data/eval.jsonl`; the base model is evaluated once as
the baseline. `work/summary.json` holds each arm's held-out exact match and format rate and the exact McNemar p of
each arm against SFT on every good answer (`sft-full`) and against SFT on the same half (`sft-half`), computed from
the eval result files; write_results.py turns
the recorded files into docs/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: the config of the KTO arms recorded before kto_desirable_weight defaulted to "auto": both class weights 1
WEIGHTS_1 = "machine-kto-weights-1.toml"
#: the corpus's pairs and KTO rows with each chatty original replaced by the base model's own answer (write_own)
OWN_PAIRS, OWN_KTO = "pairs_own.jsonl", "kto_own.jsonl"
#: tokens per own answer: enough for the base model's whole answer (34 to 185 tokens seen), as the user tagged it.
#: At 64, most answers were cut short, and a cut answer still gets the end-of-turn token when rendered, so the
#: preference terms pushed that token down (the answers then ran on past `answer: N`).
OWN_TOKENS = 256
# arm -> (objective, its `train run` arguments, what it trains on)
ARMS: dict[str, tuple[str, list[str], str]] = {
    "sft-full": ("sft", ["--data", "data/sft_full.jsonl"], "SFT on every good answer (good rows + rewrites)"),
    "sft-half": ("sft", ["--data", "data/sft_half.jsonl"], "SFT on half of them (the rewrites)"),
    # The same count of good answers as sft-half, other rows: how much the choice of the half moves exact match
    "sft-other-half": (
        "sft",
        ["--data", "data/sft_other_half.jsonl"],
        "SFT on the other half (the good rows alone)",
    ),
    "dpo": ("dpo", ["--data", "data/pairs.jsonl"], "DPO on the pairs (rewrite vs chatty original)"),
    "kto": (
        "kto",
        ["--data", "data/kto.jsonl", "--config", WEIGHTS_1],
        "KTO on every tag (rewrites good, chatty answers bad), class weights 1",
    ),
    "sft+dpo": (
        "sft+dpo",
        ["--data", "data/sft_half.jsonl", "--pairs", "data/pairs.jsonl", "--dpo-lr", "5e-4"],
        "SFT on the rewrites, then DPO on the pairs (both stages at 5e-4)",
    ),
    # The same preference arms at a tenth of the learning rate (tinker-cookbook's DPO recipe runs at a tenth of
    # its SFT rate): at 5e-4 a dozen DPO/KTO steps on 8 pairs drive the loss to ~0 and the answers off the rails.
    "dpo-lr5e-5": (
        "dpo",
        ["--data", "data/pairs.jsonl", "--lr", "5e-5"],
        "DPO on the pairs, learning rate 5e-5",
    ),
    "kto-lr5e-5": (
        "kto",
        ["--data", "data/kto.jsonl", "--lr", "5e-5", "--config", WEIGHTS_1],
        "KTO on every tag, class weights 1, learning rate 5e-5",
    ),
    # The field's fixes (issue 19's second round): RPO (DPO + rpo_alpha * NLL of the chosen answer, Pang et al.
    # 2024; TRL's rpo_alpha) gives the digits the signal DPO cannot (chosen and rejected carry the same sum), and
    # the sft+dpo DPO stage at its own, lower rate (default a tenth of the SFT stage's) refines instead of undoing.
    "dpo-rpo": (
        "dpo",
        ["--data", "data/pairs.jsonl", "--rpo-alpha", "1"],
        "DPO + NLL of the chosen answer (RPO, rpo_alpha 1)",
    ),
    # Pairs that differ in the digits, not the style: does the preference term teach sums when it can see them?
    "dpo-rpo-wrong-sum": (
        "dpo",
        ["--data", "data/pairs_wrong_sum.jsonl", "--rpo-alpha", "1"],
        "DPO + NLL of the chosen answer (RPO, alpha 1) on pairs whose rejected is `answer: N` with a wrong N",
    ),
    "sft+dpo-rpo": (
        "sft+dpo",
        ["--data", "data/sft_half.jsonl", "--pairs", "data/pairs.jsonl", "--rpo-alpha", "1"],
        "SFT on the rewrites, then RPO (alpha 1) on the pairs at a tenth of the rate",
    ),
    "sft+dpo-lr5e-5": (
        "sft+dpo",
        ["--data", "data/sft_half.jsonl", "--pairs", "data/pairs.jsonl"],
        "SFT on the rewrites, then DPO on the pairs at a tenth of the rate (5e-5)",
    ),
    "kto-lr1.5e-4": (
        "kto",
        ["--data", "data/kto.jsonl", "--lr", "1.5e-4", "--config", WEIGHTS_1],
        "KTO on every tag, class weights 1, learning rate 1.5e-4",
    ),
    # The arms above ran KTO with both class weights 1: 8 good vs 32 bad tags put 4x more of the loss on pushing
    # chatty answers down than on pulling the rewrites up. The KTO paper keeps desirable_weight * n_good /
    # (undesirable_weight * n_bad) in [1, 4/3]; kto_desirable_weight = "auto" (now the default) makes it 1.
    "kto-balanced": (
        "kto",
        ["--data", "data/kto.jsonl"],
        "KTO on every tag, desirable weight auto (4: 8 good vs 32 bad)",
    ),
    "kto-balanced-lr1.5e-4": (
        "kto",
        ["--data", "data/kto.jsonl", "--lr", "1.5e-4"],
        "KTO on every tag, desirable weight auto (4), learning rate 1.5e-4",
    ),
    "kto-balanced-lr3e-4": (
        "kto",
        ["--data", "data/kto.jsonl", "--lr", "3e-4"],
        "KTO on every tag, desirable weight auto (4), learning rate 3e-4",
    ),
    # The pairs and tags as the store holds them when the user tags what the model said: every rejected or
    # undesirable answer is the base model's own greedy answer to its prompt (on-policy, as the issue's "the model's
    # original = rejected"), not the corpus's scripted chatty one, whose right sum DPO and KTO push down with it.
    "dpo-rpo-own": (
        "dpo",
        ["--data", f"data/{OWN_PAIRS}", "--rpo-alpha", "1"],
        "DPO + NLL of the chosen answer (RPO, alpha 1) on pairs whose rejected is the base model's own answer",
    ),
    "kto-balanced-lr3e-4-own": (
        "kto",
        ["--data", f"data/{OWN_KTO}", "--lr", "3e-4"],
        "KTO as `kto-balanced-lr3e-4`, with the base model's own answers as the undesirable ones",
    ),
    "kto-balanced-own": (
        "kto",
        ["--data", f"data/{OWN_KTO}"],
        "KTO as `kto-balanced`, at 5e-4, with the base model's own answers as the undesirable ones",
    ),
}
REFERENCE_ARM = "sft-full"
#: SFT on the same good rows the preference arms see (the rewrites): the measure's like-for-like comparison
HALF_ARM = "sft-half"
MACHINE_TOML = """\
# minimal-preference: every arm the same but for its objective and data (run_example.py)
[train]
engine = "local"
batch_size = 8
learning_rate = 5e-4
save_every = 0
seed = 0

[gate]
enabled = false  # the arms are compared on data/eval.jsonl below, not gated
"""


def machine_argv() -> list[str]:
    script = Path(sys.executable).parent / "machine"
    return [str(script)] if script.exists() else [sys.executable, "-m", "machine_lsp.cli.main"]


def run(argv: list[str], cwd: Path) -> None:
    shown = ["machine", *argv[len(machine_argv()) :]] if argv[0] != sys.executable else argv
    print("$ " + " ".join(shown), flush=True)
    if subprocess.run(argv, cwd=cwd, check=False).returncode:
        raise SystemExit(f"run_example: {' '.join(argv)} failed")


def last_run(project: Path, after: set[str]) -> dict:
    """The manifest of the train-run that started after `after` (the run ids seen before it)."""
    fresh = [p for p in (project / ".machine" / "runs").glob("*train-run*") if p.name not in after]
    if len(fresh) != 1:
        raise SystemExit(f"run_example: expected one new train run, found {len(fresh)}")
    return json.loads((fresh[0] / "manifest.json").read_text(encoding="utf-8"))


def run_arm(name: str, steps: int, work: Path) -> None:
    """Train the arm, then evaluate its final checkpoint into eval_results/<arm>.json (skipped when it exists)."""
    if (work / "eval_results" / f"{name}.json").exists():
        print(f"{name}: kept from an earlier run (eval_results/{name}.json)")
        return
    objective, data, _ = ARMS[name]
    m = machine_argv()
    before = {p.name for p in (work / ".machine" / "runs").glob("*")}
    train = [*m, "train", "run", *data, "--objective", objective, "--epochs", "100", "--steps", str(steps)]
    run([*train, "--yes", "--json"], work)
    manifest = last_run(work, before)
    evaluate = [*m, "train", "eval", "checkpoint", manifest["last_checkpoint"], "--data", "data/eval.jsonl"]
    run([*evaluate, "--out", f"eval_results/{name}.json", "--yes"], work)


def write_own(work: Path) -> None:
    """data/pairs_own.jsonl and data/kto_own.jsonl: the corpus's pairs and KTO rows with every rejected or
    undesirable answer replaced by the base model's own greedy answer to the same prompt (`machine train eval
    baseline` on the prompts tagged bad, its outputs in own/answers.json)."""
    data = work / "data"
    kto = [json.loads(line) for line in (data / "kto.jsonl").read_text(encoding="utf-8").splitlines()]
    prompts = {
        json.dumps(row["prompt"]): f"bad-{i:03d}" for i, row in enumerate(r for r in kto if not r["label"])
    }
    asked = [
        {"messages": json.loads(p), "expected": "", "match": "exact", "id": i} for p, i in prompts.items()
    ]
    write_lines(data / "prompts_tagged_bad.jsonl", asked)
    answers = work / "own" / "answers.json"
    if not answers.exists():
        generate = [*machine_argv(), "train", "eval", "baseline", "--data", "data/prompts_tagged_bad.jsonl"]
        run([*generate, "--max-tokens", str(OWN_TOKENS), "--out", "own/answers.json", "--yes"], work)
    said = {row["id"]: row["output"] for row in json.loads(answers.read_text(encoding="utf-8"))["rows"]}

    def own(prompt: list[dict]) -> list[dict]:
        return [{"role": "assistant", "content": said[prompts[json.dumps(prompt)]]}]

    write_lines(data / OWN_KTO, [r if r["label"] else {**r, "completion": own(r["prompt"])} for r in kto])
    pairs = [json.loads(line) for line in (data / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    write_lines(
        data / OWN_PAIRS,
        [
            {
                **p,
                "comparison": {
                    **p["comparison"],
                    "completion_B": own(p["comparison"]["prompt_conversation"]),
                },
            }
            for p in pairs
        ],
    )


def write_lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def arm_record(work: Path, name: str) -> dict:
    """An arm's figures, from its own files: the eval result and the manifest of the run it evaluated."""
    result = json.loads((work / "eval_results" / f"{name}.json").read_text())
    record = {
        "arm": name,
        "result": f"eval_results/{name}.json",
        "n": result["n"],
        "exact": result["correct"],
    }
    record.update(format_ok=result["format_ok"], eval_seconds=result["timings"]["total_seconds"])
    if result.get("checkpoint"):
        run_id = result["checkpoint"].split("://", 1)[1].split("/", 1)[0]
        manifest = json.loads((work / ".machine" / "runs" / run_id / "manifest.json").read_text())
        done = manifest["result"]
        record.update(
            run_id=run_id, checkpoint=result["checkpoint"], objective=manifest["config"]["objective"]
        )
        record.update(steps=done["steps"], train_seconds=done["seconds"], losses=done["losses"])
        stages = (manifest.get("objective") or {}).get("stages") or []
        rates = [stage["learning_rate"] for stage in stages if "learning_rate" in stage]
        lr = " then ".join(map(str, rates)) if len(rates) > 1 else manifest["config"]["learning_rate"]
        record.update(lr=lr, data=[d["source"] for d in manifest["data"]])
    return record


def correct(work: Path, name: str, prefix: str = "") -> dict[str, bool]:
    """An arm's held-out verdicts by row id (`prefix` keeps ids of several seeds apart)."""
    rows = json.loads((work / "eval_results" / f"{name}.json").read_text())["rows"]
    return {f"{prefix}{r['id']}": r["correct"] for r in rows}


def versus(mine: dict[str, bool], ref: dict[str, bool]) -> dict:
    """Rows gained and lost against the reference arm, paired by id, and their exact McNemar p (the gate's own
    pairing and test)."""
    from machine_lsp.core.evals import mcnemar_exact_p
    from machine_lsp.core.gate import paired_counts

    gained, lost = paired_counts([ref[k] for k in mine], list(mine.values()))
    return {"gained": gained, "lost": lost, "mcnemar_p": mcnemar_exact_p(gained, lost)}


def summarize(work: Path, names: list[str]) -> dict:
    """Exact match and format rate per arm, and the exact McNemar p against sft-full and sft-half."""
    ref = correct(work, REFERENCE_ARM) if REFERENCE_ARM in names else None
    half = correct(work, HALF_ARM) if HALF_ARM in names else None
    records = [arm_record(work, name) for name in ["baseline", *names]]
    for arm in records:
        if ref is not None and arm["arm"] != REFERENCE_ARM:
            arm.update(vs=REFERENCE_ARM, **versus(correct(work, arm["arm"]), ref))
        if half is not None and arm["arm"] not in ("baseline", HALF_ARM):
            arm["vs_half"] = {"vs": HALF_ARM, **versus(correct(work, arm["arm"]), half)}
    return {"baseline": records[0], "arms": records[1:]}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12, help="optimizer steps per arm (each stage of sft+dpo)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--seeds",
        default="",
        help="comma-separated corpus seeds, e.g. 0,1,2: each a run of its own in WORKDIR/seed-S, then "
        "WORKDIR/pooled.json pools their held-out rows (replaces --seed)",
    )
    p.add_argument("--corpus", default="", help="extra make_corpus.py arguments, e.g. '--bad 4 --eval 2'")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--workdir", type=Path, default=HERE / "work", help="recreated on every run (but --keep)")
    p.add_argument("--keep", action="store_true", help="keep the work directory: arms already evaluated stay")
    args = p.parse_args(argv)
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arm(s) {', '.join(unknown)}: choose from {', '.join(ARMS)}")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds takes comma-separated integers, got {args.seeds!r}")
    return args


def make_corpus(work: Path, seed: int, corpus_args: str) -> None:
    """Write data/ (the same seed and arguments give the same bytes); a kept work directory whose held-out rows were
    drawn with other arguments is refused, as its arms' results would not be on these rows."""
    manifest = work / "data" / "manifest.json"
    before = json.loads(manifest.read_text())["files"]["eval.jsonl"] if manifest.exists() else None
    m = [sys.executable, str(HERE / "make_corpus.py"), "--out", "data", "--seed", str(seed)]
    run([*m, *corpus_args.split()], work)
    if before is not None and json.loads(manifest.read_text())["files"]["eval.jsonl"] != before:
        raise SystemExit(
            f"run_example: {work} was run on other held-out rows; drop --keep or use its --corpus"
        )


def run_seed(args: argparse.Namespace, work: Path, seed: int) -> dict:
    """One corpus seed: the corpus, the baseline, each arm; work/summary.json."""
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    (work / ".machine").mkdir(parents=True, exist_ok=True)
    (work / "machine.toml").write_text(MACHINE_TOML, encoding="utf-8")
    weights_1 = MACHINE_TOML.replace("[train]\n", "[train]\nkto_desirable_weight = 1.0\n", 1)
    (work / WEIGHTS_1).write_text(weights_1, encoding="utf-8")
    make_corpus(work, seed, args.corpus)
    if not (work / "eval_results" / "baseline.json").exists():
        run([*machine_argv(), "train", "eval", "baseline", "--data", "data/eval.jsonl", "--yes"], work)
    if any(f"data/{own}" in ARMS[name][1] for name in args.arms for own in (OWN_PAIRS, OWN_KTO)):
        write_own(work)
    for name in args.arms:
        run_arm(name, args.steps, work)
    summary = summarize(work, args.arms)
    summary.update(
        steps=args.steps,
        seed=seed,
        corpus_args=args.corpus,
        load_average_at_end=list(os.getloadavg()),
        cpu_count=os.cpu_count(),
    )
    (work / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def pool(work: Path, seeds: list[int], names: list[str]) -> dict:
    """Every seed's held-out rows as one paired sample (row ids prefixed by the seed): each arm's totals and the
    exact McNemar p against sft-full and sft-half over all of them."""

    def pooled(name: str) -> dict[str, bool]:
        return {k: ok for seed in seeds for k, ok in correct(work / f"seed-{seed}", name, f"{seed}/").items()}

    arms = []
    for name in ["baseline", *names]:
        records = [arm_record(work / f"seed-{seed}", name) for seed in seeds]
        arm = {"arm": name, "per_seed_exact": [r["exact"] for r in records]}
        arm.update({key: sum(r[key] for r in records) for key in ("n", "exact", "format_ok")})
        for ref in (REFERENCE_ARM, HALF_ARM):
            if ref in names and ref != name:
                arm[f"vs_{ref}"] = versus(pooled(name), pooled(ref))
        arms.append(arm)
    return {"seeds": seeds, "arms": arms}


def print_summary(arms: list[dict]) -> None:
    for arm in arms:
        p = f", McNemar p vs {arm['vs']} {arm['mcnemar_p']:.4g}" if "vs" in arm else ""
        ref = arm.get(f"vs_{REFERENCE_ARM}")
        p = p or (f", McNemar p vs {REFERENCE_ARM} {ref['mcnemar_p']:.4g}" if ref else "")
        print(f"{arm['arm']:>14}: exact {arm['exact']}/{arm['n']}, format {arm['format_ok']}/{arm['n']}{p}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work: Path = args.workdir.resolve()
    if work == HERE or HERE.is_relative_to(work):
        raise SystemExit("run_example: --workdir must be a directory of its own")
    os.environ.pop("MACHINE_HOME", None)  # the work directory is the project
    if not args.seeds:
        summary = run_seed(args, work, args.seed)
        print_summary([summary["baseline"], *summary["arms"]])
        return 0
    for seed in args.seeds:
        run_seed(args, work / f"seed-{seed}", seed)
    pooled = pool(work, args.seeds, args.arms)
    pooled.update(steps=args.steps, corpus_args=args.corpus, cpu_count=os.cpu_count())
    (work / "pooled.json").write_text(json.dumps(pooled, indent=2) + "\n", encoding="utf-8")
    print(f"pooled over seeds {', '.join(map(str, args.seeds))}:")
    print_summary(pooled["arms"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
