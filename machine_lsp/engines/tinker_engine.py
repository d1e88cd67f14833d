"""The Tinker engine: LoRA SFT and sampling on the hosted Tinker service through the `tinker` SDK.

* Credentials: `TINKER_API_KEY` (or the SDK's own stored login), service URL `TINKER_BASE_URL` (or the SDK default).
  The key is read by the SDK only; this module never prints, logs or stores it (errors name the variable).
* Base model: `thinkingmachines/Inkling-Small` by default, rendered with the cookbook's recommended renderer
  (`tml_v0`; its tokenizer ships with `tml-renderers`, so rendering works offline).
* Data: the same `tinker.Datum`s as the local engine (`machine_lsp.engines.render`). SFT (the default objective)
  sends the `cross_entropy` loss and reports the cookbook's `compute_mean_nll` (sum(w * -logp) / sum(w)); DPO and
  KTO go through `forward_backward_custom` (`tinker_objectives.py`).
* Time bounds: with a key set and the service unreachable the SDK blocks for minutes in nested retries. Every SDK
  call that can block before returning a future (session and client creation, sampling) runs in a worker thread
  with a deadline; training calls wait on the SDK future's own `result(timeout=)`, with no thread. `preflight()` answers within
  `preflight_timeout` seconds (20 s by default) whether the key is missing or malformed, the service refuses connections or does not answer,
  or it rejects the key. A call that times out leaves its daemon thread behind: job processes end with `os._exit`.
* The step, pipelined like `tinker_cookbook.supervised.train`: `submit_step` sends `forward_backward` and
  `optim_step` back to back and returns a `TinkerPendingStep` at once (the SDK runs one client's requests in
  submission order), so the job loop submits step n+1 before it waits on step n. Adam settings come from
  `LoraSettings.optimizer` (machine.toml), the same the local engine uses.
* Checkpoints: `save(name, ttl_seconds=)` submits the training state (`tinker://<run>/weights/<name>`, used by
  `--resume`) and the sampler weights (`tinker://<run>/sampler_weights/<name>`, the returned address, used by
  evals) together, then waits on both; `ttl_seconds` lets the service delete an intermediate checkpoint.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from machine_lsp.core.redact import redact_url, redact_urls
from machine_lsp.core.runs import process_started_monotonic
from machine_lsp.engines import render
from machine_lsp.engines.base import TINKER_SCHEME, EngineError, LoraSettings, OptimizerSettings, StepStats
from machine_lsp.engines.objectives import Objective, spec_for
from machine_lsp.engines.tinker_url import URL_ENV, is_local_url, resolve_base_url

if TYPE_CHECKING:  # pragma: no cover
    import tinker

    from machine_lsp.core.schema import Message

DEFAULT_MODEL = "thinkingmachines/Inkling-Small"
KEY_ENV = "TINKER_API_KEY"
PREFLIGHT_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 600.0  # one forward_backward / optim_step / save on a healthy service
CREATE_TIMEOUT_S = 900.0  # model creation can queue
LIVENESS_CHECK_S = 5.0  # a call in flight checks this often that the server still accepts connections
NOT_LOADED = " not loaded"  # SkyRL tx: "Model <run> not loaded", a checkpoint whose run lost its adapter
LOCAL_PLACEHOLDER_KEY = "tml-local-server"  # not a secret: a local server ignores it

T = TypeVar("T")


class TinkerUnavailable(EngineError):
    """The Tinker service cannot be used right now (no key, bad key, unreachable, rejected)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # missing-key | bad-key | refused | unresolvable | timeout | rejected | error


class PreflightResult(msgspec.Struct):
    base_url: str
    seconds: float
    models: list[str] | None = None


def _scrub(text: str) -> str:
    """Remove the API key from a message, should an exception ever carry it."""
    key = os.environ.get(KEY_ENV)
    if key and len(key) >= 4:
        text = text.replace(key, "<redacted>")
    return redact_urls(text)  # and credentials in a URL (TINKER_BASE_URL=https://user:secret@host)


