"""The backward of a client-side custom loss (DPO, KTO), rewritten so that SkyRL tx trains it as Tinker would.

The SDK's `forward_backward_custom` runs a forward, computes the loss on the client, and sends its gradient back as
`cross_entropy` weights -dLoss/dlogprob, of both signs, for a backend whose cross-entropy is the plain sum
weight * -logprob. tx divides each datum's sum by the datum's weight sum, clamped at 1e-9
(`tx/tinker/backends/jax.py`), which makes such weights arbitrary gradients (measured before this rewrite: one
DPO+NLL step took the batch's loss to 4.503 on tx and to 3.068 on the local engine, from 4.521 on both).

tx's `importance_sampling` loss, -mask * exp(logprob - sampling_logprob) * advantage per token, divides by the
mask's sum instead: a count known here. With the mask 1 on each weighted token, advantage = weight * that count and
the sampling log-probs equal to the current ones (a forward of the same data just before, on the same weights), the
ratio is 1 and each datum's gradient is exactly -sum(weight * dlogprob): the weighted cross-entropy's. What is left
is tx's mean over the step's datums, a constant factor (the step's Adam update does not depend on it).

Like compat.py, this runs in tx's venv and imports nothing from machine_lsp. Drop it when tx sums cross-entropy.
"""

from __future__ import annotations

from typing import Any

BACKWARD_ROUTE = "/api/v1/forward_backward"
FORWARD_ROUTE = "/api/v1/forward"
RETRIEVE_ROUTE = "/api/v1/retrieve_future"
# tx's retrieve_future waits 5 minutes per call: the forward gets 15 before the backward is answered with an error
FORWARD_WAITS = 3


class CustomLossError(ValueError):
    """The forward a custom loss's backward needs failed, timed out, or did not give one log-prob per weight."""


def _weights(datum: dict[str, Any]) -> list[float]:
    return datum["loss_fn_inputs"].get("weights", {}).get("data", [])


def is_custom_loss_backward(route: str, payload: dict[str, Any]) -> bool:
    """A cross-entropy backward with a negative weight: what only the SDK's custom-loss path sends."""
    if route != BACKWARD_ROUTE:
        return False
    request = payload["forward_backward_input"]
    return request["loss_fn"] == "cross_entropy" and any(
        w < 0 for datum in request["data"] for w in _weights(datum)
    )


def forward_of(payload: dict[str, Any]) -> dict[str, Any]:
    """tx's forward request for the same model and data: the current log-probs the gradient is taken at."""
    return {"model_id": payload["model_id"], "forward_input": payload["forward_backward_input"]}


def logprobs_of(result: Any, payload: dict[str, Any]) -> list[list[float]]:
    """Each datum's target-token log-probs from tx's forward result, checked against the request's shape."""
    data = payload["forward_backward_input"]["data"]
    outputs = result.get("loss_fn_outputs") if isinstance(result, dict) else None
    if not isinstance(outputs, list) or len(outputs) != len(data):
        raise CustomLossError(
            f"the forward before a custom loss's backward gave no per-datum result: {result!r}"
        )
    found = []
    for index, (datum, output) in enumerate(zip(data, outputs, strict=True)):
        values = output.get("logprobs", {}).get("data", [])
        if len(values) != len(_weights(datum)):
            raise CustomLossError(
                f"datum {index}: the forward gave {len(values)} log-probs for {len(_weights(datum))} weights"
            )
        found.append([float(v) for v in values])
    return found


def as_importance_sampling(payload: dict[str, Any], logprobs: list[list[float]]) -> dict[str, Any]:
    """The backward request with each datum's weights moved into advantages (see the module docstring)."""
    request = payload["forward_backward_input"]
    data = []
    for datum, current in zip(request["data"], logprobs, strict=True):
        weights = _weights(datum)
        counted = sum(1 for w in weights if w != 0) or 1
        inputs = {
            "target_tokens": datum["loss_fn_inputs"]["target_tokens"],
            "weights": {"data": [1.0 if w != 0 else 0.0 for w in weights]},
            "advantages": {"data": [w * counted for w in weights]},
            "logprobs": {"data": current},
        }
        data.append({**datum, "loss_fn_inputs": inputs})
    rewritten = {**request, "data": data, "loss_fn": "importance_sampling"}
    return {**payload, "forward_backward_input": rewritten}
