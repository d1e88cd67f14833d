"""Each translation of the compatibility layer, with the tinker SDK's own encoders and decoders on both sides.

The requests are built and serialized by the SDK 0.38 code that sends them (`forward_backward_request_to_proto`),
and the answers are read back by the SDK code that receives them (`deserialize_json_response`, the config
models), so a change on either side of the wire fails here. The layer's wiring into SkyRL tx is exercised
end to end in test_server_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")

from tinker import types  # noqa: E402
from tinker.proto import tinker_public_pb2 as pb2  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402
from tinker.proto.response_conv import deserialize_proto_response  # noqa: E402

from machine_lsp.tinker_server import compat, compat_losses  # noqa: E402


def _datum(tokens: list[int], weights: list[float]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[len(tokens) - 1]),
            "weights": types.TensorData(data=weights, dtype="float32", shape=[len(weights)]),
        },
    )


def _request(
    data: list[types.Datum], loss_fn_config: dict[str, float] | None = None
) -> types.ForwardBackwardRequest:
    return types.ForwardBackwardRequest(
        model_id="model_1234",
        seq_id=7,
        forward_backward_input=types.ForwardBackwardInput(
            data=data, loss_fn="cross_entropy", loss_fn_config=loss_fn_config
        ),
    )


DATA = [_datum([1, 20, 300, 4000, 5], [0.0, 0.0, 0.5, 0.5]), _datum([9, 8, 7], [1.0, 0.25])]


def test_forward_backward_protobuf_becomes_tx_json() -> None:
    body = forward_backward_request_to_proto(_request(DATA)).SerializeToString()
    route, payload = compat.forward_backward_json(body, pb2)
    assert route == "/api/v1/forward_backward"
    assert payload["model_id"] == "model_1234"
    fb = payload["forward_backward_input"]
    assert fb["loss_fn"] == "cross_entropy"
    assert fb["loss_fn_config"] is None
    assert [d["model_input"]["chunks"] for d in fb["data"]] == [
        [{"tokens": [1, 20, 300, 4000]}],
        [{"tokens": [9, 8]}],
    ]
    assert fb["data"][0]["loss_fn_inputs"]["target_tokens"] == {"data": [20, 300, 4000, 5]}
    assert fb["data"][0]["loss_fn_inputs"]["weights"] == {"data": [0.0, 0.0, 0.5, 0.5]}
    assert fb["data"][1]["loss_fn_inputs"]["weights"] == {"data": [1.0, 0.25]}
    json.dumps(payload)  # plain JSON, as tx's pydantic models expect


def test_forward_only_goes_to_the_forward_route() -> None:
    proto = forward_backward_request_to_proto(_request(DATA[:1], {"clip": 0.2}))
    proto.forward_only = True
    route, payload = compat.forward_backward_json(proto.SerializeToString(), pb2)
    assert route == "/api/v1/forward"
    assert set(payload) == {"model_id", "forward_input"}
    assert payload["forward_input"]["loss_fn_config"] == pytest.approx({"clip": 0.2})


SIGNED = [_datum([1, 20, 300], [0.3, -0.2]), _datum([9, 8, 7, 6], [0.0, 0.1, 0.0])]


def test_only_a_custom_loss_backward_is_rewritten() -> None:
    """forward_backward_custom's backward (cross_entropy with weights of both signs) is what tx would train wrongly;
    its forward, and a backward with non-negative weights (SFT), pass as they are."""
    backward = compat.forward_backward_json(
        forward_backward_request_to_proto(_request(SIGNED)).SerializeToString(), pb2
    )
    assert compat_losses.is_custom_loss_backward(*backward)
    forward = forward_backward_request_to_proto(_request(SIGNED))
    forward.forward_only = True
    assert not compat_losses.is_custom_loss_backward(
        *compat.forward_backward_json(forward.SerializeToString(), pb2)
    )
    sft = compat.forward_backward_json(
        forward_backward_request_to_proto(_request(DATA)).SerializeToString(), pb2
    )
    assert not compat_losses.is_custom_loss_backward(*sft)
    assert compat_losses.forward_of(backward[1]) == {
        "model_id": "model_1234",
        "forward_input": backward[1]["forward_backward_input"],
    }


def test_the_rewritten_backward_has_the_weighted_cross_entropys_gradient() -> None:
    """tx's importance_sampling loss per datum, sum(-mask * exp(lp - s) * adv) / sum(mask), on the rewritten
    inputs: at lp = s its gradient is -weight per token, which is what Tinker's cross-entropy sum(-weight * lp)
    gives; tx's own cross-entropy, sum(-weight * lp) / sum(weight), would give -weight / (0.3 - 0.2) here."""
    import torch

    _, payload = compat.forward_backward_json(
        forward_backward_request_to_proto(_request(SIGNED)).SerializeToString(), pb2
    )
    current = [[-1.5, -0.25], [-2.0, -0.5, -3.0]]
    rewritten = compat_losses.as_importance_sampling(payload, current)
    request = rewritten["forward_backward_input"]
    assert request["loss_fn"] == "importance_sampling"
    for datum, original, logprobs in zip(request["data"], SIGNED, current, strict=True):
        inputs = datum["loss_fn_inputs"]
        assert inputs["target_tokens"]["data"] == original.loss_fn_inputs["target_tokens"].data
        assert inputs["logprobs"]["data"] == logprobs
        lp = torch.tensor(logprobs, dtype=torch.float64, requires_grad=True)
        mask = torch.tensor(inputs["weights"]["data"], dtype=torch.float64)
        advantages = torch.tensor(inputs["advantages"]["data"], dtype=torch.float64)
        sampled = torch.tensor(inputs["logprobs"]["data"], dtype=torch.float64)
        loss = (-mask * torch.exp(lp - sampled) * advantages).sum() / mask.sum().clamp(min=1e-9)
        loss.backward()
        weights = original.loss_fn_inputs["weights"].data
        assert lp.grad.tolist() == pytest.approx([-w for w in weights])