def _bounded(fn: Callable[[], T], timeout: float, what: str, url: str) -> T:
    """Run a blocking SDK call in a daemon thread; raise TinkerUnavailable(timeout) if it does not finish in time."""
    url = redact_url(url)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"tinker-{what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TinkerUnavailable(
            f"Tinker at {url} did not answer within {timeout:.0f} s ({what}); check the network and "
            f"{URL_ENV}, or try again later",
            "timeout",
        )
    if "error" in box:
        raise _translate(box["error"], what, url) from None
    return box["value"]


def _translate(exc: BaseException, what: str, url: str) -> BaseException:
    """SDK exceptions -> precise, key-free TinkerUnavailable/EngineError; anything else unchanged."""
    url = redact_url(url)
    if isinstance(exc, EngineError):
        return exc
    try:
        import tinker
    except ImportError:  # pragma: no cover - tinker is a dependency
        return exc
    message = _scrub(str(exc))
    if isinstance(exc, tinker.AuthenticationError | tinker.PermissionDeniedError):
        return TinkerUnavailable(
            f"Tinker at {url} rejected the API key in {KEY_ENV} ({what}: HTTP {exc.status_code}); "
            "check the key (tinker auth login, or the console)",
            "rejected",
        )
    if isinstance(exc, tinker.APIConnectionError):
        return TinkerUnavailable(f"cannot reach Tinker at {url} ({what}): {message}", "refused")
    if isinstance(exc, tinker.APIStatusError):
        return EngineError(f"Tinker {what} failed with HTTP {exc.status_code}: {message}")
    if isinstance(exc, tinker.TinkerError):
        lowered = message.lower()
        if "api_key" in lowered and "must be set" in lowered:
            return TinkerUnavailable(
                f"no Tinker API key: set {KEY_ENV} (a key starting with 'tml-') or run `tinker auth login`; "
                "or use --engine local, which needs no key",
                "missing-key",
            )
        if "tml-" in lowered and "prefix" in lowered:
            return TinkerUnavailable(
                f"{KEY_ENV} is set but is not a Tinker API key (keys start with 'tml-')", "bad-key"
            )
        return EngineError(f"Tinker {what} failed: {message}")
    return exc


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """A TCP connection to the service's host and port, so a dead endpoint is reported in seconds."""
    parsed = urllib.parse.urlparse(url)
    url = redact_url(url)  # for the messages below
    if parsed.scheme not in {"http", "https"} or not parsed.hostname:
        raise TinkerUnavailable(f"{URL_ENV}={url!r} is not an http(s) URL", "error")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return
    except ConnectionRefusedError:
        raise TinkerUnavailable(
            f"cannot reach Tinker at {url}: connection refused on {parsed.hostname}:{port} "
            f"(is {URL_ENV} right and the service running?)",
            "refused",
        ) from None
    except socket.gaierror as exc:
        raise TinkerUnavailable(
            f"cannot reach Tinker at {url}: host {parsed.hostname!r} does not resolve ({exc.strerror})",
            "unresolvable",
        ) from None
    except TimeoutError:
        raise TinkerUnavailable(
            f"cannot reach Tinker at {url}: no TCP answer from {parsed.hostname}:{port} within {timeout:.0f} s",
            "timeout",
        ) from None
    except OSError as exc:
        raise TinkerUnavailable(f"cannot reach Tinker at {url}: {exc.strerror or exc}", "refused") from None


def check_key_format() -> None:
    """A set key must look like a Tinker key; an unset key is left to the SDK (it may use a stored login)."""
    key = os.environ.get(KEY_ENV)
    if key is None:
        return
    if not key.strip():
        raise TinkerUnavailable(f"{KEY_ENV} is set but empty", "bad-key")
    if not (key.startswith("tml-") or key.startswith("eyJ")):
        raise TinkerUnavailable(
            f"{KEY_ENV} is set but is not a Tinker API key (keys start with 'tml-')", "bad-key"
        )


