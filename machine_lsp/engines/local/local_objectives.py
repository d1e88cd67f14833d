"""The local engine's step for log-prob objectives (DPO, KTO): policy and reference log-probs on one model.

The reference is the base model itself with the LoRA adapter switched off (peft's `disable_adapter()` context), so
there is no second copy of the weights in memory (in a staged run's DPO stage: the adapter frozen at the stage's
start, swapped in for the reference pass); its log-probs are computed once per batch, without gradients,
before the policy's pass. The policy's per-token log-probs of every datum of the batch are kept (with their graph)
until the objective's loss couples them (DPO pairs, KTO's batch-wide KL), then one backward runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from machine_lsp.engines.base import StepStats
from machine_lsp.engines.objectives import Objective, spec_for

if TYPE_CHECKING:  # pragma: no cover
    import torch

Rows = Sequence[tuple[list[int], list[int], list[float]]]


def token_logprobs(
    trainer: Any, rows: Rows, graded: int | None = None
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per datum: (log-probs of its weighted target tokens, their weights).

    Runs with whatever grad mode and adapter state the caller set; rows[graded:] (default: none) are a tail that
    takes no gradient (KTO's KL datums). Rows are packed (local_packing: each shared prompt once, no padding) when
    the model's attention takes a 4D mask; otherwise micro-batched by length, as SFT steps are. Only weighted
    positions go through the output head (the loss never looks at the others)."""
    from machine_lsp.engines.local.local_packing import PACKED_ATTENTION, packed_logprobs

    graded = len(rows) if graded is None else graded
    if trainer._lm.config._attn_implementation in PACKED_ATTENTION:
        return packed_logprobs(trainer, rows, graded)
    import torch

    policy, weights = padded_logprobs(trainer, rows[:graded])
    if graded < len(rows):
        with torch.no_grad():
            tail_policy, tail_weights = padded_logprobs(trainer, rows[graded:])
        policy, weights = policy + tail_policy, weights + tail_weights
    return policy, weights


def padded_logprobs(trainer: Any, rows: Rows) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """token_logprobs for attention implementations without 4D masks: rows right-padded into length groups."""
    import torch

    from machine_lsp.engines.local.local_batching import fast_head, length_groups

    engine, lm = trainer.engine, trainer._lm
    pad_id = int(trainer.tokenizer.pad_token_id if trainer.tokenizer.pad_token_id is not None else 0)
    logprobs: list[Any] = [None] * len(rows)
    weights: list[Any] = [None] * len(rows)
    for group in length_groups([len(r[0]) for r in rows], engine.max_micro_tokens, engine.max_padding):
        width = len(rows[group[0]][0])
        ids = torch.full((len(group), width), pad_id, dtype=torch.long)
        for j, i in enumerate(group):
            ids[j, : len(rows[i][0])] = torch.tensor(rows[i][0])
        if fast_head(lm):
            hidden, head = (
                lm.base_model(input_ids=ids, use_cache=False).last_hidden_state,
                lm.get_output_embeddings(),
            )
        else:  # logits post-processed (soft-capping, scaling): the model's own full forward
            hidden, head = lm(input_ids=ids, use_cache=False).logits, (lambda x: x)
        for j, i in enumerate(group):
            _, targets, row_weights = rows[i]
            picked = [k for k, w in enumerate(row_weights) if w > 0]
            index = torch.tensor(picked, dtype=torch.long)
            logits = head(hidden[j, index])
            target = torch.tensor([targets[k] for k in picked], dtype=torch.long)
            logprobs[i] = torch.log_softmax(logits.float(), dim=-1).gather(1, target[:, None])[:, 0]
            weights[i] = torch.tensor([row_weights[k] for k in picked], dtype=torch.float32)
    return logprobs, weights


#: rows whose reference log-probs a trainer keeps (a few floats each); past this the cache starts over
REFERENCE_CACHE_ROWS = 65536


