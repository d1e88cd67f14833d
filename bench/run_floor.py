"""The floor of `core.run_plan`, measured: rows x optimizer steps -> held-out format rate on the embedded model.

For 10 and 20 of the arithmetic rows of examples/minimal-sft (seed 0) a fresh local trainer (the defaults of
`machine train run`: LoRA r16, lr 5e-4 constant, batch 8, the schedule's seeded shuffle) trains, and after 2, 6 and
12 steps (a constant learning rate makes the first n steps of a longer run the same as an n-step run) greedy answers
to 8 held-out rows are checked for the taught `answer: N` form and exact value, and the 12 built-in bleed probes
for the form. Small on purpose (the machine is shared): one run per row count.

    python bench/run_floor.py            # prints the table
    python bench/run_floor.py --write    # and writes it into docs/BENCHMARKS.md (between its markers)
    python bench/run_floor.py --table-from results.json --write   # re-render saved measurements (no model)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_section import write_generated  # noqa: E402
from minimal_sft_rows import build_rows, messages  # noqa: E402

from machine_lsp.core import evals, run_plan  # noqa: E402
from machine_lsp.scaffold.config import TrainSection  # noqa: E402
from machine_lsp.scaffold.support import datum_size, lora_settings, schedule  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
ROW_COUNTS = (10, 20)
CHECK_STEPS = (2, 6, 12)
HELD_OUT = 8
FORMAT = re.compile(r"^answer: -?\d+$")


def sweep(engine: object) -> list[dict[str, object]]:
    from machine_lsp.engines import render

    train, held = build_rows()
    train_rows = [messages(r["messages"]) for r in train]
    prompts = [messages(r["messages"]) for r in held[:HELD_OUT]]
    expected = [r["expected"] for r in held[:HELD_OUT]]
    probes = [evals.probe_messages(q) for q in evals.probe_prompts()]
    results = []
    for n_rows in ROW_COUNTS:
        cfg = TrainSection(steps=max(CHECK_STEPS))
        trainer = engine.create_trainer(  # type: ignore[attr-defined]
            MODEL, lora_settings(cfg), Path(tempfile.mkdtemp(prefix="bench-floor-")) / "runs" / "floor"
        )
        datums = render.to_datums(train_rows[:n_rows], trainer.renderer)
        auto = datum_size(datums, TrainSection(epochs=1))
        plan = schedule(len(datums), cfg, datum_size(datums, cfg))
        sampler = trainer.sampler()
        started = time.perf_counter()
        for step, rows in enumerate(plan, start=1):
            trainer.forward_backward([datums[i] for i in rows])
            trainer.optim_step(cfg.resolved_lr())
            if step not in CHECK_STEPS:
                continue
            outs = sampler.sample(prompts, 8)
            bleed = sampler.sample(probes, 8)
            row = {
                "rows": n_rows,
                "steps": step,
                "format": sum(bool(FORMAT.match(o.strip())) for o in outs),
                "exact": sum(o.strip() == e for o, e in zip(outs, expected, strict=True)),
                "bleed": sum(o.strip().startswith("answer:") for o in bleed),
                "seconds": time.perf_counter() - started,
                "trained_tokens_per_epoch": auto.trained_tokens // max(auto.epochs, 1),
            }
            print(row, flush=True)
            results.append(row)
    return results


def table(results: list[dict[str, object]]) -> str:
    lines = [
        f"Held-out format rate ({HELD_OUT} rows, `answer: N`), exact answers, and bleed (12 built-in probes) after n "
        "steps; `auto` is the step count `machine train run` now chooses for that many rows "
        f"(floors: {run_plan.MIN_STEPS} steps, {run_plan.MIN_TRAINED_TOKENS} trained tokens).",
        "",
        "| rows | steps | format | exact | bleed | wall s (train + checks) | auto steps |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        auto = run_plan.size_run(
            int(r["rows"]), 8, trained_tokens_per_epoch=int(r["trained_tokens_per_epoch"])
        )  # type: ignore[call-overload]
        r["auto_steps"] = auto.steps
        lines.append(
            f"| {r['rows']} | {r['steps']} | {r['format']}/{HELD_OUT} | {r['exact']}/{HELD_OUT} | {r['bleed']}/12 "
            f"| {r['seconds']:.0f} | {r['auto_steps']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    parser.add_argument("--table-from", metavar="JSON", help="render saved measurements instead of training")
    parser.add_argument("--save", metavar="JSON", help="save the measurements")
    args = parser.parse_args()
    if args.table_from:
        results = json.loads(Path(args.table_from).read_text())
    else:
        from machine_lsp.engines.base import get_engine

        results = sweep(get_engine("local", threads=1))
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=1))
    text = table(results)
    print(text)
    if args.write:
        write_generated("run_floor", text, heading="## How long a run must be (bench/run_floor.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
