"""Write docs/RESULTS.md from a run's own result files (run_example.py's work directory).

    python write_results.py [--from work] [--results docs/results] [--out docs/RESULTS.md]

`--from DIR` first copies the files that matter out of a work directory into `--results` (summary.json, every
arm's eval result and train-run manifest, the corpus manifest); the page is then rendered from `--results` alone:
every number on it is read from those files, and their sha256 checksums close the page. `notes.md` in `--results`,
when present, is the hand-written reading of the numbers, placed under the tables.

`--from-seeds DIR` copies a multi-seed run (`run_example.py --seeds`: DIR/pooled.json and DIR/seed-S/) into
`results-seeds/` beside `--results` the same way; when that directory exists the page gets a replication section,
rendered from it alone, and its files join the checksums. `--from-own DIR` does the same for the multi-seed run of
the `*-own` arms (the base model's own answers as the rejected ones) into `results-own/`, and `--from-confirm DIR`
for the run that checks the two `*-own` arms chosen there on fresh corpus seeds, into `results-own-confirm/`:
each a section of its own (see REPLICATIONS).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run_example import ARMS, HALF_ARM, REFERENCE_ARM  # noqa: E402

SHOWN_ROWS = 4
#: the multi-seed runs beside `results/` (each a `run_example.py --seeds` work directory, collected), in page order:
#: directory -> (the write_results flag that collects it, the page's section title)
REPLICATIONS = {
    "results-seeds": ("--from-seeds", "Replication over corpus seeds"),
    "results-own": ("--from-own", "The model's own answers as the bad ones, over the same corpus seeds"),
    "results-own-confirm": (
        "--from-confirm",
        "The two `*-own` arms chosen above, confirmed on fresh corpus seeds",
    ),
}


def collect(work: Path, results: Path) -> None:
    """Copy a work directory's result files into `results` (replaced), keeping notes.md."""
    notes = (results / "notes.md").read_text(encoding="utf-8") if (results / "notes.md").exists() else None
    shutil.rmtree(results, ignore_errors=True)
    (results / "eval_results").mkdir(parents=True)
    summary = json.loads((work / "summary.json").read_text(encoding="utf-8"))
    shutil.copy(work / "summary.json", results / "summary.json")
    shutil.copy(work / "data" / "manifest.json", results / "corpus-manifest.json")
    for arm in [summary["baseline"], *summary["arms"]]:
        shutil.copy(work / arm["result"], results / arm["result"])
        if arm.get("run_id"):
            shutil.copy(
                work / ".machine" / "runs" / arm["run_id"] / "manifest.json",
                results / f"{arm['arm']}-run.json",
            )
    if (work / "own" / "answers.json").exists():  # the base model's own answers the *-own arms reject
        shutil.copy(work / "own" / "answers.json", results / "own-answers.json")
    if notes is not None:
        (results / "notes.md").write_text(notes, encoding="utf-8")


def collect_seeds(work: Path, seeds_dir: Path) -> None:
    """Copy a multi-seed work directory's result files into `seeds_dir` (replaced): pooled.json and, per seed, what
    `collect` copies of a single run."""
    pooled = json.loads((work / "pooled.json").read_text(encoding="utf-8"))
    shutil.rmtree(seeds_dir, ignore_errors=True)
    seeds_dir.mkdir(parents=True)
    shutil.copy(work / "pooled.json", seeds_dir / "pooled.json")
    for seed in pooled["seeds"]:
        collect(work / f"seed-{seed}", seeds_dir / f"seed-{seed}")


def as_good(arm: dict, ref: dict) -> bool:
    """The measure: at least as many held-out rows right and in format as the reference."""
    return arm["exact"] >= ref["exact"] and arm["format_ok"] >= ref["format_ok"]


def _p(arm: dict) -> str:
    return (
        f"{arm['mcnemar_p']:.4g} ({arm['gained']} gained, {arm['lost']} lost)" if "mcnemar_p" in arm else "—"
    )


