"""Preference training benchmark: the local engine's DPO and KTO steps vs TRL's DPOTrainer and KTOTrainer.

Same rows (arithmetic prompts; chosen `answer: N`, rejected a chatty sentence; KTO: the same answers labelled good
and bad), the same tokens (each side rendered by the cookbook renderer, decoded to text for TRL, which tokenizes it
back), the same model (the converted SmolLM2-135M-Instruct, float32, CPU), the same LoRA (r16, alpha 32,
all-linear, no dropout), AdamW (0.9, 0.95), constant lr, beta 0.1, batch size, torch thread count. Both use the base
model with the adapter disabled as the reference. Timed: the training steps only (trainer set-up outside the timing
for both: model load, LoRA, optimizer; TRL also its dataset tokenization). Step-1 loss: with LoRA's zero-initialised
B the policy equals the reference, so DPO's first loss is log 2 and KTO's is 0.5 in both.

What makes the local steps faster with the same math (engines/local/local_packing.py, local_objectives.py): each
micro-batch is one padding-free sequence with every shared prompt once (a pair's chosen and rejected, a KTO
example and its KL datum), completions behind a block attention mask; KTO's KL datums a no-grad tail reading the
prompt's cached keys and values; the output head and log-softmax only at trained positions; a row's reference
log-probs kept for the run (here the third step's rows are the first step's: its reference pass is skipped).

Run small: .venv/bin/python bench/preference.py [--pairs 8] [--batch 4] [--steps 3] [--rounds 3] [--write-doc]
Each round runs every trainer afresh (set-up, then the timed steps); the table shows each trainer's median s/step
over the rounds and the losses of the first round (every round's are the same: the runs are deterministic).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TINKER_TELEMETRY", "0")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine_lsp.core.schema import Message  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
LR = 5e-4
BETA = 0.1


def rows(n: int) -> list[tuple[str, str, str]]:
    """(question, chosen, rejected) arithmetic rows."""
    out = []
    for i in range(n):
        a, b = 3 + 7 * i, 11 + 5 * i
        out.append(
            (f"What is {a} plus {b}?", f"answer: {a + b}", f"Sure! {a} plus {b} makes {a + b}, I think.")
        )
    return out


def conversation(question: str, answer: str) -> list[Message]:
    return [Message(role="user", content=question), Message(role="assistant", content=answer)]


def datum(renderer: Any, question: str, answer: str) -> Any:
    from machine_lsp.engines import render

    messages = conversation(question, answer)
    return render.to_datum(messages, renderer, train_on="last_assistant_message", reduction="none")


def texts(tokenizer: Any, d: Any) -> tuple[str, str]:
    """(prompt text, completion text) of a datum: the tokens before the first trained one, and the rest."""
    from machine_lsp.engines import render

    inputs, targets, weights = render.datum_tokens(d)
    tokens = [*inputs, targets[-1]]
    first = next(i for i, w in enumerate(weights) if w > 0) + 1
    return tokenizer.decode(tokens[:first]), tokenizer.decode(tokens[first:])


def local_run(
    engine: Any, objective: str, data: list[tuple[str, str, str]], batch: int, steps: int
) -> dict[str, Any]:
    from machine_lsp.engines.base import LoraSettings
    from machine_lsp.engines.objectives import Objective

    with tempfile.TemporaryDirectory() as tmp:
        trainer = engine.create_trainer(MODEL, LoraSettings(learning_rate=LR), Path(tmp) / "bench")
        r = trainer.renderer
        losses, seconds = [], 0.0
        for step in range(steps):
            chunk = [data[(step * batch + j) % len(data)] for j in range(batch)]
            if objective == "dpo":
                datums = [datum(r, q, ans) for q, c, rej in chunk for ans in (c, rej)]
                goal = Objective(name="dpo", beta=BETA)
            else:
                examples = [(q, c if j % 2 == 0 else rej, j % 2 == 0) for j, (q, c, rej) in enumerate(chunk)]
                datums = [datum(r, q, ans) for q, ans, _ in examples]
                datums += [datum(r, q, examples[j - 1][1]) for j, (q, _, _) in enumerate(examples)]
                goal = Objective(name="kto", beta=BETA).for_batch([good for _, _, good in examples])
            started = time.perf_counter()
            losses.append(trainer.submit_step(datums, LR, goal).result().loss)
            seconds += time.perf_counter() - started
    return {"losses": losses, "seconds": seconds}


def trl_records(objective: str, data: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """The rows as TRL's text datasets: our rendered prompt and completion, decoded (TRL tokenizes them back)."""
    from machine_lsp.engines import render

    tokenizer, renderer = render.load_tokenizer_and_renderer(MODEL)
    records = []
    for j, (q, c, rej) in enumerate(data):
        if objective == "dpo":
            prompt, chosen = texts(tokenizer, datum(renderer, q, c))
            records.append(
                {"prompt": prompt, "chosen": chosen, "rejected": texts(tokenizer, datum(renderer, q, rej))[1]}
            )
        else:
            prompt, completion = texts(tokenizer, datum(renderer, q, c if j % 2 == 0 else rej))
            records.append({"prompt": prompt, "completion": completion, "label": j % 2 == 0})
    return records