def test_a_forward_that_does_not_fit_the_backward_is_a_clear_error() -> None:
    _, payload = compat.forward_backward_json(
        forward_backward_request_to_proto(_request(SIGNED)).SerializeToString(), pb2
    )
    short = {"loss_fn_outputs": [{"logprobs": {"data": [-1.0, -2.0]}}, {"logprobs": {"data": [-1.0]}}]}
    with pytest.raises(
        compat_losses.CustomLossError, match="datum 1: the forward gave 1 log-probs for 3 weights"
    ):
        compat_losses.logprobs_of(short, payload)
    with pytest.raises(compat_losses.CustomLossError, match="no per-datum result"):
        compat_losses.logprobs_of({"detail": "Model not loaded"}, payload)


def test_zstd_bodies_are_decompressed() -> None:
    import zstandard

    body = forward_backward_request_to_proto(_request(DATA)).SerializeToString()
    _, plain = compat.forward_backward_json(body, pb2)
    _, packed = compat.forward_backward_json(zstandard.ZstdCompressor().compress(body), pb2, "zstd")
    assert packed == plain
    with pytest.raises(compat.CompatError, match="br"):
        compat.forward_backward_json(body, pb2, "br")


def test_image_chunks_are_refused_clearly() -> None:
    proto = forward_backward_request_to_proto(_request(DATA[:1]))
    proto.data[0].model_input.add().image.data = b"\x89PNG"
    with pytest.raises(compat.CompatError, match="image"):
        compat.forward_backward_json(proto.SerializeToString(), pb2)


