"""The Tinker engine's step for log-prob objectives (DPO, KTO), the way tinker-cookbook's `train_dpo.py` runs DPO.

* Reference: a sampling client of the trainer's weights when its first such step is submitted (the cookbook's
  `save_weights_and_get_sampling_client()` in `create_dpo_clients`), kept for the run.
* Reference log-probs: `SamplingClient.compute_logprobs` of each datum's full sequence (its input plus the last
  target token; the first entry, which has no context, is dropped), all submitted, then awaited once per batch.
* The step: `TrainingClient.forward_backward_custom(data, loss_fn)` with the objective's loss. The SDK runs it as a
  `forward` pass (loss `cross_entropy`, forward only) for the policy's log-probs, the loss and its gradient on this
  machine, then a `forward_backward` with `cross_entropy` weights = -dLoss/dlogprobs, then our `optim_step`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from machine_lsp.engines.base import EngineError
from machine_lsp.engines.objectives import Objective, spec_for
from machine_lsp.engines.tinker.tinker_service import wait_future

if TYPE_CHECKING:  # pragma: no cover
    import tinker
    import torch


def full_sequence(datum: tinker.Datum) -> Any:
    """The datum's whole token sequence (model input + the last target), as the cookbook scores it."""
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    return datum.model_input.append_int(int(targets[-1])) if targets else datum.model_input


def reference_logprobs(trainer: Any, data: Sequence[tinker.Datum]) -> list[torch.Tensor]:
    """The reference's per-target log-probs of every datum: one compute_logprobs each, submitted together."""
    import torch

    reference = trainer.reference_client()
    futures = [
        trainer._submit(lambda d=d: reference.compute_logprobs(full_sequence(d)), "compute_logprobs")
        for d in data
    ]
    out = []
    for datum, future in zip(data, futures, strict=True):
        values = trainer.wait(future, "compute_logprobs")[1:]
        if len(values) != datum.model_input.length or any(v is None for v in values):
            raise EngineError(
                f"compute_logprobs returned {len(values)} log-probs for a {datum.model_input.length}-token datum"
            )
        out.append(torch.tensor(values, dtype=torch.float32))
    return out


def custom_loss(
    objective: Objective, reference: Sequence[torch.Tensor]
) -> Callable[[list[tinker.Datum], list[torch.Tensor]], tuple[torch.Tensor, dict[str, float]]]:
    """The `loss_fn` forward_backward_custom calls with the policy's log-probs: the objective's registered loss."""
    loss_fn = spec_for(objective).loss_fn()

    def loss(data: list[tinker.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        weights = [d.loss_fn_inputs["weights"].to_torch() for d in data]
        return loss_fn(objective, weights, logprobs, reference)

    return loss


def submit_objective_step(trainer: Any, data: list[tinker.Datum], objective: Objective) -> Any:
    """Reference log-probs (awaited: the loss needs them), then forward_backward_custom, both submitted."""
    spec = spec_for(objective)
    spec.check_batch(objective, len(data))
    reference = reference_logprobs(trainer, data)
    loss = custom_loss(objective, reference)
    return trainer._submit(
        lambda: trainer.client.forward_backward_custom(data, loss), "forward_backward_custom"
    )


def loss_and_metrics(objective: Objective, out: Any) -> tuple[float, dict[str, float]]:
    """The objective's loss and figures from forward_backward_custom's output (the loss_fn's own metrics)."""
    name = spec_for(objective).name
    metrics = {k: float(v) for k, v in (out.metrics or {}).items() if isinstance(v, int | float)}
    key = f"{name}_loss"
    if key not in metrics:
        raise EngineError(f"forward_backward_custom returned no {key} (metrics: {sorted(metrics)})")
    return metrics[key], metrics


class TinkerScorer:
    """`Scorer` on Tinker: `compute_logprobs` of each datum on the checkpoint's and the base model's samplers."""

    def __init__(self, engine: Any, policy: Any, reference: Any) -> None:
        self.engine, self.policy, self.reference = engine, policy, reference

    def completion_logprobs(self, batch: Sequence[tinker.Datum]) -> list[tuple[float, float]]:
        engine = self.engine
        futures = [  # every request submitted before the first wait
            [client.compute_logprobs(full_sequence(d)) for client in (self.policy, self.reference)]
            for d in batch
        ]
        out = []
        for datum, pair in zip(batch, futures, strict=True):
            weights = datum.loss_fn_inputs["weights"].tolist()
            sums = []
            for future in pair:
                values = wait_future(future, engine.call_timeout, "compute_logprobs", engine.service_url)[1:]
                sums.append(sum(w * (v or 0.0) for w, v in zip(weights, values, strict=False) if w))
            out.append((sums[0], sums[1]))
        return out