def reference_logprobs(
    trainer: Any, rows: Rows, graded: int | None = None, *, cached: bool = True
) -> list[torch.Tensor]:
    """The reference's log-probs, no gradients: the base model (adapter disabled), or after `freeze_reference` the
    adapter as it was then (sft+dpo's SFT-stage policy).

    The reference never changes while it is the reference, so a row's log-probs are computed once per run and kept
    (keyed by the row's tokens and weights; the cache belongs to the reference it was computed under and starts
    over when `reference_state` changes). Rows not yet kept run in one pass, in the same layout as the policy's
    (`graded` as token_logprobs), so before the first step policy and reference agree bit for bit."""
    graded = len(rows) if graded is None else graded
    if not cached:  # a fresh pass that leaves the kept rows alone
        return _reference_pass(trainer, rows, graded)
    owner, cache = getattr(trainer, "_reference_cache", (None, {}))
    if owner is not trainer.reference_state or len(cache) > REFERENCE_CACHE_ROWS:
        cache = {}
        trainer._reference_cache = (trainer.reference_state, cache)
    keys = [(tuple(r[0]), tuple(r[1]), tuple(r[2])) for r in rows]
    missing = [i for i, key in enumerate(keys) if key not in cache]
    if missing:
        fresh = _reference_pass(trainer, [rows[i] for i in missing], sum(1 for i in missing if i < graded))
        cache.update((keys[i], lp) for i, lp in zip(missing, fresh, strict=True))
    return [cache[key] for key in keys]


def _reference_pass(trainer: Any, rows: Rows, graded: int) -> list[torch.Tensor]:
    """One reference pass: the adapter disabled, or the frozen adapter swapped in and the trained weights back."""
    import torch

    frozen = trainer.reference_state
    if frozen is None:
        with torch.no_grad(), trainer.model.disable_adapter():
            return token_logprobs(trainer, rows, graded)[0]
    with torch.no_grad():
        trained = [p.detach().clone() for p in trainer.params]
        try:
            for param, weights in zip(trainer.params, frozen, strict=True):
                param.copy_(weights)
            return token_logprobs(trainer, rows, graded)[0]
        finally:
            for param, weights in zip(trainer.params, trained, strict=True):
                param.copy_(weights)


def objective_step(trainer: Any, batch: Sequence[Any], objective: Objective) -> StepStats:
    """forward and backward of a log-prob objective on `batch` (gradients accumulate; optim_step follows)."""
    import time

    started = time.perf_counter()
    spec = spec_for(objective)
    loss_fn = spec.loss_fn()
    spec.check_batch(objective, len(batch))
    rows = trainer._check_batch(batch)
    trainer.model.train()
    # KTO's mismatched half only estimates the KL point (no gradient, as TRL's no_grad pass): a tail with no graph.
    graded = len(rows) // 2 if spec.data == "examples" else len(rows)
    reference = reference_logprobs(trainer, rows, graded)
    policy, weights = token_logprobs(trainer, rows, graded)
    loss, metrics = loss_fn(objective, weights, policy, reference)
    loss.backward()
    trained = sum(1 for _, _, row_weights in rows for w in row_weights if w > 0)
    trainer.trained_tokens += trained
    tokens = sum(len(r[0]) for r in rows)
    return StepStats(
        loss=float(loss.detach()),
        tokens=tokens,
        trained_tokens=trained,
        seconds=time.perf_counter() - started,
        metrics=metrics,
    )


class LocalScorer:
    """`Scorer` on the local engine: completion log-probs under a checkpoint and under the base (adapter off)."""

    def __init__(self, sampler: Any) -> None:
        self.engine, self.tokenizer, self.model = sampler.engine, sampler.tokenizer, sampler.model
        self._lm = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model

    def completion_logprobs(self, batch: Sequence[Any]) -> list[tuple[float, float]]:
        import contextlib

        import torch

        from machine_lsp.engines import render

        rows = [render.datum_tokens(d) for d in batch]
        self.model.eval()
        with torch.no_grad():
            policy, weights = token_logprobs(self, rows)
            off = getattr(self.model, "disable_adapter", None)
            with off() if off is not None else contextlib.nullcontext():  # the base model: no adapter loaded
                reference, _ = token_logprobs(self, rows)
        return [
            (float((p * w).sum()), float((r * w).sum()))
            for p, r, w in zip(policy, reference, weights, strict=True)
        ]