def test_sample_results_become_the_protobuf_the_sdk_reads() -> None:
    tx_result = {
        "sequences": [
            {"tokens": [5, 6, 7], "logprobs": [-0.1, -0.2, -0.3], "stop_reason": "stop"},
            {"tokens": [8], "logprobs": [], "stop_reason": "length"},
        ],
        "prompt_logprobs": None,
    }
    proto = compat.result_proto(tx_result, pb2)
    assert proto is not None
    parsed = deserialize_proto_response(proto, types.SampleResponse)
    assert [s.tokens for s in parsed.sequences] == [[5, 6, 7], [8]]
    assert [s.stop_reason for s in parsed.sequences] == ["stop", "length"]
    assert parsed.sequences[0].logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert parsed.sequences[1].logprobs is None


def test_prompt_logprobs_get_tinkers_leading_none() -> None:
    """tx returns the N-1 log-probs of a prompt's tokens 1..N-1; the SDK expects N, None first (compute_logprobs of
    a 24-token sequence gave 23 values, each one token off, before this)."""
    tx_result = {"sequences": [{"tokens": [9], "logprobs": [-0.5]}], "prompt_logprobs": [-1.0, -2.0, -3.0]}
    parsed = deserialize_proto_response(compat.result_proto(tx_result, pb2), types.SampleResponse)
    assert parsed.prompt_logprobs is not None
    assert parsed.prompt_logprobs[0] is None and parsed.prompt_logprobs[1:] == pytest.approx(
        [-1.0, -2.0, -3.0]
    )
    conforming = {**tx_result, "prompt_logprobs": [None, -1.0, -2.0, -3.0]}
    again = deserialize_proto_response(compat.result_proto(conforming, pb2), types.SampleResponse)
    assert again.prompt_logprobs == parsed.prompt_logprobs


def test_forward_backward_results_become_the_protobuf_the_sdk_reads() -> None:
    from tinker_cookbook.supervised.common import compute_mean_nll

    tx_result = {
        "loss_fn_output_type": "scalar",
        "metrics": {},
        "loss_fn_outputs": [
            {
                "elementwise_loss": {"data": [0.5, 1.5], "dtype": "float32", "shape": [2]},
                "logprobs": {"data": [-0.5, -1.5], "dtype": "float32", "shape": [2]},
            },
            {
                "elementwise_loss": {"data": [2.0, 0.25, 1.0], "dtype": "float32", "shape": [3]},
                "logprobs": {"data": [-2.0, -0.25, -1.0], "dtype": "float32", "shape": [3]},
            },
        ],
    }
    proto = compat.result_proto(tx_result, pb2)
    assert proto is not None
    parsed = deserialize_proto_response(proto, types.ForwardBackwardOutput)
    assert len(parsed.loss_fn_outputs) == 2
    assert parsed.loss_fn_outputs[1]["logprobs"].tolist() == pytest.approx([-2.0, -0.25, -1.0])
    assert parsed.loss_fn_outputs[0]["logprobs"].shape == [2]
    weights = [
        types.TensorData(data=[1.0, 1.0], dtype="float32"),
        types.TensorData(data=[0.0, 1.0, 1.0], dtype="float32"),
    ]
    # what the engine computes from it: sum(w * -logp) / sum(w)
    assert compute_mean_nll([o["logprobs"] for o in parsed.loss_fn_outputs], weights) == pytest.approx(
        (0.5 + 1.5 + 0.25 + 1.0) / 4
    )
    # tx sends no metrics; forward_backward_custom reads "loss:sum", Tinker's sum of every per-token loss
    assert parsed.metrics == {"loss:sum": pytest.approx(0.5 + 1.5 + 2.0 + 0.25 + 1.0)}
    assert compat.result_proto({"type": "save_weights", "path": "tinker://m/weights/x"}, pb2) is None


