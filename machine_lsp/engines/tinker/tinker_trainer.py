"""Training and sampling on Tinker clients: `TinkerTrainer` (the pipelined step, Adam settings, checkpoints saved
as training state and sampler weights together), `TinkerPendingStep` and `TinkerSampler` (greedy, all prompts
submitted at once). `tinker_engine.TinkerEngine` creates them; they reach the service only through the small
`TinkerConnection` it satisfies.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from machine_lsp.engines import render
from machine_lsp.engines.base import EngineError, OptimizerSettings, StepStats
from machine_lsp.engines.objectives import Objective, spec_for
from machine_lsp.engines.tinker.tinker_service import (
    NOT_LOADED,
    bounded_call,
    translate_error,
    wait_future,
)

if TYPE_CHECKING:  # pragma: no cover
    import tinker

    from machine_lsp.core.schema import Message

T = TypeVar("T")


class TinkerConnection(Protocol):
    """What the trainer and the sampler use of `TinkerEngine` (declared here so this module does not import it)."""

    service_url: str  # what the SDK is given
    base_url: str  # what is printed and recorded: no credentials
    call_timeout: float

    def reload_checkpoint(self, checkpoint: str) -> Any: ...


def _custom(objective: Objective | None) -> bool:
    """True when `objective` is a log-prob loss (DPO, KTO) rather than Tinker's built-in cross-entropy."""
    return objective is not None and spec_for(objective).builtin is None


def _adam_params(settings: OptimizerSettings, learning_rate: float) -> Any:
    import tinker

    return tinker.AdamParams(
        learning_rate=learning_rate, beta1=settings.beta1, beta2=settings.beta2, eps=settings.eps
    )


@dataclass(eq=False)
class TinkerPendingStep:
    """A step on Tinker: its `forward_backward` and `optim_step` futures, both already submitted."""

    trainer: TinkerTrainer
    data: list[tinker.Datum]
    fwd_bwd: Any
    optim: Any
    objective: Objective | None = None
    submitted: float = field(default_factory=time.perf_counter, init=False)
    _stats: StepStats | None = field(default=None, init=False)

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
        engine: TinkerConnection,
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
        return bounded_call(fn, self.engine.call_timeout, what, self.engine.base_url)

    def _submit(self, submit: Callable[[], Any], what: str) -> Any:
        """An SDK call that returns its future at once (no network wait in this thread)."""
        try:
            return submit()
        except Exception as exc:
            raise translate_error(exc, what, self.engine.base_url) from None

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
            from machine_lsp.engines.tinker.tinker_objectives import loss_and_metrics

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
            from machine_lsp.engines.tinker.tinker_objectives import submit_objective_step

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
        self, engine: TinkerConnection, renderer: Any, client: Any, checkpoint: str | None = None
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
            return bounded_call(run, timeout, "sample", self.engine.base_url)
        except Exception as exc:  # the SDK reports it as a ValueError (HTTP 400 from retrieve_future)
            if self.checkpoint is None or NOT_LOADED not in str(exc):
                raise
        self.client = self.engine.reload_checkpoint(self.checkpoint)  # once: a second failure is reported
        self.checkpoint = None
        return bounded_call(run, timeout, "sample", self.engine.base_url)