def headline(summary: dict) -> list[str]:
    lines = [
        f"| arm | trains on | steps | held-out exact | format `answer: N` | exact McNemar p vs `{REFERENCE_ARM}` | train s |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for arm in [summary["baseline"], *summary["arms"]]:
        what = ARMS[arm["arm"]][2] if arm["arm"] in ARMS else "nothing (the base model)"
        n = arm["n"]
        lines.append(
            f"| {arm['arm']} | {what} | {arm.get('steps', 0)} | {arm['exact']}/{n} | {arm['format_ok']}/{n} | "
            f"{_p(arm)} | {arm.get('train_seconds', '—')} |"
        )
    return lines


def measure(summary: dict) -> list[str]:
    """Issue 19's measure, decided from the numbers: DPO or KTO at least as good as SFT on held-out format and exact
    match, with half the good rows; against SFT on every good answer and against SFT on the same half."""
    arms = {a["arm"]: a for a in summary["arms"]}
    if REFERENCE_ARM not in arms:
        return ["The measure needs the `sft-full` arm; it was not run."]
    lines = []
    for ref_name, key in ((REFERENCE_ARM, None), (HALF_ARM, "vs_half")):
        if ref_name not in arms:
            continue
        ref = arms[ref_name]
        lines += [f"Against `{ref_name}` ({ARMS[ref_name][2]}):", ""]
        for name, a in arms.items():
            if ARMS[name][0] != "sft":
                p = (a[key] if key else a)["mcnemar_p"]
                lines.append(
                    f"- `{name}`: exact {a['exact']} vs {ref['exact']}, format {a['format_ok']} vs "
                    f"{ref['format_ok']}: "
                    + ("**at least as good**" if as_good(a, ref) else "**worse**")
                    + f" (exact McNemar p {p:.4g})"
                )
        verdict = {
            kind: "met"
            if any(as_good(a, ref) for n, a in arms.items() if ARMS[n][0] in objectives)
            else "not met"
            for kind, objectives in (("alone", ("dpo", "kto")), ("staged", ("sft+dpo",)))
        }
        lines += [
            "",
            f"DPO or KTO at least as good as `{ref_name}` with half the good rows: by a `dpo`/`kto` arm "
            f"**{verdict['alone']}**; by an `sft+dpo` arm **{verdict['staged']}**.",
            "",
        ]
    return lines[:-1]


def outputs(results: Path, summary: dict) -> list[str]:
    names = [summary["baseline"]["arm"], *(a["arm"] for a in summary["arms"])]
    rows = {n: json.loads((results / "eval_results" / f"{n}.json").read_text())["rows"] for n in names}
    lines = ["| prompt | expected | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for i, first in enumerate(rows[names[0]][:SHOWN_ROWS]):
        cells = [" ".join(rows[n][i]["output"].split())[:60].replace("|", "\\|") for n in names]
        lines.append(f"| {first['prompt']} | {first['expected']} | " + " | ".join(cells) + " |")
    return lines


def losses(summary: dict) -> list[str]:
    lines = ["| arm | objective | learning rate | loss, first → last |", "|---|---|---:|---|"]
    for arm in summary["arms"]:
        first, last = arm["losses"][0], arm["losses"][-1]
        lines.append(f"| {arm['arm']} | {arm['objective']} | {arm['lr']} | {first:.4f} → {last:.4g} |")
    return lines


def replication(seeds_dir: Path) -> list[str]:
    """The multi-seed run: each arm's exact match over every seed's held-out rows, the exact McNemar p on those
    paired rows against sft-full and sft-half, and the measure decided on them."""
    pooled = json.loads((seeds_dir / "pooled.json").read_text(encoding="utf-8"))
    seeds = pooled["seeds"]
    per_seed = json.loads((seeds_dir / f"seed-{seeds[0]}" / "corpus-manifest.json").read_text())["counts"]
    refs = [r for r in (REFERENCE_ARM, HALF_ARM) if any(a["arm"] == r for a in pooled["arms"])]
    lines = [
        f"`python run_example.py --seeds {','.join(map(str, seeds))} --steps {pooled['steps']}"
        + (f" --corpus '{pooled['corpus_args']}'" if pooled["corpus_args"] else "")
        + f" --arms {','.join(a['arm'] for a in pooled['arms'][1:])}`: {len(seeds)} corpora (each seed draws its"
        f" own {per_seed['good']} good rows, {per_seed['rewrites']} rewrites, {per_seed['bad']} more bad answers"
        f" and {per_seed['eval']} held-out rows), every arm trained and evaluated on each; the McNemar p pairs"
        " the same held-out row of the same seed.",
        "",
        "| arm | trains on | exact, all seeds | exact per seed | format | "
        + " | ".join(f"McNemar p vs `{r}`" for r in refs)
        + " |",
        "|---|---|---:|---|---:|" + "---|" * len(refs),
    ]
    for arm in pooled["arms"]:
        what = ARMS[arm["arm"]][2] if arm["arm"] in ARMS else "nothing (the base model)"
        cells = [_p(arm[f"vs_{r}"]) if f"vs_{r}" in arm else "—" for r in refs]
        lines.append(
            f"| {arm['arm']} | {what} | {arm['exact']}/{arm['n']} | {' / '.join(map(str, arm['per_seed_exact']))}"
            f" | {arm['format_ok']}/{arm['n']} | " + " | ".join(cells) + " |"
        )
    arms = {a["arm"]: a for a in pooled["arms"]}
    preference = [n for n in arms if n in ARMS and ARMS[n][0] != "sft"]
    for ref in refs:
        met = [n for n in preference if as_good(arms[n], arms[ref])]
        exact = ", ".join(f"`{n}` {arms[n]['exact']}" for n in preference)
        in_format = ", ".join(f"`{n}` {arms[n]['format_ok']}" for n in preference)
        lines += [
            "",
            f"DPO or KTO at least as good as `{ref}` on every seed's held-out rows together: "
            + (f"**met** by {', '.join(f'`{n}`' for n in met)}" if met else "**not met**")
            + f" (exact {exact} vs {arms[ref]['exact']}; format {in_format} vs {arms[ref]['format_ok']}).",
        ]
    return lines


def checksums(results: Path, seeds_dirs: Sequence[Path] = ()) -> list[str]:
    lines = ["| file | sha256 |", "|---|---|"]
    for root in [results, *seeds_dirs]:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            lines.append(f"| `{root.name}/{path.relative_to(root).as_posix()}` | `{digest}` |")
    return lines


def render(results: Path) -> str:
    """The page, from `results` and each multi-seed run of REPLICATIONS that exists beside it."""
    seeds_dirs = {
        results.parent / name: title
        for name, (_, title) in REPLICATIONS.items()
        if (results.parent / name / "pooled.json").exists()
    }
    summary = json.loads((results / "summary.json").read_text(encoding="utf-8"))
    corpus = json.loads((results / "corpus-manifest.json").read_text(encoding="utf-8"))
    counts = corpus["counts"]
    notes = (
        (results / "notes.md").read_text(encoding="utf-8").strip() if (results / "notes.md").exists() else ""
    )
    parts = [
        "# minimal-preference: recorded results",
        "",
        "Written by `write_results.py` from the result files in `results/` (their checksums close the page); the",
        f"run: `python run_example.py --steps {summary['steps']} --seed {summary['seed']}`"
        + (f" `--corpus '{summary['corpus_args']}'`" if summary["corpus_args"] else "")
        + f", on {summary['cpu_count']} CPU cores shared with other jobs (1-minute load average at the end:"
        f" {summary['load_average_at_end'][0]:.1f}).",
        "",
        f"Corpus (seed {corpus['seed']}): {counts['good']} good rows, {counts['rewrites']} chatty answers tagged bad"
        f" and rewritten, {counts['bad']} more chatty answers tagged bad, {counts['eval']} held-out rows.",
        "",
        "## Held-out results",
        "",
        *headline(summary),
        "",
        "## The issue's measure",
        "",
        *measure(summary),
        "",
        "## Training",
        "",
        *losses(summary),
        "",
        f"## The first {SHOWN_ROWS} held-out answers of each arm",
        "",
        *outputs(results, summary),
        "",
    ]
    for seeds_dir, title in seeds_dirs.items():
        parts += [f"## {title}", "", *replication(seeds_dir), ""]
    if notes:
        parts += ["## Reading the numbers", "", notes, ""]
    parts += ["## Checksums", "", *checksums(results, list(seeds_dirs)), ""]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--from", dest="work", type=Path, help="copy the result files out of this work directory first"
    )
    for name, (flag, title) in REPLICATIONS.items():
        p.add_argument(
            flag,
            dest=name,
            type=Path,
            metavar="DIR",
            help=f"copy a run_example.py --seeds run into {name}/ ({title})",
        )
    p.add_argument("--results", type=Path, default=HERE / "docs" / "results")
    p.add_argument("--out", type=Path, default=HERE / "docs" / "RESULTS.md")
    args = p.parse_args(argv)
    if args.work is not None:
        collect(args.work, args.results)
    for name in REPLICATIONS:
        if (work := getattr(args, name)) is not None:
            collect_seeds(work, args.results.parent / name)
    args.out.write_text(render(args.results), encoding="utf-8")
    print(f"wrote {args.out} from {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
