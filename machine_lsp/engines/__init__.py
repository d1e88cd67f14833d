"""Training/sampling engines (local SmolLM2 via torch+peft, Tinker). Heavy imports stay lazy.

Importing this package (or `machine_lsp.engines.base`) loads no torch, transformers, tinker or peft.
"""

from machine_lsp.engines.base import (
    Engine,
    EngineError,
    LoraSettings,
    OptimizerSettings,
    PendingStep,
    Sampler,
    StepStats,
    Trainer,
    get_engine,
    local_address,
    parse_local_address,
    resolve_local_checkpoint,
)

__all__ = [
    "Engine",
    "EngineError",
    "LoraSettings",
    "OptimizerSettings",
    "PendingStep",
    "Sampler",
    "StepStats",
    "Trainer",
    "get_engine",
    "local_address",
    "parse_local_address",
    "resolve_local_checkpoint",
]
