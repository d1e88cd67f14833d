"""The serving engine: one model in memory, concurrent requests decoded together in waves, tokens streamed.

* Loading goes through the engines' public API (`LocalEngine.sampler_for`: SmolLM2 or a local HF directory, with a
  `local://` adapter resolved and checked against its base model), then the LoRA adapter is merged into the base
  weights (`merge_and_unload`) so every decode step is one plain forward pass instead of base + adapter matmuls.
* A single worker thread owns the model (torch is not asked to run two forwards at once). Requests wait in a queue;
  when the thread is free it waits `collect_s` for more to arrive, then takes up to `max_batch` whose left-padded
  prompt block fits `max_prefill_tokens`, prefills them together and decodes them together with one KV cache.
  Finished, cancelled and stopped rows leave the batch at once (`DynamicCache.batch_select_indices`); requests that
  arrive during a wave wait for the next one.
* Each token is handed to the request's asyncio queue with `loop.call_soon_threadsafe`, so the HTTP side streams
  while the thread keeps decoding. A client that goes away sets `cancelled`; its row is dropped at the next step and
  the rest of the batch continues.

Heavy imports (torch, transformers, peft) happen in `load()` and the worker thread only, never at module import.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from machine_lsp.engines import smollm2

FinishReason = Literal["stop", "length", "cancelled", "error"]
CONTEXT_LENGTH = 8192  # SmolLM2's max_position_embeddings; the loaded config's value wins


@dataclass
class Loaded:
    """A model ready to serve: tokenizer, cookbook renderer, causal LM (adapter merged or not)."""

    tokenizer: Any
    renderer: Any
    model: Any
    stop_ids: set[int]
    pad_id: int
    context_length: int
    base_model: str
    checkpoint: str | None


def load(
    checkpoint_dir: Path | None,
    *,
    base_model: str = smollm2.MODEL_NAME,
    threads: int | None = None,
    merge: bool = True,
    store_root: Path | None = None,
) -> Loaded:
    """Load the base model, and the adapter in `checkpoint_dir` when given (merged into the weights by default)."""
    from machine_lsp.engines.local import LocalEngine

    engine = LocalEngine(threads=threads, store_root=store_root)
    sampler = engine.sampler_for(base_model, str(checkpoint_dir) if checkpoint_dir is not None else None)
    model = sampler.model
    if merge and hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.eval()
    config = model.config if not hasattr(model, "get_base_model") else model.get_base_model().config
    context = int(getattr(config, "max_position_embeddings", None) or CONTEXT_LENGTH)
    return Loaded(
        tokenizer=sampler.tokenizer,
        renderer=sampler.renderer,
        model=model,
        stop_ids=set(sampler.stop_ids),
        pad_id=sampler.pad_id,
        context_length=context,
        base_model=base_model,
        checkpoint=str(checkpoint_dir) if checkpoint_dir is not None else None,
    )


_END = object()
SHUTTING_DOWN = "the server is shutting down"
MIN_TEMPERATURE = 1e-5  # below this, sampling is argmax to float precision


def warm(loaded: Loaded) -> None:
    """One forward pass on a model before it takes requests (a swap's new checkpoint): a model that loads but cannot
    run fails here, while the old one still serves."""
    import torch

    model = loaded.model
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    with torch.inference_mode():
        out = lm(input_ids=torch.tensor([[loaded.pad_id]], dtype=torch.long))
    if not bool(torch.isfinite(out.logits).all()):
        raise ValueError("the model's first forward pass gave non-finite logits")


def _sample(logits: Any, temperature: float, top_p: float, generator: Any) -> int:
    """One token from softmax(logits / temperature) cut to its top-p nucleus (the most likely token always kept)."""
    import torch

    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < top_p
        keep[0] = True
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
    if not bool(torch.isfinite(probs).all()) or float(probs.sum()) <= 0:
        raise ValueError(f"no finite distribution at temperature {temperature:g}, top_p {top_p:g}")
    return int(torch.multinomial(probs, 1, generator=generator)[0])


@dataclass(eq=False)
class Generation:
    """One request's generation: its prompt, its limits, and where its tokens go."""

    prompt: list[int]
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    loop: asyncio.AbstractEventLoop | None = None
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    tokens: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    error: str | None = None
    cancelled: bool = False
    submitted_at: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    on_finish: Callable[[FinishReason], None] | None = None

    def cancel(self) -> None:
        """Ask the worker to drop this row at its next step (a client that went away, a stop string hit)."""
        self.cancelled = True

    async def stream(self) -> Any:
        """Yield token ids as they are decoded; returns when the generation finished (see `finish_reason`)."""
        while True:
            item = await self.queue.get()
            if item is _END:
                return
            yield item

    # -- called from the worker thread ------------------------------------------------------------------------

    def _put(self, item: Any) -> None:
        assert self.loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is shutting down
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def _emit(self, token: int) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.tokens.append(token)
        self._put(token)

    def _finish(self, reason: FinishReason, error: str | None = None) -> None:
        self.finish_reason = reason
        self.error = error
        if self.on_finish is not None:
            self.on_finish(reason)
        self._put(_END)


class BatchGenerator:
    """Wave-batched decoding of many `Generation`s on one model, in one worker thread."""

    def __init__(
        self,
        loaded: Loaded,
        *,
        max_batch: int = 32,
        collect_s: float = 0.005,
        max_prefill_tokens: int = 16384,
        seed: int = 0,
    ) -> None:
        if max_batch < 1 or max_prefill_tokens < 1:
            raise ValueError("max_batch and max_prefill_tokens must be at least 1")
        self.loaded = loaded
        self.max_batch = max_batch
        self.collect_s = collect_s
        self.max_prefill_tokens = max_prefill_tokens
        self.seed = seed
        self._pending: deque[Generation] = deque()
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._worker, name="machine-serve-generate", daemon=True)
        self.waves = 0
        self.largest_wave = 0
        self.submitted = 0
        self.finished: Counter[str] = Counter()  # finish reasons so far (the worker thread counts)

    @property
    def in_flight(self) -> int:
        """Generations submitted and not finished yet (queued or decoding)."""
        return self.submitted - sum(self.finished.values())

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop: queued generations and the wave being decoded end at once ("error": the server is shutting
        down), so their clients are answered instead of waiting for the whole reply. Waits up to `timeout` for
        the worker's current step (a daemon thread: a step still running then does not hold the exit)."""
        with self._wake:
            self._closed = True
            queued = list(self._pending)
            self._pending.clear()
            self._wake.notify_all()
        for generation in queued:
            generation._finish("error", SHUTTING_DOWN)
        self._thread.join(timeout=timeout)

    def submit(self, generation: Generation) -> Generation:
        """Queue a generation; its tokens arrive on its own queue (call from the event loop's thread)."""
        if generation.loop is None:
            generation.loop = asyncio.get_running_loop()
        if not generation.prompt:
            raise ValueError("empty prompt")
        generation.on_finish = self._count
        with self._wake:
            if self._closed:
                raise RuntimeError("the generator is closed")
            self.submitted += 1
            self._pending.append(generation)
            self._wake.notify()
        return generation

    def _count(self, reason: FinishReason) -> None:
        with self._wake:
            self.finished[reason] += 1

    # -- worker thread ----------------------------------------------------------------------------------------

    def _take_wave(self) -> list[Generation]:
        with self._wake:
            while not self._pending and not self._closed:
                self._wake.wait()
            if self._closed:
                return []
        time.sleep(self.collect_s)  # let requests sent together arrive together
        wave: list[Generation] = []
        with self._wake:
            width = 0
            while self._pending and len(wave) < self.max_batch:
                candidate = self._pending[0]
                if candidate.cancelled:
                    self._pending.popleft()._finish("cancelled")
                    continue
                new_width = max(width, len(candidate.prompt))
                if wave and new_width * (len(wave) + 1) > self.max_prefill_tokens:
                    break
                wave.append(self._pending.popleft())
                width = new_width
        return wave

    def _worker(self) -> None:
        import torch

        generator = torch.Generator().manual_seed(self.seed)
        while True:
            wave = self._take_wave()
            if not wave:
                if self._closed:
                    return
                continue
            self.waves += 1
            self.largest_wave = max(self.largest_wave, len(wave))
            try:
                with torch.inference_mode():
                    self._decode(wave, generator)
            except Exception as exc:  # a failed wave fails its requests, never the server
                message = f"{type(exc).__name__}: {exc}"
                for generation in wave:
                    if generation.finish_reason is None:
                        generation._finish("error", message)

    def _choose(self, logits: Any, rows: Sequence[Generation], generator: Any) -> Any:
        """Next token per row: greedy where temperature is (effectively) 0, else temperature + nucleus sampling.

        Each row samples on its own: a row whose distribution cannot be sampled fails alone (`_finish("error")`)
        and the others in the wave keep their tokens."""
        chosen = logits.argmax(-1)
        for j, g in enumerate(rows):
            if g.temperature < MIN_TEMPERATURE:  # 1e-40 would overflow logits / T: it is greedy anyway
                continue
            try:
                chosen[j] = _sample(logits[j], g.temperature, g.top_p, generator)
            except (RuntimeError, ValueError) as exc:
                g._finish("error", f"cannot sample this request: {exc}")
        return chosen

    def _decode(self, wave: list[Generation], generator: Any) -> None:
        import torch

        model = self.loaded.model
        lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        cache, mask, next_pos, logits = self._prefill(lm, wave)
        active = list(range(len(wave)))
        while True:
            rows = [wave[i] for i in active]
            if self._closed:
                for g in rows:
                    g._finish("error", SHUTTING_DOWN)
                return
            nxt = self._choose(logits, rows, generator)
            keep = self._hand_out(rows, nxt.tolist())
            if not keep:
                return
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long)
                cache.batch_select_indices(index)
                mask, next_pos, nxt = mask[index], next_pos[index], nxt[index]
                active = [active[j] for j in keep]
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
            out = lm(
                input_ids=nxt[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            next_pos = next_pos + 1
            logits = out.logits[:, -1, :]

    def _prefill(self, lm: Any, wave: list[Generation]) -> tuple[Any, Any, Any, Any]:
        """The wave's prompts, left-padded into one block, through the model: (KV cache, attention mask, each
        row's next position, each row's last logits)."""
        import torch
        from transformers import DynamicCache

        n = len(wave)
        width = max(len(g.prompt) for g in wave)
        ids = torch.full((n, width), self.loaded.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for j, g in enumerate(wave):  # left padding: every row's next token sits in the last column
            ids[j, width - len(g.prompt) :] = torch.tensor(g.prompt, dtype=torch.long)
            mask[j, width - len(g.prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=lm.config)
        out = lm(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return cache, mask, positions[:, -1] + 1, out.logits[:, -1, :]

    def _hand_out(self, rows: list[Generation], tokens: list[int]) -> list[int]:
        """Each row's chosen token emitted or its finish noted; the indexes of the rows that decode on."""
        keep: list[int] = []
        for j, token in enumerate(tokens):
            g = rows[j]
            if g.finish_reason is not None:  # failed alone while sampling
                continue
            if g.cancelled:
                g._finish("cancelled")
            elif token in self.loaded.stop_ids:
                g._finish("stop")
            else:
                g._emit(token)
                if len(g.tokens) >= g.max_tokens:
                    g._finish("length")
                else:
                    keep.append(j)
        return keep