def trl_trainer(
    model_dir: Path, objective: str, records: list[dict[str, Any]], batch: int, steps: int, out: str
) -> Any:
    import datasets
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer

    from machine_lsp.engines import render

    common = dict(
        output_dir=out,
        per_device_train_batch_size=batch,
        max_steps=steps,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_epsilon=1e-8,
        weight_decay=0.0,
        max_grad_norm=0.0,
        bf16=False,
        fp16=False,
        use_cpu=True,
        save_strategy="no",
        logging_strategy="steps",
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
        beta=BETA,
        max_length=None,
        dataset_num_proc=None,
    )
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    peft = LoraConfig(
        r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"
    )
    dataset = datasets.Dataset.from_list(records)
    tokenizer = render.load_tokenizer(MODEL)
    if objective == "dpo":
        return DPOTrainer(
            model=model,
            args=DPOConfig(**common),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft,
        )
    args = KTOConfig(desirable_weight=1.0, undesirable_weight=1.0, **common)
    return KTOTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=tokenizer, peft_config=peft
    )


def trl_run(
    model_dir: Path, objective: str, data: list[tuple[str, str, str]], batch: int, steps: int
) -> dict[str, Any]:
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        """Times the training steps only (TRL's own set-up and dataset tokenization are outside)."""

        seconds = 0.0

        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            Steps.seconds += time.perf_counter() - self.started

    with tempfile.TemporaryDirectory() as tmp:
        trainer = trl_trainer(model_dir, objective, trl_records(objective, data), batch, steps, tmp)
        trainer.add_callback(Steps())
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"losses": losses, "seconds": Steps.seconds}


def per_step(result: dict[str, Any]) -> float:
    """The median over the rounds of a run's seconds per step."""
    return statistics.median(result["per_step"])


def table(results: dict[str, dict[str, Any]], pairs: int, batch: int, steps: int, threads: int) -> str:
    rounds = len(next(iter(results.values()))["per_step"])
    lines = [
        f"{pairs} rows, batch {batch}, {steps} steps, median of {rounds} round(s), {threads} torch thread(s), "
        "SmolLM2-135M fp32 CPU, "
        f"LoRA r16 all-linear, beta {BETA}, lr {LR}; steps timed, set-up not.",
        "",
        "| objective | trainer | step-1 loss | last loss | s/step | speed vs TRL |",
        "|---|---|---|---|---|---|",
    ]
    for objective in ("dpo", "kto"):
        ours, theirs = results.get(f"local-{objective}"), results.get(f"trl-{objective}")
        for name, r in (
            ("machine-lsp local", ours),
            ("TRL " + ("DPOTrainer" if objective == "dpo" else "KTOTrainer"), theirs),
        ):
            if r is None:
                continue
            ratio = f"{per_step(theirs) / per_step(r):.2f}x" if r is ours and theirs else ""
            lines.append(
                f"| {objective} | {name} | {r['losses'][0]:.6f} | {r['losses'][-1]:.6f} | {per_step(r):.2f} "
                f"| {ratio} |"
            )
    lines.append("")
    lines.append(f"Expected step-1 losses: dpo log 2 = {math.log(2):.6f}, kto 0.5.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=1, help="run every trainer this many times; median s/step"
    )
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--write-doc", action="store_true", help="write the table into docs/BENCHMARKS.md")
    args = parser.parse_args()
    import torch

    from machine_lsp.engines import smollm2
    from machine_lsp.engines.local.local import LocalEngine

    model_dir = smollm2.ensure_model()
    data = rows(args.pairs)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / ".machine"
        (store / "runs").mkdir(parents=True)
        engine = LocalEngine(store_root=store)
        threads = torch.get_num_threads()
        results: dict[str, dict[str, Any]] = {}
        runs = {"local": lambda o: local_run(engine, o, data, args.batch, args.steps)}
        if not args.skip_trl:
            runs["trl"] = lambda o: trl_run(model_dir, o, data, args.batch, args.steps)
        for _ in range(max(args.rounds, 1)):  # rounds interleave the trainers: a load change hits them alike
            for objective in ("dpo", "kto"):
                for trainer, run in runs.items():
                    r = run(objective)
                    print(objective, trainer, r, flush=True)
                    kept = results.setdefault(
                        f"{trainer}-{objective}", {"losses": r["losses"], "per_step": []}
                    )
                    kept["per_step"].append(r["seconds"] / max(len(r["losses"]), 1))
    text = table(results, args.pairs, args.batch, args.steps, threads)
    print(text)
    if args.write_doc:
        from doc_section import write_generated

        write_generated("preference", text, heading="## Preference training (DPO, KTO) vs TRL")


if __name__ == "__main__":
    main()