def preflight(
    url: str | None = None, timeout: float = PREFLIGHT_TIMEOUT_S, started: float | None = None
) -> PreflightResult:
    """Check, within `timeout` seconds of `started` (a time.monotonic() value, default now), that training on
    Tinker can start; raise TinkerUnavailable otherwise.

    Order: key format; the SDK's own credential resolution (missing key fails there at once, before any network);
    a TCP connection to the endpoint; then one authenticated request (the server's capabilities).
    """
    started = time.monotonic() if started is None else started
    url = resolve_base_url(url)
    shown = redact_url(url)
    check_key_format()
    import tinker

    deadline = started + timeout
    box: dict[str, Any] = {}

    def call() -> list[str]:
        client = tinker.RestClient(base_url=url)
        caps = client.get_server_capabilities().result()
        return [m.model_name for m in caps.supported_models if m.model_name]

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    worker = threading.Thread(target=target, name="tinker-preflight", daemon=True)
    worker.start()
    worker.join(min(1.0, timeout / 4))  # credential errors surface here, before any network
    if "error" in box:
        raise _translate(box["error"], "preflight", shown) from None
    if worker.is_alive():
        check_reachable(url, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        raise TinkerUnavailable(
            f"Tinker at {shown} accepted a connection but did not answer within {timeout:.0f} s; "
            "the service may be down or overloaded, try again later",
            "timeout",
        )
    if "error" in box:
        raise _translate(box["error"], "preflight", shown) from None
    return PreflightResult(base_url=shown, seconds=time.monotonic() - started, models=box.get("value"))


def wait_future(future: Any, timeout: float, what: str, service_url: str) -> Any:
    """An SDK future's result, waited on with its own `result(timeout=)` in slices of LIVENESS_CHECK_S.

    Between slices the server must still accept TCP connections: the SDK retries a refused connection for
    minutes (nested retries), so a server that died mid-call (a crash, `machine tinker stop`, a reboot) would
    otherwise hold the job for up to `timeout`. A server that is alive but busy (compiling a new shape) still
    accepts connections and is waited for. Raises TinkerUnavailable (timeout | refused | ...) or EngineError.
    """
    url = redact_url(service_url)
    deadline = time.monotonic() + timeout
    misses = 0  # consecutive failed connection checks: two in a row (>= LIVENESS_CHECK_S apart) end the wait
    while True:
        remaining = deadline - time.monotonic()
        try:
            return future.result(timeout=max(0.0, min(LIVENESS_CHECK_S, remaining)))
        except (TimeoutError, concurrent.futures.TimeoutError):
            if remaining <= LIVENESS_CHECK_S:
                raise TinkerUnavailable(
                    f"Tinker at {url} did not finish {what} within {timeout:.0f} s", "timeout"
                ) from None
        except Exception as exc:
            raise _translate(exc, what, url) from None
        try:
            check_reachable(service_url, timeout=LIVENESS_CHECK_S)
            misses = 0
        except TinkerUnavailable as exc:
            misses += 1
            if misses >= 2:
                detail = str(exc).split(": ", 1)[-1]
                raise TinkerUnavailable(
                    f"lost the Tinker server at {url} during {what}: {detail}", exc.reason
                ) from None


def split_tinker_path(address: str) -> tuple[str, str, str]:
    """`tinker://<run>/<kind>/<name>` -> (run, kind, name); precise error otherwise."""
    if not address.startswith(TINKER_SCHEME):
        raise EngineError(
            f"not a Tinker checkpoint address: {address!r} (expected tinker://<run>/<kind>/<name>)"
        )
    parts = address[len(TINKER_SCHEME) :].split("/")
    if len(parts) != 3 or not all(parts) or parts[1] not in {"weights", "sampler_weights"}:
        raise EngineError(
            f"malformed Tinker checkpoint address {address!r}: expected tinker://<run>/weights/<name> "
            "or tinker://<run>/sampler_weights/<name>"
        )
    return parts[0], parts[1], parts[2]


def state_path_for(address: str) -> str:
    """The training-state path (for resume) of a checkpoint saved by `TinkerTrainer.save`."""
    run, _, name = split_tinker_path(address)
    return f"{TINKER_SCHEME}{run}/weights/{name}"


def sampler_path_for(address: str) -> str:
    run, _, name = split_tinker_path(address)
    return f"{TINKER_SCHEME}{run}/sampler_weights/{name}"


class TinkerEngine:
    """`Engine` implementation on the Tinker service."""

    name = "tinker"
    default_model = DEFAULT_MODEL

    def __init__(
        self,
        *,
        base_url: str | None = None,
        preflight_timeout: float = PREFLIGHT_TIMEOUT_S,
        call_timeout: float = CALL_TIMEOUT_S,
        create_timeout: float = CREATE_TIMEOUT_S,
        renderer: str | None = None,
        skip_preflight: bool = False,
        progress: Callable[[str], None] | None = None,
        **_ignored: Any,
    ) -> None:
        os.environ.setdefault("TINKER_TELEMETRY", "0")
        self.service_url = resolve_base_url(base_url)  # what the SDK is given
        self.base_url = redact_url(self.service_url)  # what is printed and recorded: no credentials
        if is_local_url(self.service_url):
            # The SDK requires a `tml-` key before any request; a local SkyRL tx server checks none.
            os.environ.setdefault(KEY_ENV, LOCAL_PLACEHOLDER_KEY)
        self.served_models: list[str] | None = None
        self.preflight_timeout = preflight_timeout
        self.call_timeout = call_timeout
        self.create_timeout = create_timeout
        self.renderer_override = renderer
        self.progress = progress
        self._checked = skip_preflight
        self._service: Any = None

    # -- models ---------------------------------------------------------------------------------------------

    def resolve_model(self, model: str) -> str:
        """The hosted default model on a server that does not serve it (a self-hosted one): the one it serves."""
        served = self.served_models
        if model == DEFAULT_MODEL and served and DEFAULT_MODEL not in served:
            return served[0]
        return model

    def renderer_name(self, model: str) -> str:
        return self.renderer_override or render.renderer_name_for(self.resolve_model(model))

    def tokenizer(self, model: str) -> Any:
        return render.load_tokenizer(self.resolve_model(model))

    def renderer(self, model: str) -> Any:
        _, renderer = render.load_tokenizer_and_renderer(self.resolve_model(model), self.renderer_override)
        return renderer

    # -- service --------------------------------------------------------------------------------------------

    def preflight(self, *, from_process_start: bool = True) -> PreflightResult:
        # Called at a job's start: the promised bound counts from the job process's start (its start-up too).
        started = process_started_monotonic() if from_process_start else None
        result = preflight(self.service_url, self.preflight_timeout, started=started)
        self._checked = True
        self.served_models = result.models
        return result

    def service(self) -> Any:
        if not self._checked:
            self.preflight(from_process_start=False)
        if self._service is None:
            import tinker

            self._service = _bounded(
                lambda: tinker.ServiceClient(base_url=self.service_url),
                self.preflight_timeout,
                "session",
                self.base_url,
            )
        return self._service

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    def create_trainer(
        self, model: str, lora: LoraSettings, run_dir: Path, *, resume_from: str | None = None
    ) -> TinkerTrainer:
        renderer = self.renderer(model)  # offline errors (unknown model, renderer) before any network call
        service = self.service()
        model = self.resolve_model(model)
        if resume_from is not None:
            state = state_path_for(resume_from)
            self._say(f"loading Tinker state {state}")
            try:
                client = _bounded(
                    lambda: service.create_training_client_from_state_with_optimizer(state).result(),
                    self.create_timeout,
                    "load checkpoint",
                    self.base_url,
                )
            except EngineError as exc:
                if "HTTP 422" not in str(exc):
                    raise
                # SkyRL tx 0.3.0 wants a model id in load_weights (422): create a client, load the state into it.
                client = _bounded(
                    lambda: service.create_lora_training_client(base_model=model, rank=lora.rank).result(),
                    self.create_timeout,
                    "create training client",
                    self.base_url,
                )
                _bounded(
                    lambda: client.load_state_with_optimizer(state).result(),
                    self.create_timeout,
                    "load checkpoint",
                    self.base_url,
                )
        else:
            self._say(f"creating a LoRA training client for {model} (rank {lora.rank})")
            client = _bounded(
                lambda: service.create_lora_training_client(base_model=model, rank=lora.rank).result(),
                self.create_timeout,
                "create training client",
                self.base_url,
            )
        return TinkerTrainer(self, model, renderer, client, run_dir, lora.optimizer)

    def sampler_for(self, model: str, checkpoint: str | None) -> TinkerSampler:
        renderer = self.renderer(model)
        if checkpoint is not None:
            checkpoint = sampler_path_for(checkpoint)
        service = self.service()
        model = self.resolve_model(model)
        if checkpoint is None:
            client = _bounded(
                lambda: service.create_sampling_client(base_model=model).result(),
                self.create_timeout,
                "create sampling client",
                self.base_url,
            )
        else:
            client = _bounded(
                lambda: service.create_sampling_client(model_path=checkpoint).result(),
                self.create_timeout,
                "create sampling client",
                self.base_url,
            )
        return TinkerSampler(self, renderer, client, checkpoint)

    def scorer_for(self, model: str, checkpoint: str | None) -> Any:
        """Completion log-probs under `checkpoint` and the base model (held-out preference evals)."""
        from machine_lsp.engines.tinker_objectives import TinkerScorer

        policy = self.sampler_for(model, checkpoint).client
        return TinkerScorer(
            self, policy, policy if checkpoint is None else self.sampler_for(model, None).client
        )

    def reload_checkpoint(self, checkpoint: str) -> Any:
        """A sampling client for `checkpoint` rebuilt from its training state, in a fresh LoRA adapter.

        SkyRL tx samples a checkpoint only while the run that saved it still holds its adapter: it frees it 5 min
        after that run's client stops (session timeout) and holds none after a restart ("Model ... not loaded").
        Our runs and the cookbook save the training state under the sampler checkpoint's name; that state (its
        rank and base model from the server's weights_info) is loaded into a new client and sampled from.
        """
        service = self.service()
        state = state_path_for(checkpoint)
        self._say(f"the server no longer holds {checkpoint}; loading {state} into a new adapter")

        def load() -> Any:
            info = service.create_rest_client().get_weights_info_by_tinker_path(state).result()
            client = service.create_lora_training_client(
                base_model=info.base_model, rank=info.lora_rank or 32
            ).result()
            client.load_state(state).result()
            return client.save_weights_and_get_sampling_client().result()

        return _bounded(load, self.create_timeout, "reload checkpoint", self.base_url)


def _custom(objective: Objective | None) -> bool:
    """True when `objective` is a log-prob loss (DPO, KTO) rather than Tinker's built-in cross-entropy."""
    return objective is not None and spec_for(objective).builtin is None


def _adam_params(settings: OptimizerSettings, learning_rate: float) -> Any:
    import tinker

    return tinker.AdamParams(
        learning_rate=learning_rate, beta1=settings.beta1, beta2=settings.beta2, eps=settings.eps
    )


class TinkerPendingStep:
    """A step on Tinker: its `forward_backward` and `optim_step` futures, both already submitted."""

    def __init__(
        self,
        trainer: TinkerTrainer,
        data: list[tinker.Datum],
        fwd_bwd: Any,
        optim: Any,
        objective: Objective | None = None,
    ) -> None:
        self.trainer = trainer
        self.data = data
        self.objective = objective
        self.fwd_bwd = fwd_bwd
        self.optim = optim
        self.submitted = time.perf_counter()
        self._stats: StepStats | None = None

    def done(self) -> bool:
        return self._stats is not None or all(f.future().done() for f in (self.fwd_bwd, self.optim))

    def result(self, timeout: float | None = None) -> StepStats:
        """Both futures' own `result(timeout=)`, in the order the service runs them; the loss as the cookbook's."""
        if self._stats is None:
            wait = self.trainer.wait
            out = wait(self.fwd_bwd, "forward_backward", timeout)
            wait(self.optim, "optim_step", timeout)
            self._stats = self.trainer.stats(self.data, out, self.submitted, self.objective)
        return self._stats


class TinkerTrainer:
    """`Trainer` on a Tinker `TrainingClient`."""

    def __init__(
        self,
        engine: TinkerEngine,
        model: str,
        renderer: Any,
        client: Any,
        run_dir: Path,
        optimizer: OptimizerSettings | None = None,
    ) -> None:
        self.engine = engine
        self.model_name = model
        self.renderer = renderer
        self.client = client
        self.run_dir = Path(run_dir)
        self.optimizer = optimizer or OptimizerSettings()
        self.last_state_path: str | None = None
        self._reference: Any = None

    def reference_client(self) -> Any:
        """The reference for log-prob objectives: the weights when it is first asked for (the run's start)."""
        if self._reference is None:
            self._reference = self._call(
                lambda: self.client.save_weights_and_get_sampling_client().result(),
                "reference sampling client",
            )
        return self._reference

    def freeze_reference(self) -> None:
        """The next log-prob step takes the weights it finds as its reference (`reference_client`)."""
        self._reference = None

    def _call(self, fn: Callable[[], T], what: str) -> T:
        return _bounded(fn, self.engine.call_timeout, what, self.engine.base_url)

    def _submit(self, submit: Callable[[], Any], what: str) -> Any:
        """An SDK call that returns its future at once (no network wait in this thread)."""
        try:
            return submit()
        except Exception as exc:
            raise _translate(exc, what, self.engine.base_url) from None

    def wait(self, future: Any, what: str, timeout: float | None = None) -> Any:
        """The SDK future's own `result(timeout=)` (the engine's call bound by default), in slices that check the
        server is still there (`wait_future`): a dead server ends the wait in seconds. No thread."""
        engine = self.engine
        timeout = engine.call_timeout if timeout is None else timeout
        return wait_future(future, timeout, what, engine.service_url)

    def _wait(self, submit: Callable[[], Any], what: str) -> Any:
        return self.wait(self._submit(submit, what), what)

    def stats(
        self, data: list[tinker.Datum], out: Any, started: float, objective: Objective | None = None
    ) -> StepStats:
        from tinker_cookbook.supervised.common import compute_mean_nll

        metrics: dict[str, float] = {}
        if _custom(objective):
            from machine_lsp.engines.tinker_objectives import loss_and_metrics

            loss, metrics = loss_and_metrics(objective, out)  # type: ignore[arg-type]
        else:
            logprobs = [o["logprobs"] for o in out.loss_fn_outputs]
            loss = compute_mean_nll(logprobs, [d.loss_fn_inputs["weights"] for d in data])
        if not math.isfinite(loss):
            raise EngineError(f"Tinker returned a non-finite loss ({loss})")
        counts = render.count_tokens(data)
        return StepStats(
            loss=loss,
            tokens=counts.tokens,
            trained_tokens=counts.trained,
            seconds=time.perf_counter() - started,
            metrics=metrics,
        )

    def _data(self, batch: Sequence[tinker.Datum]) -> list[tinker.Datum]:
        data = list(batch)
        if not data:
            raise EngineError("forward_backward needs at least one datum")
        return data

    def _submit_loss(self, data: list[tinker.Datum], objective: Objective | None) -> Any:
        """The forward_backward future of `objective`: SFT's built-in `cross_entropy`, else the cookbook's
        forward_backward_custom with the objective's loss (tinker_objectives.py)."""
        if _custom(objective):
            from machine_lsp.engines.tinker_objectives import submit_objective_step

            return submit_objective_step(self, data, objective)  # type: ignore[arg-type]
        return self._submit(lambda: self.client.forward_backward(data, "cross_entropy"), "forward_backward")

    def forward_backward(
        self, batch: Sequence[tinker.Datum], objective: Objective | None = None
    ) -> StepStats:
        data = self._data(batch)
        started = time.perf_counter()
        out = self.wait(self._submit_loss(data, objective), "forward_backward")
        return self.stats(data, out, started, objective)

    def optim_step(self, learning_rate: float) -> None:
        params = _adam_params(self.optimizer, learning_rate)
        self._wait(lambda: self.client.optim_step(params), "optim_step")

    def submit_step(
        self, batch: Sequence[tinker.Datum], learning_rate: float, objective: Objective | None = None
    ) -> TinkerPendingStep:
        """`forward_backward` and `optim_step` submitted back to back; nothing is awaited here (a log-prob
        objective awaits its reference log-probs first: its loss needs them)."""
        data = self._data(batch)
        params = _adam_params(self.optimizer, learning_rate)
        fwd_bwd = self._submit_loss(data, objective)
        optim = self._submit(lambda: self.client.optim_step(params), "optim_step")
        return TinkerPendingStep(self, data, fwd_bwd, optim, objective)

    def save(self, name: str, *, ttl_seconds: int | None = None) -> str:
        """Training state (for resume) and sampler weights, submitted together; returns the sampler address."""
        state = self._submit(lambda: self.client.save_state(name, ttl_seconds=ttl_seconds), "save_state")
        sampler = self._submit(
            lambda: self.client.save_weights_for_sampler(name, ttl_seconds=ttl_seconds), "save_weights"
        )
        self.last_state_path = self.wait(state, "save_state").path
        return str(self.wait(sampler, "save_weights").path)

    def sampler(self) -> TinkerSampler:
        client = self._call(
            lambda: self.client.save_weights_and_get_sampling_client().result(), "sampling client"
        )
        return TinkerSampler(self.engine, self.renderer, client)


class TinkerSampler:
    """Greedy sampling on a Tinker `SamplingClient`: all prompts submitted at once, then collected."""

    def __init__(
        self, engine: TinkerEngine, renderer: Any, client: Any, checkpoint: str | None = None
    ) -> None:
        self.engine = engine
        self.renderer = renderer
        self.client = client
        self.checkpoint = checkpoint  # a saved checkpoint (not a live snapshot): reloadable from its state

    def prompt(self, messages: Sequence[Message]) -> Any:
        return self.renderer.build_generation_prompt(render.cookbook_messages(messages))

    def sample(self, prompts: Sequence[Sequence[Message]], max_tokens: int) -> list[str]:
        import tinker
        from tinker_cookbook import renderers

        params = tinker.SamplingParams(
            max_tokens=max_tokens, temperature=0.0, stop=self.renderer.get_stop_sequences()
        )
        inputs = [self.prompt(p) for p in prompts]

        def run() -> list[str]:
            futures = [self.client.sample(prompt=mi, num_samples=1, sampling_params=params) for mi in inputs]
            texts = []
            for fut in futures:
                tokens = fut.result().sequences[0].tokens
                message, _ok = self.renderer.parse_response(tokens)
                texts.append(renderers.get_text_content(message))
            return texts

        timeout = self.engine.call_timeout + 5 * len(inputs)
        try:
            return _bounded(run, timeout, "sample", self.engine.base_url)
        except Exception as exc:  # the SDK reports it as a ValueError (HTTP 400 from retrieve_future)
            if self.checkpoint is None or NOT_LOADED not in str(exc):
                raise
        self.client = self.engine.reload_checkpoint(self.checkpoint)  # once: a second failure is reported
        self.checkpoint = None
        return _bounded(run, timeout, "sample", self.engine.base_url)
