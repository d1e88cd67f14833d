"""Local engine training benchmark: trained-token throughput vs TRL's SFTTrainer, and time to learn a format.

Part 1 (throughput): the 48 arithmetic rows of examples/minimal-sft (seed 0), rendered once by the cookbook
`qwen3_instruct` renderer. The local engine trains on those Datums; TRL's `SFTTrainer` gets the *same tokens*
(pre-tokenized `input_ids` + `completion_mask` = the Datum's trained positions), so both compute the same loss
positions on the same sequences. Same model (the converted SmolLM2-135M-Instruct, float32), same LoRA (r16,
alpha 32, all-linear), same optimizer settings (AdamW, betas 0.9/0.95, constant lr 5e-4, no clipping), batch 8,
same torch thread count, no gradient checkpointing, no bf16 (TRL's CPU defaults). The two alternate round by
round in one process; the first round is warm-up and not counted. Both trainers are built fresh each round and
timed in the same two phases: set-up (model load, LoRA, optimizer; TRL also its dataset) and one epoch.

Part 2 (time to learn): a fresh local trainer on the same 48 rows; after each step from `--check-from` on, greedy
answers to the 24 held-out rows are checked for the `answer: N` form (and exact value). Training wall time
(forward_backward + optim_step only) until 24/24 rows are in form.

Part 3 (threads): local step time with 1 vs 2 torch threads, alternated.

Run: .venv/bin/python bench/train_throughput.py [--rounds 3] [--skip-trl] [--skip-learn] [--skip-threads]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TINKER_TELEMETRY", "0")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from minimal_sft_rows import build_rows, messages  # noqa: E402  (bench/ is the script's own folder)

from machine_lsp.core.schema import Message  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
FORMAT = re.compile(r"^answer: -?\d+$")
BATCH = 8
LR = 5e-4


def load_rows() -> tuple[list[list[Message]], list[tuple[list[Message], str]]]:
    """(48 training conversations, 24 held-out (prompt, expected)) from examples/minimal-sft/make_corpus.py."""
    train, held = build_rows()
    return [messages(r["messages"]) for r in train], [(messages(r["messages"]), r["expected"]) for r in held]


def batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


# ---------------------------------------------------------------------------------------------------- part 1


def make_trl(model_dir: Path, datums: list[Any], out_dir: Path, steps: int) -> Any:
    import datasets
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    from machine_lsp.engines import render

    rows = []
    for datum in datums:
        inputs, targets, weights = render.datum_tokens(datum)
        input_ids = [*inputs, targets[-1]]
        # completion_mask marks tokens that are predicted with loss: position i+1 for each weighted target i
        mask = [0] + [1 if w > 0 else 0 for w in weights]
        rows.append({"input_ids": input_ids, "completion_mask": mask})
    dataset = datasets.Dataset.from_list(rows)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    config = SFTConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=BATCH,
        max_steps=steps,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_epsilon=1e-12,
        weight_decay=0.0,
        max_grad_norm=0.0,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        max_length=None,
        completion_only_loss=True,
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    peft_config = LoraConfig(
        r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=render.load_tokenizer(MODEL),
        peft_config=peft_config,
    )
    return trainer


def part_throughput(engine: Any, model_dir: Path, rounds: int, skip_trl: bool) -> dict[str, Any]:
    """Each round, for each trainer: set-up (a fresh trainer: model load + LoRA + optimizer; TRL also builds its
    dataset) and one epoch, timed separately. A user's run builds its trainer once, so set-up is reported apart."""
    import torch

    from machine_lsp.engines import render
    from machine_lsp.engines.base import LoraSettings

    train_rows, _ = load_rows()
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    renderer = render.load_tokenizer_and_renderer(MODEL)[1]
    datums = render.to_datums(train_rows, renderer)
    counts = render.count_tokens(datums)
    steps_per_epoch = len(batches(datums, BATCH))
    timings = Timings()
    local_padding: list[float] = []
    print(
        f"threads={torch.get_num_threads()}  rows={len(datums)}  batch={BATCH}  steps/epoch={steps_per_epoch}"
    )
    print(f"tokens/epoch: {counts.tokens} input, {counts.trained} trained")
    print("(wall = elapsed; cpu = this process's CPU time, steadier while other processes share the cores)")
    for round_no in range(rounds + 1):
        counted = round_no > 0  # round 0 warms caches up and is not counted
        with timings.phase("local", "setup", counted):
            local = engine.create_trainer(MODEL, LoraSettings(), work / "runs" / f"bench-local-{round_no}")
        with timings.phase("local", "epoch", counted):
            for batch in batches(datums, BATCH):
                stats = local.forward_backward(batch)
                local.optim_step(LR)
                local_padding.append(stats.padded_tokens / stats.tokens - 1)
        del local
        line = f"round {round_no}{' (warm-up)' if not counted else ''}: {timings.last('local')}"
        if not skip_trl:
            with timings.phase("trl", "setup", counted):
                trl = make_trl(model_dir, datums, work / f"trl-{round_no}", steps_per_epoch)
            with timings.phase("trl", "epoch", counted):
                trl.train()
            del trl
            line += f"   {timings.last('trl')}"
        print(line, flush=True)
    result = timings.report(counts)
    result["threads"] = torch.get_num_threads()
    print(f"local padding overhead (worst batch): {100 * max(local_padding):.1f}%")
    return result


