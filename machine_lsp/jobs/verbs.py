"""The job verbs: name -> (module, function, argument struct), imported lazily so ``--list`` stays cheap."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VerbSpec:
    module: str
    function: str
    args: str
    help: str


VERBS: dict[str, VerbSpec] = {
    "validate": VerbSpec(
        "machine_lsp.jobs.validate_job", "validate", "ValidateArgs", "validate a chat JSONL file"
    ),
    "train-smoke": VerbSpec(
        "machine_lsp.jobs.train_jobs", "train_smoke", "TrainArgs", "2 real steps, then one sample"
    ),
    "train-run": VerbSpec(
        "machine_lsp.jobs.train_jobs",
        "train_run",
        "TrainArgs",
        "the configured run (sft, dpo or kto) with checkpoints",
    ),
    "retrain": VerbSpec(
        "machine_lsp.jobs.retrain_jobs",
        "retrain",
        "RetrainArgs",
        "train on the store (scoped), gate, promote; ends with a one-paragraph summary (`machine retrain`)",
    ),
    "eval-baseline": VerbSpec(
        "machine_lsp.jobs.eval_jobs", "eval_baseline", "EvalArgs", "evaluate the base model on held-out rows"
    ),
    "eval-checkpoint": VerbSpec(
        "machine_lsp.jobs.eval_jobs", "eval_checkpoint", "EvalArgs", "evaluate a checkpoint on held-out rows"
    ),
    "eval-pairs": VerbSpec(
        "machine_lsp.jobs.pair_eval_jobs",
        "eval_pairs",
        "EvalPairsArgs",
        "preference accuracy and reward margin of a checkpoint on held-out pairs",
    ),
    "eval-probe": VerbSpec(
        "machine_lsp.jobs.eval_jobs", "eval_probe", "EvalArgs", "style-bleed probe of a checkpoint"
    ),
    "serve": VerbSpec(
        "machine_lsp.jobs.serve_jobs",
        "serve",
        "ServeArgs",
        "serve a checkpoint to agents on 127.0.0.1 until cancelled (`machine serve`)",
    ),
    "tinker-serve": VerbSpec(
        "machine_lsp.jobs.serve_jobs",
        "tinker_serve",
        "TinkerServeArgs",
        "start the local Tinker server (SkyRL tx) and wait until it answers (`machine tinker serve`)",
    ),
    "use": VerbSpec(
        "machine_lsp.jobs.serve_jobs", "use", "UseArgs", "an agent's config for a checkpoint (`machine use`)"
    ),
    "tinker-status": VerbSpec(
        "machine_lsp.jobs.serve_jobs", "tinker_status", "TinkerArgs", "is the local Tinker server running"
    ),
    "tinker-stop": VerbSpec(
        "machine_lsp.jobs.serve_jobs", "tinker_stop", "TinkerArgs", "stop the local Tinker server"
    ),
}


def load_verb(name: str) -> tuple[Any, type[Any]]:
    spec = VERBS[name]
    module = importlib.import_module(spec.module)
    return getattr(module, spec.function), getattr(module, spec.args)