def _call(
    app: Any, method: str, path: str, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, Any]:
    """One HTTP request through an ASGI app, in process."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "headers": headers or [],
    }
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(data)


async def _unreachable(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError(f"{scope['path']} should have been answered by the compat layer")


def test_client_config_routes_answer_what_the_sdk_reads() -> None:
    layer = compat.TinkerCompat(_unreachable, pb2)
    status, config = _call(layer, "POST", "/api/v1/client/config", b'{"sdk_version": "0.38.0"}')
    assert status == 200
    parsed = types.ClientConfigResponse.model_validate(config)
    assert parsed.pjwt_auth_enabled is False  # no token exchange against tx
    assert parsed.proto_compress_fwdbwd is False
    assert parsed.custom_loss_server_side is False
    assert parsed.sample_use_retrieve_futures is False  # tx has no retrieve_futures
    status, dynamic = _call(layer, "POST", "/api/v1/client/dynamic_config", b"{}")
    assert status == 200
    assert types.ClientDynamicConfigResponse.model_validate(dynamic).sample_cancel_enabled is False


def test_samplers_route_answers_from_the_lookup() -> None:
    sessions = {
        "sampling_ab12": {"sampler_id": "sampling_ab12", "base_model": "/m/SmolLM2", "model_path": None}
    }

    async def lookup(sampler_id: str) -> dict[str, Any] | None:
        return sessions.get(sampler_id)

    layer = compat.TinkerCompat(_unreachable, pb2, lookup)
    status, found = _call(layer, "GET", "/api/v1/samplers/sampling_ab12")
    assert status == 200
    assert types.GetSamplerResponse.model_validate(found).base_model == "/m/SmolLM2"
    status, missing = _call(layer, "GET", "/api/v1/samplers/nope")
    assert status == 404
    assert "nope" in missing["detail"]


def test_a_protobuf_body_that_does_not_parse_is_a_400_not_a_crash() -> None:
    layer = compat.TinkerCompat(_unreachable, pb2)
    status, answer = _call(
        layer,
        "POST",
        "/api/v1/forward_backward",
        b"\xff\xff\xff not protobuf",
        [(b"content-type", b"application/x-protobuf")],
    )
    assert status == 400
    assert "cannot translate" in answer["detail"]


def test_sampler_checkpoint_paths_get_the_sampler_weights_form() -> None:
    from machine_lsp.engines.tinker.tinker_engine import split_tinker_path

    tx_result = {
        "path": "tinker://model_ab12/step-3",
        "type": "save_weights_for_sampler",
        "sampling_session_id": None,
    }
    assert compat.sampler_path_fixed(tx_result) is True
    parsed = types.SaveWeightsForSamplerResponse.model_validate(tx_result)
    assert split_tinker_path(parsed.path) == ("model_ab12", "sampler_weights", "step-3")
    assert compat.sampler_path_fixed(tx_result) is False  # already in that form
    assert compat.sampler_path_fixed({"path": "tinker://m/weights/x", "type": "save_weights"}) is False
    assert compat.sampler_path_fixed({"path": None, "type": "save_weights_for_sampler"}) is False


def test_asample_futures_get_the_sequence_ids_the_sdk_requires() -> None:
    from tinker.lib.public_interfaces.sampling_client import _attach_sequence_ids

    tx_future = {"future_id": "17", "status": "pending", "request_id": "17"}
    assert compat.with_sequence_ids(tx_future, 2) is True
    untyped = types.UntypedAPIFuture.model_validate(tx_future)
    assert untyped.sample_sequence_ids == ["17-0", "17-1"]
    proto = compat.result_proto({"sequences": [{"tokens": [1], "stop_reason": "stop"}] * 2}, pb2)
    response = deserialize_proto_response(proto, types.SampleResponse)
    stamped = _attach_sequence_ids(response, untyped.sample_sequence_ids)  # what the SDK does with them
    assert [s.sequence_id for s in stamped.sequences] == ["17-0", "17-1"]
    assert compat.with_sequence_ids(tx_future, 2) is False  # already there
    assert compat.with_sequence_ids({"detail": "nope"}, 1) is False
