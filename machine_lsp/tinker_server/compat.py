"""Compatibility layer: lets the tinker SDK 0.38 talk to a SkyRL tx 0.3.0 server. Also its launcher.

`machine tinker serve` runs this file with SkyRL tx's venv python (`python compat.py <tx.tinker.api arguments>`):
it builds SkyRL tx's FastAPI app exactly as `python -m tx.tinker.api` does, wraps it in `TinkerCompat` (a plain
ASGI middleware) and serves it with uvicorn. It imports nothing from machine_lsp, so it runs in that venv; the SDK's
generated protobuf module is loaded from the path given in `--tinker-proto` (our venv's
`tinker/proto/tinker_public_pb2.py`; it needs only `protobuf`, pinned in both venvs).

What it translates (SDK 0.38 sends / expects -> what SkyRL tx 0.3.0 serves), each droppable once tx serves it:

1. `POST /api/v1/client/config`, `POST /api/v1/client/dynamic_config`: tx has no such routes (404, which the SDK
   retries). Answered here with the SDK's defaults minus the features tx lacks (server-side custom losses,
   retrieve_futures polling, zstd request bodies). Drop when tx serves `client/config`.
2. `POST /api/v1/forward_backward` with a protobuf body (`Content-Type: application/x-protobuf`, optionally
   `Content-Encoding: zstd`): decoded with the SDK's own `ForwardBackwardRequest` message into tx's JSON request;
   `forward_only=true` goes to tx's `/api/v1/forward` instead. Drop when tx accepts protobuf bodies.
3. Finished futures from `POST /api/v1/retrieve_future` asked for with `Accept: application/x-protobuf`: SDK 0.38
   reads sample results and forward(_backward) outputs only as protobuf (`SampleResponse`,
   `ForwardBackwardOutput`; it stamps the sequence ids itself); tx answers JSON, re-encoded here. Other results
   pass through as JSON. Drop when tx serves protobuf results.
5. `POST /api/v1/asample` answers: SDK 0.38 requires `sample_sequence_ids` (one per sample) on the future it gets
   back; `<request id>-<i>` ids are added. Drop when tx returns them.
6. `save_weights_for_sampler` results: tx names the checkpoint `tinker://<model>/<name>`; the SDK, hosted Tinker and
   `machine` manifests use `tinker://<model>/sampler_weights/<name>` (tx samples from both). Rewritten to the
   latter. Drop when tx returns the `sampler_weights` form.
4. `GET /api/v1/samplers/{id}`: the SDK asks a sampling session's base model there; answered from tx's own
   sampling-session table. Drop when tx serves the route.
7. The backward of a client-side custom loss (`forward_backward_custom`: DPO, KTO), a `cross_entropy` request with
   weights of both signs: tx would scale each datum's gradient by its weight sum, so it becomes a forward of the same
   data, waited for here, then an `importance_sampling` backward with the same gradient (`compat_losses`). Drop when
   tx's cross-entropy is a plain sum, as Tinker's is.

Not translated (the engine works around it): `create_training_client_from_state*` sends a `load_weights` request
without a model id (tx answers 422); `machine_lsp.engines.tinker.tinker_engine` then creates a LoRA client and loads the
state into it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from types import ModuleType
from typing import Any

try:
    from . import compat_losses
except ImportError:  # run as a script by tx's python (`python compat.py`): this file's folder is on sys.path
    import compat_losses  # type: ignore[no-redef]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
SamplerLookup = Callable[[str], Awaitable[dict[str, Any] | None]]

PROTO_CONTENT_TYPE = "application/x-protobuf"
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "proto_compress_fwdbwd": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
}
DYNAMIC_CONFIG = {"sample_cancel_enabled": False}
CONFIG_ROUTES = {"/api/v1/client/config": CLIENT_CONFIG, "/api/v1/client/dynamic_config": DYNAMIC_CONFIG}
SAMPLERS_PREFIX = "/api/v1/samplers/"


class CompatError(ValueError):
    """A request this layer cannot translate (answered with HTTP 400 and this message)."""


def load_proto_module(path: str) -> ModuleType:
    """The SDK's generated `tinker_public_pb2` module, loaded from its file."""
    spec = importlib.util.spec_from_file_location("tinker_public_pb2", path)
    if spec is None or spec.loader is None:
        raise CompatError(f"cannot load the tinker protobuf module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tensor_values(tensor: Any, pb2: ModuleType) -> list[float] | list[int]:
    import numpy as np

    dtypes = {pb2.DTYPE_FLOAT32: np.float32, pb2.DTYPE_INT64: np.int64, pb2.DTYPE_INT32: np.int32}
    dtype = dtypes.get(tensor.dtype)
    if dtype is None:
        raise CompatError(f"tensor dtype {tensor.dtype} is not supported by this server")
    encoding = tensor.WhichOneof("encoding")
    if encoding == "dense":
        return np.frombuffer(tensor.dense, dtype=dtype).tolist()
    if encoding == "sparse_csr":
        csr = tensor.sparse_csr
        values = np.frombuffer(csr.values, dtype=dtype)
        crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
        cols = np.frombuffer(csr.col_indices, dtype=np.int64)
        rows, width = (list(tensor.shape) + [1])[:2] if len(tensor.shape) == 2 else (1, int(tensor.shape[0]))
        dense = np.zeros((rows, width), dtype=dtype)
        for row in range(rows):
            start, end = int(crow[row]), int(crow[row + 1])
            dense[row, cols[start:end]] = values[start:end]
        return dense.reshape(-1).tolist()
    return []


def forward_backward_json(body: bytes, pb2: ModuleType, encoding: str = "") -> tuple[str, dict[str, Any]]:
    """A protobuf `ForwardBackwardRequest` -> (tx route, tx JSON request)."""
    if encoding == "zstd":
        import zstandard

        body = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 31)
    elif encoding not in ("", "identity"):
        raise CompatError(f"Content-Encoding {encoding!r} is not supported")
    message = pb2.ForwardBackwardRequest()
    message.ParseFromString(body)
    data = []
    for datum in message.data:
        chunks = []
        for chunk in datum.model_input:
            kind = chunk.WhichOneof("chunk")
            if kind != "encoded_text":
                raise CompatError(f"model input chunks of kind {kind!r} are not supported by this server")
            import numpy as np

            chunks.append({"tokens": np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist()})
        inputs = {name: {"data": _tensor_values(t, pb2)} for name, t in datum.loss_fn_inputs.items()}
        data.append({"model_input": {"chunks": chunks}, "loss_fn_inputs": inputs})
    config: dict[str, float] = {k: float(v) for k, v in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        if value.WhichOneof("value") == "number":
            config[key] = float(value.number)
    payload = {"data": data, "loss_fn": message.loss_fn, "loss_fn_config": config or None}
    if message.forward_only:
        return "/api/v1/forward", {"model_id": message.model_id, "forward_input": payload}
    return "/api/v1/forward_backward", {
        "model_id": message.model_id,
        "seq_id": message.seq_id,
        "forward_backward_input": payload,
    }


def sample_result_proto(result: dict[str, Any], pb2: ModuleType) -> bytes:
    """tx's JSON sample result -> the SDK's `SampleResponse` protobuf (sequence ids are stamped by the SDK)."""
    import numpy as np

    message = pb2.SampleResponse()
    for sequence in result["sequences"]:
        out = message.sequences.add()
        out.stop_reason = (
            pb2.STOP_REASON_STOP if sequence.get("stop_reason") == "stop" else pb2.STOP_REASON_LENGTH
        )
        out.tokens = np.asarray(sequence.get("tokens") or [], dtype=np.int32).tobytes()
        if sequence.get("logprobs"):
            out.logprobs = np.asarray(sequence["logprobs"], dtype=np.float32).tobytes()
    prompt_logprobs = result.get("prompt_logprobs")
    if prompt_logprobs:
        # Tinker gives one per prompt token, None for the first (nothing predicts it); tx gives the N-1 that exist
        # (tx/utils/generator.py: logprobs of input_ids[:, 1:]), which would shift every one onto the wrong token.
        if prompt_logprobs[0] is not None:
            prompt_logprobs = [None, *prompt_logprobs]
        values = [np.nan if value is None else value for value in prompt_logprobs]
        message.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return message.SerializeToString()


def forward_backward_result_proto(result: dict[str, Any], pb2: ModuleType) -> bytes:
    """tx's JSON forward(_backward) result -> the SDK's `ForwardBackwardOutput` protobuf (one batched record)."""
    import numpy as np

    message = pb2.ForwardBackwardOutput()
    message.loss_fn_output_type = str(result.get("loss_fn_output_type") or "ArrayRecord")
    for key, value in (result.get("metrics") or {}).items():
        message.metrics[key] = float(value)
    outputs = result.get("loss_fn_outputs") or []
    if "loss:sum" not in message.metrics and outputs and all("elementwise_loss" in o for o in outputs):
        # Tinker reports the batch's summed loss, and the SDK's client-side custom loss (forward_backward_custom)
        # reads it; tx's JAX backend sends no metrics, only each datum's per-token loss.
        message.metrics["loss:sum"] = float(sum(sum(o["elementwise_loss"]["data"]) for o in outputs))
    if outputs:
        record = message.loss_fn_outputs.add()
        record.num_datums = len(outputs)
        for name in outputs[0]:
            is_int = outputs[0][name].get("dtype") == "int64"
            dtype = np.int64 if is_int else np.float32
            arrays = [np.asarray(output[name]["data"], dtype=dtype).reshape(-1) for output in outputs]
            offsets = np.cumsum([0] + [a.nbytes for a in arrays], dtype=np.int64)
            field = record.fields[name]
            field.data = b"".join(a.tobytes() for a in arrays)
            field.offsets = offsets.tobytes()
            field.dtype = pb2.DTYPE_INT64 if is_int else pb2.DTYPE_FLOAT32
    return message.SerializeToString()


def sampler_path_fixed(result: Any) -> bool:
    """`tinker://<model>/<name>` in a save_weights_for_sampler result -> `tinker://<model>/sampler_weights/<name>`,
    the form the SDK and hosted Tinker use (tx accepts both when sampling). True if the result was changed."""
    if not isinstance(result, dict) or result.get("type") != "save_weights_for_sampler":
        return False
    path = result.get("path")
    if not isinstance(path, str) or not path.startswith("tinker://"):
        return False
    parts = path[len("tinker://") :].split("/")
    if len(parts) != 2:
        return False
    result["path"] = f"tinker://{parts[0]}/sampler_weights/{parts[1]}"
    return True


def result_proto(result: Any, pb2: ModuleType) -> bytes | None:
    """The protobuf form of a finished future's JSON result, for the two types SDK 0.38 reads only as protobuf."""
    if isinstance(result, dict) and isinstance(result.get("sequences"), list):
        return sample_result_proto(result, pb2)
    if isinstance(result, dict) and isinstance(result.get("loss_fn_outputs"), list):
        return forward_backward_result_proto(result, pb2)
    return None


def with_sequence_ids(response: Any, num_samples: int) -> bool:
    """An `asample` future gets `sample_sequence_ids`, one per requested sample; True if it was changed."""
    if not isinstance(response, dict) or "request_id" not in response or response.get("sample_sequence_ids"):
        return False
    response["sample_sequence_ids"] = [f"{response['request_id']}-{i}" for i in range(max(num_samples, 1))]
    return True


def _whole_response(send: Send, respond: Callable[[Message, bytes], tuple[bytes, list[Any]]]) -> Send:
    """A `send` that buffers a response and hands its start and whole body to `respond`, which returns the body and
    headers to send instead (their content-length is set here)."""
    start: Message | None = None
    chunks: list[bytes] = []

    async def wrapped(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
            return
        if message["type"] != "http.response.body" or start is None:
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        out, headers = respond(start, b"".join(chunks))
        headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(out)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return wrapped


def _replay(body: bytes) -> Receive:
    """A `receive` that hands the app a request body already read, once, then a disconnect."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _rewrite_json(send: Send, rewrite: Callable[[Any], bool]) -> Send:
    """A `send` that buffers a 200 JSON response and lets `rewrite` change it in place before it goes out."""

    def respond(start: Message, out: bytes) -> tuple[bytes, list[Any]]:
        if start["status"] == 200:
            result = _json_or_none(out)
            if rewrite(result):
                out = json.dumps(result).encode()
        return out, list(start.get("headers", []))

    return _whole_response(send, respond)


def _json_scope(scope: Scope, route: str, data: bytes) -> Scope:
    """The request's scope re-aimed at tx's `route` with a JSON body of `data`."""
    headers = [
        (k, v)
        for k, v in scope.get("headers", [])
        if k.lower() not in (b"content-type", b"content-length", b"content-encoding")
    ]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    return dict(scope, path=route, raw_path=route.encode(), headers=headers)


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


async def _send_json(send: Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class TinkerCompat:
    """ASGI middleware in front of SkyRL tx's app; see the module docstring for each translation."""

    def __init__(self, app: ASGIApp, pb2: ModuleType, sampler_lookup: SamplerLookup | None = None) -> None:
        self.app = app
        self.pb2 = pb2
        self.sampler_lookup = sampler_lookup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if method == "POST" and path in CONFIG_ROUTES:
            await _read_body(receive)
            await _send_json(send, 200, CONFIG_ROUTES[path])
        elif method == "GET" and path.startswith(SAMPLERS_PREFIX) and self.sampler_lookup is not None:
            await self._sampler(path[len(SAMPLERS_PREFIX) :], send)
        elif (
            method == "POST"
            and path == "/api/v1/forward_backward"
            and PROTO_CONTENT_TYPE in _header(scope, b"content-type")
        ):
            await self._forward_backward(scope, receive, send)
        elif method == "POST" and path == "/api/v1/asample":
            await self._asample(receive, scope, send)
        elif method == "POST" and path == "/api/v1/retrieve_future":
            await self._retrieve_future(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _sampler(self, sampler_id: str, send: Send) -> None:
        assert self.sampler_lookup is not None
        found = await self.sampler_lookup(sampler_id)
        if found is None:
            await _send_json(send, 404, {"detail": f"Sampling session not found: {sampler_id}"})
        else:
            await _send_json(send, 200, found)

    async def _forward_backward(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        try:
            route, payload = forward_backward_json(
                body, self.pb2, _header(scope, b"content-encoding").lower()
            )
        except CompatError as exc:
            await _send_json(send, 400, {"detail": str(exc)})
            return
        except Exception as exc:  # a body we cannot read: a clear 400, never a crash of the server
            await _send_json(send, 400, {"detail": f"cannot translate the protobuf request: {exc}"})
            return
        if compat_losses.is_custom_loss_backward(route, payload):
            try:
                payload = await self._as_tx_can_train(scope, payload)
            except compat_losses.CustomLossError as exc:
                await _send_json(send, 400, {"detail": str(exc)})
                return
        data = json.dumps(payload).encode()
        await self.app(_json_scope(scope, route, data), _replay(data), send)

    async def _call_app(self, scope: Scope, route: str, payload: Any) -> tuple[int, Any]:
        """One JSON request to tx's own app, in process: (status, JSON body or None)."""
        data = json.dumps(payload).encode()
        status, chunks = 500, []

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(_json_scope(scope, route, data), _replay(data), capture)
        return status, _json_or_none(b"".join(chunks))

    async def _as_tx_can_train(self, scope: Scope, payload: dict[str, Any]) -> dict[str, Any]:
        """A custom loss's backward as tx trains it right (compat_losses): a forward of the same data first, waited
        for here, so the backward reaches tx only once its log-probs are known."""
        status, future = await self._call_app(
            scope, compat_losses.FORWARD_ROUTE, compat_losses.forward_of(payload)
        )
        if status != 200 or not isinstance(future, dict):
            raise compat_losses.CustomLossError(
                f"the forward before a custom loss's backward failed: {future}"
            )
        status, result = 408, None
        for _ in range(
            compat_losses.FORWARD_WAITS
        ):  # 408: tx's own 5-min wait ran out, the forward still queued
            status, result = await self._call_app(
                scope, compat_losses.RETRIEVE_ROUTE, {"request_id": future["request_id"]}
            )
            if status != 408:
                break
        if status != 200:
            raise compat_losses.CustomLossError(
                f"the forward before a custom loss's backward failed: {result}"
            )
        return compat_losses.as_importance_sampling(payload, compat_losses.logprobs_of(result, payload))

    async def _asample(self, receive: Receive, scope: Scope, send: Send) -> None:
        body = await _read_body(receive)
        try:
            num_samples = int(json.loads(body or b"{}").get("num_samples", 1))
        except (ValueError, TypeError, AttributeError):
            num_samples = 1
        await self.app(scope, _replay(body), _rewrite_json(send, lambda r: with_sequence_ids(r, num_samples)))

    async def _retrieve_future(self, scope: Scope, receive: Receive, send: Send) -> None:
        wants_proto = PROTO_CONTENT_TYPE in _header(scope, b"accept")

        def respond(start: Message, out: bytes) -> tuple[bytes, list[Any]]:
            headers = list(start.get("headers", []))
            if start["status"] != 200:
                return out, headers
            result = _json_or_none(out)
            proto = result_proto(result, self.pb2) if wants_proto else None
            if proto is not None:
                headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]
                headers.append((b"content-type", PROTO_CONTENT_TYPE.encode()))
                return proto, headers
            if not wants_proto and sampler_path_fixed(result):
                out = json.dumps(result).encode()
            return out, headers

        await self.app(scope, receive, _whole_response(send, respond))


def _sampler_lookup_for(app: Any) -> SamplerLookup:
    """Reads a sampling session from tx's own database (the app's engine, created in its lifespan)."""

    async def lookup(sampler_id: str) -> dict[str, Any] | None:
        from sqlmodel.ext.asyncio.session import AsyncSession
        from tx.tinker.db_models import SamplingSessionDB

        async with AsyncSession(app.state.db_engine) as session:
            row = await session.get(SamplingSessionDB, sampler_id)
        if row is None:
            return None
        base_model = row.base_model
        if base_model is None:
            base_model = app.state.engine_config.base_model  # one base model per tx server
        return {"sampler_id": sampler_id, "base_model": base_model, "model_path": row.model_path}

    return lookup


def main(argv: list[str] | None = None) -> None:
    """`python compat.py --tinker-proto PATH <tx.tinker.api arguments>`: tx's own entry point, wrapped."""
    import uvicorn
    from tx.tinker import api
    from tx.tinker.config import EngineConfig, add_model
    from tx.utils.log import get_uvicorn_log_config

    parser = argparse.ArgumentParser(
        description="SkyRL tx Tinker API server behind machine-lsp's compat layer"
    )
    add_model(parser, EngineConfig)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tinker-proto", required=True, help="path of tinker/proto/tinker_public_pb2.py")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit(f"refusing to bind {args.host}: this server has no authentication; bind 127.0.0.1")
    api.app.state.engine_config = EngineConfig.model_validate(
        {k: v for k, v in vars(args).items() if k in EngineConfig.model_fields}
    )
    app = TinkerCompat(api.app, load_proto_module(args.tinker_proto), _sampler_lookup_for(api.app))
    uvicorn.run(app, host=args.host, port=args.port, log_config=get_uvicorn_log_config())


if __name__ == "__main__":
    main()
