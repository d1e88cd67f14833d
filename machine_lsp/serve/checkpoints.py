"""What `machine serve X` / `machine use X` name: `base`, `latest`, `promoted`, `local://RUN/NAME`, a checkpoint directory,
or `tinker://…` (served by Tinker itself). Pure path logic: no torch, no network."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from machine_lsp.core import runs
from machine_lsp.engines import smollm2
from machine_lsp.engines.base import (
    CHECKPOINT_MANIFEST,
    LOCAL_SCHEME,
    TINKER_SCHEME,
    EngineError,
    resolve_local_checkpoint,
)

BASE = "base"
PROMOTED = "promoted"  # the checkpoint the eval gate (or `machine train promote`) promoted; base when none


class CheckpointError(Exception):
    """The checkpoint named cannot be served; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    """A resolved checkpoint: `address` is what rows and configs record; `directory` is None for base/tinker."""

    address: str
    kind: str  # "base" | "local" | "tinker"
    directory: Path | None = None
    base_model: str = smollm2.MODEL_NAME


def resolve(name: str, machine_dir: Path) -> Target:
    """`name` -> Target; CheckpointError with a one-line reason when it does not exist."""
    name = name.strip()
    if name == PROMOTED:
        from machine_lsp.core.promotions import PromotionError, read_log

        try:
            name = read_log(machine_dir).current() or BASE
        except PromotionError as exc:
            raise CheckpointError(str(exc)) from None
    if name == BASE:
        return Target(address=BASE, kind="base")
    if name.startswith(TINKER_SCHEME):
        if "/sampler_weights/" not in name:
            raise CheckpointError(
                f"{name}: Tinker serves sampler checkpoints (tinker://RUN/sampler_weights/NAME), not training state"
            )
        return Target(address=name, kind="tinker")
    address = name
    if name == runs.LATEST:
        try:
            address = runs.latest_checkpoint(machine_dir / "runs")
        except LookupError as exc:
            raise CheckpointError(str(exc)) from None
        if address.startswith(TINKER_SCHEME):
            return Target(address=address, kind="tinker")
    return _local(name, address, machine_dir)


def _local(name: str, address: str, machine_dir: Path) -> Target:
    """`address` (what `name` means: local://RUN/NAME or a directory) as a local checkpoint Target."""
    if not address.startswith(LOCAL_SCHEME) and "://" in address:
        raise CheckpointError(
            f"unknown checkpoint {name!r}: use base, latest, local://RUN/NAME, tinker://RUN/sampler_weights/NAME "
            "or a checkpoint directory"
        )
    if not address.startswith(LOCAL_SCHEME) and not Path(address).expanduser().is_dir():
        raise CheckpointError(
            f"unknown checkpoint {name!r}: not base, latest, a local:// or tinker:// address, or a directory"
        )
    try:
        directory = resolve_local_checkpoint(address, machine_dir)
    except EngineError as exc:
        raise CheckpointError(str(exc)) from None
    try:
        manifest = json.loads((directory / CHECKPOINT_MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"unreadable checkpoint manifest in {directory}: {exc}") from None
    base_model = str(manifest.get("base_model") or smollm2.MODEL_NAME)
    if manifest.get("engine", "local") != "local":
        raise CheckpointError(f"{address} was not trained by the local engine")
    return Target(
        address=str(manifest.get("address") or address),
        kind="local",
        directory=directory,
        base_model=base_model,
    )


def servable(name: str, machine_dir: Path) -> Target:
    """The checkpoint `machine serve` (CLI or editor) can load here; CheckpointError says why not. A `tinker://`
    checkpoint is served by Tinker's own endpoints, not by a local server."""
    target = resolve(name, machine_dir)
    if target.kind == "tinker":
        raise CheckpointError(
            f"{target.address} is served by Tinker itself; point an agent at it with "
            f"`machine use {target.address} --agent pi|codex|claude|opencode` (no local server needed)"
        )
    return target
