"""The engine interface: one small training/sampling API, two implementations (local, tinker).

Both engines train on the same `tinker.Datum` objects, built by `machine_lsp.engines.render` with the
tinker-cookbook renderer of the model, so a row means the same tokens and loss weights everywhere.

This module is light on purpose: it imports only msgspec and the standard library, so the core, the CLI and the
job event code can import it without pulling in torch, transformers, tinker or peft. `get_engine` imports the
chosen engine module lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from machine_lsp.core import runs
from machine_lsp.engines.errors import EngineError
from machine_lsp.engines.registry import build_engine, engine_spec

if TYPE_CHECKING:  # pragma: no cover - typing only
    import tinker

    from machine_lsp.core.schema import Message
    from machine_lsp.engines.objectives import Objective

LOCAL_SCHEME = engine_spec("local").scheme
TINKER_SCHEME = engine_spec("tinker").scheme
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_MANIFEST = "manifest.json"


class OptimizerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Adam settings both engines train with (machine.toml `[train]` adam_beta1, adam_beta2, adam_eps).

    The defaults are tinker-cookbook's (`supervised.train.Config`): betas (0.9, 0.95), eps 1e-8. No weight decay and
    no gradient clipping on either engine. The learning rate is per step (the schedule), so it is not here.
    """

    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8

    def __post_init__(self) -> None:
        for name, value in (("adam_beta1", self.beta1), ("adam_beta2", self.beta2)):
            if not 0.0 <= value < 1.0:
                raise EngineError(f"{name} must be in [0, 1), got {value}")
        if not self.eps > 0:
            raise EngineError(f"adam_eps must be positive, got {self.eps}")


class LoraSettings(msgspec.Struct, frozen=True, kw_only=True):
    """LoRA and optimizer settings shared by both engines (`optimizer`: the Adam settings, the same on both).

    `target_modules` is peft's "all-linear" (every linear layer but the output head) or a list of module names
    such as `["q_proj", "v_proj"]`; the Tinker engine only uses `rank` (Tinker trains all layers).
    """

    rank: int = 16
    alpha: int = 32
    target_modules: str | list[str] = "all-linear"
    learning_rate: float = 5e-4
    dropout: float = 0.0
    optimizer: OptimizerSettings = msgspec.field(default_factory=OptimizerSettings)

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise EngineError(f"LoRA rank must be a positive integer, got {self.rank}")
        if self.alpha <= 0:
            raise EngineError(f"LoRA alpha must be positive, got {self.alpha}")
        if not self.learning_rate > 0:
            raise EngineError(f"learning rate must be positive, got {self.learning_rate}")
        if not 0.0 <= self.dropout < 1.0:
            raise EngineError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if isinstance(self.target_modules, list) and not self.target_modules:
            raise EngineError("LoRA target_modules is an empty list; use 'all-linear' or name the modules")


class StepStats(msgspec.Struct, kw_only=True):
    """What one forward_backward reports.

    loss: the objective's loss; for SFT the weighted mean negative log-likelihood, sum(w * nll) / sum(w).
    tokens: tokens fed to the model (sum of datum lengths, padding excluded).
    trained_tokens: target tokens with a non-zero loss weight.
    padded_tokens: tokens actually computed including padding (local engine; 0 when unknown).
    seconds: wall time of the call.
    metrics: the objective's own figures (DPO: accuracy, margin, rewards; KTO: kl, rewards); empty for SFT.
    """

    loss: float
    tokens: int
    trained_tokens: int = 0
    padded_tokens: int = 0
    seconds: float = 0.0
    metrics: dict[str, float] = msgspec.field(default_factory=dict)


@runtime_checkable
class PendingStep(Protocol):
    """One submitted training step (forward_backward, then optim_step): a future of its StepStats."""

    def done(self) -> bool:
        """True once the result is in (a local step is done when it is submitted)."""
        ...

    def result(self, timeout: float | None = None) -> StepStats:
        """Wait for the step (at most `timeout` seconds; None: the engine's own call bound) and return its stats."""
        ...


class DoneStep:
    """A `PendingStep` already computed: what an engine that trains in-process returns from `submit_step`."""

    def __init__(self, stats: StepStats) -> None:
        self.stats = stats

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> StepStats:
        return self.stats


@runtime_checkable
class Sampler(Protocol):
    def sample(self, prompts: Sequence[Sequence[Message]], max_tokens: int) -> list[str]:
        """Batched greedy completion of each prompt (a conversation ending before the assistant's turn)."""
        ...


@runtime_checkable
class Scorer(Protocol):
    def completion_logprobs(self, batch: Sequence[tinker.Datum]) -> list[tuple[float, float]]:
        """Per datum: (the policy's, the reference's) weighted sum of target log-probs (the reference: the base)."""
        ...


