"""The Tinker engine: LoRA SFT and sampling on the hosted Tinker service through the `tinker` SDK. The service
(preflight, bounded calls, errors, checkpoint paths) is `tinker_service.py`; the trainer, its pending step and the
sampler are `tinker_trainer.py`; this module ties them into the `Engine`.

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

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine_lsp.core.redact import redact_url
from machine_lsp.core.runs import process_started_monotonic
from machine_lsp.engines import render
from machine_lsp.engines.base import EngineError, LoraSettings
from machine_lsp.engines.registry import engine_spec
from machine_lsp.engines.tinker.tinker_service import (  # re-exported: the engine's public names before the split
    CALL_TIMEOUT_S,
    CREATE_TIMEOUT_S,
    KEY_ENV,
    LOCAL_PLACEHOLDER_KEY,
    PREFLIGHT_TIMEOUT_S,
    PreflightResult,
    TinkerUnavailable,
    bounded_call,
    check_key_format,
    check_reachable,
    preflight,
    sampler_path_for,
    split_tinker_path,
    state_path_for,
    wait_future,
)
from machine_lsp.engines.tinker.tinker_trainer import TinkerPendingStep, TinkerSampler, TinkerTrainer
from machine_lsp.engines.tinker.tinker_url import URL_ENV, is_local_url, resolve_base_url

DEFAULT_MODEL = engine_spec("tinker").default_model

__all__ = [
    "CALL_TIMEOUT_S",
    "CREATE_TIMEOUT_S",
    "DEFAULT_MODEL",
    "KEY_ENV",
    "LOCAL_PLACEHOLDER_KEY",
    "PREFLIGHT_TIMEOUT_S",
    "URL_ENV",
    "PreflightResult",
    "TinkerEngine",
    "TinkerPendingStep",
    "TinkerSampler",
    "TinkerTrainer",
    "TinkerUnavailable",
    "check_key_format",
    "check_reachable",
    "preflight",
    "sampler_path_for",
    "split_tinker_path",
    "state_path_for",
    "wait_future",
]


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

            self._service = bounded_call(
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
                client = bounded_call(
                    lambda: service.create_training_client_from_state_with_optimizer(state).result(),
                    self.create_timeout,
                    "load checkpoint",
                    self.base_url,
                )
            except EngineError as exc:
                if "HTTP 422" not in str(exc):
                    raise
                # SkyRL tx 0.3.0 wants a model id in load_weights (422): create a client, load the state into it.
                client = bounded_call(
                    lambda: service.create_lora_training_client(base_model=model, rank=lora.rank).result(),
                    self.create_timeout,
                    "create training client",
                    self.base_url,
                )
                bounded_call(
                    lambda: client.load_state_with_optimizer(state).result(),
                    self.create_timeout,
                    "load checkpoint",
                    self.base_url,
                )
        else:
            self._say(f"creating a LoRA training client for {model} (rank {lora.rank})")
            client = bounded_call(
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
            client = bounded_call(
                lambda: service.create_sampling_client(base_model=model).result(),
                self.create_timeout,
                "create sampling client",
                self.base_url,
            )
        else:
            client = bounded_call(
                lambda: service.create_sampling_client(model_path=checkpoint).result(),
                self.create_timeout,
                "create sampling client",
                self.base_url,
            )
        return TinkerSampler(self, renderer, client, checkpoint)

    def scorer_for(self, model: str, checkpoint: str | None) -> Any:
        """Completion log-probs under `checkpoint` and the base model (held-out preference evals)."""
        from machine_lsp.engines.tinker.tinker_objectives import TinkerScorer

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

        return bounded_call(load, self.create_timeout, "reload checkpoint", self.base_url)
