"""Shared job plumbing: the project config with overrides, engine construction (with the Tinker preflight)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.engines.registry import EngineName
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.scaffold.config import (
    ConfigError,
    MachineConfig,
    apply_overrides,
    load_project_config,
)


class EngineArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What every job that runs an engine is told: the config file, and the engine, model and threads that override
    it (each job's arguments extend these)."""

    config: str | None = None
    engine: EngineName | None = None
    model: str | None = None
    threads: int | None = None


def project_config(
    ctx: JobContext, config: str | None, train: dict[str, Any], evals: dict[str, Any] | None = None
) -> MachineConfig:
    try:
        base, path = load_project_config(ctx.cwd, config)
        cfg = apply_overrides(base, train, evals)
    except ConfigError as exc:
        raise JobError(str(exc)) from None
    ctx.log(f"config: {path if path else 'defaults (no machine.toml)'}; engine {cfg.train.engine}")
    return cfg


def tinker_base_url(cwd: Path) -> str | None:
    """The Tinker server a job uses when TINKER_BASE_URL is unset: the one `machine tinker serve` recorded in
    machine.toml `[tinker] base_url`; None lets the engine take TINKER_BASE_URL, else hosted Tinker."""
    from machine_lsp.scaffold.config import configured_base_url

    return None if os.environ.get("TINKER_BASE_URL") else configured_base_url(cwd)


def make_engine(ctx: JobContext, engine: str, threads: int | None = None) -> Any:
    """The engine, ready to use: the local one with progress messages, Tinker after a bounded preflight."""
    from machine_lsp.engines.base import EngineError, get_engine

    try:
        if engine == "local":
            from machine_lsp.core.store import Store

            return get_engine(
                "local",
                threads=threads,
                store_root=Store.open(ctx.cwd).root,
                progress=lambda message: ctx.log(message),
            )
        if engine == "tinker":
            from machine_lsp.engines.tinker.tinker_engine import TinkerUnavailable

            eng = get_engine(
                "tinker", base_url=tinker_base_url(ctx.cwd), progress=lambda message: ctx.log(message)
            )
            ctx.log(
                f"checking the Tinker service at {eng.base_url} (bounded to {eng.preflight_timeout:.0f} s)"
            )
            try:
                result = eng.preflight()
            except TinkerUnavailable as exc:
                raise JobError(str(exc), kind="engine") from None
            ctx.log(f"Tinker is reachable ({result.seconds:.1f} s)")
            return eng
        return get_engine(engine)
    except EngineError as exc:
        raise JobError(str(exc), kind="engine") from None


def served_model(ctx: JobContext, engine: Any, model: str) -> str:
    """The model the engine really uses, recorded in the manifest: a self-hosted Tinker server trains and samples
    the model it serves in place of the hosted default (`TinkerEngine.resolve_model`)."""
    resolve = getattr(engine, "resolve_model", None)
    actual = str(resolve(model)) if resolve is not None else model
    if actual != model:
        ctx.log(f"model: {actual}, the one the server serves ({model} is not served there)")
    ctx.update(model=actual)
    return actual


def renderer_for(engine: Any, model: str) -> Any:
    from machine_lsp.engines import render

    if hasattr(engine, "renderer"):
        return engine.renderer(model)
    return render.load_tokenizer_and_renderer(model)[1]
