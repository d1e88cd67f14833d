"""The engine registry: every engine's name (its checkpoint address scheme too), default model and learning rate
and the class that builds it, in one table that the CLI, the language server, the jobs and machine.toml's config read.

A new engine is one module (or package) with a class satisfying `engines.base.Engine` and one `EngineSpec` line
below (and its name in `EngineName`, which msgspec and the CLI's `--engine` choices need as a type).

Light on purpose (standard library only): the language server reads it, so the engine modules are named here as
strings and imported only by :func:`build_engine`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

from machine_lsp.engines.errors import EngineError

EngineName = Literal["local", "tinker"]


@dataclass(frozen=True)
class EngineSpec:
    name: str  # also its checkpoint addresses' scheme: `local://...`, `tinker://...`
    factory: (
        str  # "module:Class", imported only when the engine is built: the light faces never pull in torch
    )
    default_model: str
    default_lr: float  # per step, for LoRA on the default model (tinker-cookbook's hyperparam_utils range)

    @property
    def scheme(self) -> str:
        """The prefix of this engine's checkpoint addresses."""
        return f"{self.name}://"


ENGINES: tuple[EngineSpec, ...] = (
    EngineSpec(
        name="local",
        factory="machine_lsp.engines.local.local:LocalEngine",
        default_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        default_lr=5e-4,
    ),
    EngineSpec(
        name="tinker",
        factory="machine_lsp.engines.tinker.tinker_engine:TinkerEngine",
        default_model="thinkingmachines/Inkling-Small",
        default_lr=2e-4,
    ),
)
ENGINE_NAMES: tuple[str, ...] = tuple(spec.name for spec in ENGINES)  # == get_args(EngineName), tested


def engine_spec(name: str) -> EngineSpec:
    """The registry line of engine `name`; EngineError naming the choices when there is none."""
    for spec in ENGINES:
        if spec.name == name:
            return spec
    raise EngineError(f"unknown engine {name!r}: choose one of {', '.join(ENGINE_NAMES)}")


def engine_for_address(address: str | None) -> str | None:
    """The engine whose checkpoint `address` is (`tinker://...` -> "tinker"); None for a path or no address."""
    if address:
        for spec in ENGINES:
            if address.startswith(spec.scheme):
                return spec.name
    return None


def build_engine(name: str, **options: Any) -> Any:
    """The engine called `name`, its module imported now. Options go to its constructor (`threads=1` for local)."""
    module, _, class_name = engine_spec(name).factory.partition(":")
    return getattr(importlib.import_module(module), class_name)(**options)