class Timings:
    """Wall and CPU seconds per (trainer, phase), the counted rounds only."""

    NAMES = {"local": "local (machine-lsp)", "trl": "TRL SFTTrainer (fp32, same tokens)"}

    def __init__(self) -> None:
        self.wall: dict[tuple[str, str], list[float]] = {}
        self.cpu: dict[tuple[str, str], list[float]] = {}
        self.latest: dict[tuple[str, str], tuple[float, float]] = {}

    @contextlib.contextmanager
    def phase(self, trainer: str, phase: str, counted: bool) -> Iterator[None]:
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        yield
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        self.latest[trainer, phase] = (wall, cpu)
        if counted:
            self.wall.setdefault((trainer, phase), []).append(wall)
            self.cpu.setdefault((trainer, phase), []).append(cpu)

    def last(self, trainer: str) -> str:
        (sw, sc), (ew, ec) = self.latest[trainer, "setup"], self.latest[trainer, "epoch"]
        return f"{trainer}: set-up {sw:5.2f}s ({sc:5.2f}s cpu), epoch {ew:6.2f}s ({ec:6.2f}s cpu)"

    def median(self, trainer: str, phase: str) -> tuple[float, float]:
        return statistics.median(self.wall[trainer, phase]), statistics.median(self.cpu[trainer, phase])

    def report(self, counts: Any) -> dict[str, Any]:
        print()
        print(
            "| trainer | set-up wall s | set-up CPU s | s/epoch wall (median) | s/epoch CPU (median) "
            "| trained tok/s (CPU) | input tok/s (CPU) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        result: dict[str, Any] = {"counts": counts}
        for key in ("local", "trl"):
            if (key, "epoch") not in self.wall:
                continue
            (sw, sc), (ew, ec) = self.median(key, "setup"), self.median(key, "epoch")
            result[key] = {"setup_wall": sw, "setup_cpu": sc, "wall": ew, "cpu": ec}
            print(
                f"| {self.NAMES[key]} | {sw:.2f} | {sc:.2f} | {ew:.2f} | {ec:.2f} "
                f"| {counts.trained / ec:.1f} | {counts.tokens / ec:.1f} |"
            )
        if "trl" in result:
            local, trl = result["local"], result["trl"]
            result["ratio_cpu"], result["ratio_wall"] = trl["cpu"] / local["cpu"], trl["wall"] / local["wall"]
            per_round = [
                t / lc for t, lc in zip(self.cpu["trl", "epoch"], self.cpu["local", "epoch"], strict=True)
            ]
            print(
                f"\nlocal / TRL trained-token throughput per epoch: {result['ratio_cpu']:.2f}x by CPU time, "
                f"{result['ratio_wall']:.2f}x by wall time (per round, CPU: {', '.join(f'{r:.2f}' for r in per_round)})"
            )
            first = (trl["setup_cpu"] + trl["cpu"]) / (local["setup_cpu"] + local["cpu"])
            print(f"set-up + one epoch (a one-epoch run), by CPU time: local {first:.2f}x TRL")
        return result


# ---------------------------------------------------------------------------------------------------- part 2


def part_learn(engine: Any, max_steps: int, check_from: int) -> dict[str, Any]:
    from machine_lsp.engines import render
    from machine_lsp.engines.base import LoraSettings

    train_rows, held = load_rows()
    work = Path(tempfile.mkdtemp(prefix="bench-learn-"))
    trainer = engine.create_trainer(MODEL, LoraSettings(), work / "runs" / "bench-learn")
    datums = render.to_datums(train_rows, trainer.renderer)
    epoch = batches(datums, BATCH)
    sampler = trainer.sampler()
    prompts = [p for p, _ in held]
    expected = [e for _, e in held]
    t = time.perf_counter()
    base = sampler.sample(prompts, 8)
    base_eval = time.perf_counter() - t
    base_fmt = sum(bool(FORMAT.match(o)) for o in base)
    print(
        f"\nbaseline: format {base_fmt}/24, exact {sum(o == e for o, e in zip(base, expected, strict=True))}/24"
    )
    train_s = train_cpu = 0.0
    reached: dict[str, Any] | None = None
    history = []
    for step in range(1, max_steps + 1):
        t, c = time.perf_counter(), time.process_time()
        trainer.forward_backward(epoch[(step - 1) % len(epoch)])
        trainer.optim_step(LR)
        train_s += time.perf_counter() - t
        train_cpu += time.process_time() - c
        if step < check_from:
            continue
        t = time.perf_counter()
        outs = sampler.sample(prompts, 8)
        eval_s = time.perf_counter() - t
        fmt = sum(bool(FORMAT.match(o)) for o in outs)
        exact = sum(o == e for o, e in zip(outs, expected, strict=True))
        history.append((step, train_s, fmt, exact, eval_s))
        print(
            f"step {step:2d}: train {train_s:5.1f}s  format {fmt}/24  exact {exact}/24  (eval {eval_s:.1f}s)"
        )
        if fmt == len(held) and reached is None:
            reached = {
                "step": step,
                "train_s": train_s,
                "train_cpu": train_cpu,
                "exact": exact,
                "eval_s": eval_s,
            }
            break
    if reached:
        print(
            f"\n24/24 in `answer: N` form after {reached['step']} steps, {reached['train_s']:.1f}s of training "
            f"({reached['train_cpu']:.1f}s CPU) "
            f"(exact {reached['exact']}/24; batched eval of 24 rows {reached['eval_s']:.1f}s)"
        )
    else:
        print(f"\nnot 24/24 in form within {max_steps} steps")
    return {"base_format": base_fmt, "base_eval_s": base_eval, "reached": reached, "history": history}


# ---------------------------------------------------------------------------------------------------- part 3


def part_threads(engine: Any, rounds: int) -> dict[str, Any]:
    import torch

    from machine_lsp.engines import render
    from machine_lsp.engines.base import LoraSettings

    train_rows, _ = load_rows()
    work = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    trainer = engine.create_trainer(MODEL, LoraSettings(), work / "runs" / "bench-threads")
    epoch = batches(render.to_datums(train_rows, trainer.renderer), BATCH)
    timings: dict[int, list[float]] = {1: [], 2: []}
    before = torch.get_num_threads()
    for round_no in range(rounds + 1):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for batch in epoch[:3]:
                t = time.perf_counter()
                trainer.forward_backward(batch)
                trainer.optim_step(LR)
                if round_no:
                    timings[threads].append(time.perf_counter() - t)
    torch.set_num_threads(before)
    print("\n| torch threads | median s/step |")
    print("|---|---|")
    for threads, times in timings.items():
        print(f"| {threads} | {statistics.median(times):.2f} |")
    return {t: statistics.median(v) for t, v in timings.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=3, help="timed epochs per engine after one warm-up (default 3)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads for parts 1 and 2 (default 1)")
    parser.add_argument("--skip-trl", action="store_true", help="time only the local engine in part 1")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-learn", action="store_true")
    parser.add_argument("--skip-threads", action="store_true")
    parser.add_argument("--max-steps", type=int, default=18, help="part 2: give up after this many steps")
    parser.add_argument("--check-from", type=int, default=4, help="part 2: first step to evaluate after")
    args = parser.parse_args(argv)

    from machine_lsp.engines import smollm2
    from machine_lsp.engines.local.local import LocalEngine

    model_dir = smollm2.ensure_model()
    engine = LocalEngine(threads=args.threads)
    print(f"machine load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if not args.skip_throughput:
        part_throughput(engine, model_dir, args.rounds, args.skip_trl)
    if not args.skip_learn:
        part_learn(engine, args.max_steps, args.check_from)
    if not args.skip_threads:
        part_threads(engine, max(1, args.rounds - 1))
    print(f"machine load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