@runtime_checkable
class Trainer(Protocol):
    def forward_backward(
        self, batch: Sequence[tinker.Datum], objective: Objective | None = None
    ) -> StepStats: ...

    def optim_step(self, learning_rate: float) -> None: ...

    def submit_step(
        self, batch: Sequence[tinker.Datum], learning_rate: float, objective: Objective | None = None
    ) -> PendingStep:
        """forward_backward of `objective`'s loss on `batch` then optim_step at `learning_rate`, as a future.

        `objective` (machine_lsp.engines.objectives; None: SFT) is the loss: SFT's cross-entropy, or DPO / KTO on
        the batch's log-probs against the reference model's, in the layout the objective's spec names.

        Tinker submits both requests back to back and returns at once (the SDK runs a client's requests in the
        order they were submitted), so a caller can submit the next step before waiting on this one; the local
        engine computes the step and returns it done. Steps run in the order they are submitted, and so does a
        `save` called after them.
        """
        ...

    def save(self, name: str, *, ttl_seconds: int | None = None) -> str:
        """Save the current weights; returns the address (`local://<run-id>/<name>` or `tinker://...`).

        `ttl_seconds`: how long the service keeps the checkpoint (Tinker; None keeps it). Local checkpoints are
        files and ignore it."""
        ...

    def sampler(self) -> Sampler: ...

    def freeze_reference(self) -> None:
        """From now on the reference of log-prob objectives is the current weights (a staged run's next stage:
        sft+dpo's DPO stage is measured against the SFT stage's policy). Before any call it is the base model."""
        ...


@runtime_checkable
class Engine(Protocol):
    name: str

    def renderer_name(self, model: str) -> str: ...

    def tokenizer(self, model: str) -> Any: ...

    def create_trainer(
        self, model: str, lora: LoraSettings, run_dir: Path, *, resume_from: str | None = None
    ) -> Trainer:
        """A trainer writing checkpoints under `run_dir`; `resume_from` is a checkpoint address to continue."""
        ...

    def sampler_for(self, model: str, checkpoint: str | None) -> Sampler:
        """A sampler for the base model (`checkpoint=None`) or for a saved checkpoint address."""
        ...

    def scorer_for(self, model: str, checkpoint: str | None) -> Scorer:
        """Completion log-probs under a checkpoint (or the base) and under the base model."""
        ...


def get_engine(name: str, **options: Any) -> Engine:
    """The engine called `name` (a name in engines.registry), imported lazily.

    Options go to the engine's constructor (e.g. `threads=1` for local).
    """
    return build_engine(name, **options)


# ---------------------------------------------------------------------------------------------------------------
# Checkpoint names and local:// addresses (pure path logic, shared by the local engine and the job runner)


def check_name(name: str, what: str = "checkpoint name") -> str:
    """A run id or checkpoint name must be one safe path component: core.runs.check_name's rule (the one rule for
    every name that becomes a path), raised as an EngineError."""
    try:
        return runs.check_name(name, what)
    except ValueError as exc:
        raise EngineError(str(exc)) from None


def local_address(run_id: str, name: str) -> str:
    return f"{LOCAL_SCHEME}{check_name(run_id, 'run id')}/{check_name(name)}"


def parse_local_address(address: str) -> tuple[str, str]:
    """`local://<run-id>/<name>` -> (run_id, name)."""
    if not address.startswith(LOCAL_SCHEME):
        raise EngineError(f"not a local checkpoint address: {address!r} (expected local://<run-id>/<name>)")
    rest = address[len(LOCAL_SCHEME) :]
    parts = rest.split("/")
    if len(parts) != 2 or not all(parts):
        raise EngineError(f"malformed local checkpoint address {address!r}: expected local://<run-id>/<name>")
    return check_name(parts[0], "run id"), check_name(parts[1])


def checkpoint_dir(run_dir: Path, name: str) -> Path:
    return run_dir / CHECKPOINTS_DIR / check_name(name)


def resolve_local_checkpoint(address: str, store_root: Path | None = None) -> Path:
    """The directory of a local checkpoint.

    `address` is `local://<run-id>/<name>` (resolved under `<store_root>/runs/`; `store_root` is the `.machine`
    directory and defaults to the one `machine_lsp.core.store.find_machine_dir` finds from the current directory)
    or a filesystem path to a checkpoint directory. Raises EngineError naming what is missing.
    """
    if address.startswith(LOCAL_SCHEME):
        run_id, name = parse_local_address(address)
        if store_root is None:
            from machine_lsp.core.store import find_machine_dir

            store_root = find_machine_dir()
        run_dir = store_root / "runs" / run_id
        if not run_dir.is_dir():
            raise EngineError(f"checkpoint {address}: no run {run_id!r} under {store_root / 'runs'}")
        path = run_dir / CHECKPOINTS_DIR / name
        if not path.is_dir():
            have = sorted(p.name for p in (run_dir / CHECKPOINTS_DIR).glob("[!.]*") if p.is_dir())
            listing = ", ".join(have) if have else "none"
            raise EngineError(
                f"checkpoint {address}: run {run_id} has no checkpoint {name!r} (it has: {listing})"
            )
    elif address.startswith(TINKER_SCHEME):
        raise EngineError(f"{address} is a Tinker checkpoint; use --engine tinker to sample from it")
    elif "://" in address:
        raise EngineError(
            f"unknown checkpoint address scheme in {address!r}: expected local://<run-id>/<name>"
        )
    else:
        path = Path(address).expanduser()
        if not path.is_dir():
            raise EngineError(f"checkpoint {address!r} is neither a local:// address nor a directory")
    if not (path / CHECKPOINT_MANIFEST).is_file():
        raise EngineError(
            f"checkpoint directory {path} has no {CHECKPOINT_MANIFEST} (incomplete or not a checkpoint)"
        )
    return path
