"""The llama.cpp backend of `machine serve`: the checkpoint merged into a GGUF, decoded by `llama_cpp`.

* `load()` writes (once per checkpoint, cached beside it: `engines.gguf_export`) the LoRA merged into the base
  weights as a GGUF and opens it with `llama_cpp.Llama`. The tokenizer, the cookbook renderer and the stop tokens
  are the torch backend's (`render.load_tokenizer_and_renderer`): prompts are rendered by us and sent as TOKENS,
  so the chat format stays the one the model was trained on, and replies are parsed by the same protocol code.
* `load_backend()`, `warm()` and `generator_for()` are the seam: the CLI (and a hot swap, `swap`) loads with the
  backend asked for, a swapped-in model is warmed by its own backend, server.py and `swap` take the generator for
  what was loaded. `LlamaGenerator` is a `BatchGenerator` (same queue, counts and shutdown):
  `workers` threads, each owning one llama.cpp context over the same memory-mapped weights, take requests in
  arrival order. llama.cpp releases the GIL while it decodes, so the HTTP side keeps streaming.
* Each context keeps its KV cache between requests: a prompt that starts like the previous one (an agent resending
  its conversation) only evaluates the new tokens.
* Greedy is the argmax of the float32 logits (ties to the lowest id, as torch's argmax); sampling is temperature
  then nucleus over those logits, the torch backend's rule, from a seeded numpy generator.

`llama_cpp` is imported in `load()` and the worker threads only.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine_lsp.engines import gguf_export, smollm2
from machine_lsp.engines.base import EngineError
from machine_lsp.serve.generation import MIN_TEMPERATURE, SHUTTING_DOWN, BatchGenerator, Generation, Loaded

LLAMA_CPP = "llama.cpp"
TORCH = "torch"
BACKENDS = (LLAMA_CPP, TORCH)
THREADS_ENV = "MACHINE_SERVE_THREADS"
DEFAULT_WORKERS = 1


def available() -> bool:
    """llama-cpp-python is installed (`pip install '.[serve]'`)."""
    return importlib.util.find_spec("llama_cpp") is not None


def default_backend() -> str:
    return LLAMA_CPP if available() else TORCH


def default_threads() -> int:
    """MACHINE_SERVE_THREADS, else half the cores this process may use (llama-cpp-python's own default: the
    physical cores where each has two hardware threads). Not every core: llama.cpp's threads meet at barriers several
    times per layer, and on a 2-core machine also running an agent and an editor a descheduled thread stalls each
    step (measured: 2 threads 1.5-3.4 tokens/s, 1 thread 12-18, at load 4-5; docs/BENCHMARKS.md)."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise EngineError(f"{THREADS_ENV}={value!r} is not a number of threads") from None
    return max(1, len(os.sched_getaffinity(0)) // 2)


@dataclass
class LlamaModel:
    """What `Loaded.model` holds for this backend: the GGUF and how to open contexts on it."""

    path: Path
    threads: int
    context_length: int
    workers: int = DEFAULT_WORKERS
    lora_path: Path | None = None
    opened: list[Any] = field(default_factory=list)

    def open(self, threads: int) -> Any:
        """A llama.cpp context on the GGUF (the first one opened by `load()` is handed out first)."""
        import llama_cpp

        if self.opened:
            return self.opened.pop()
        try:
            return self._open(llama_cpp, threads)
        except (ValueError, OSError) as exc:  # llama_cpp says "Failed to load model from file: ..."
            raise EngineError(f"llama.cpp cannot open {self.path}: {exc}") from None

    def _open(self, llama_cpp: Any, threads: int) -> Any:
        return llama_cpp.Llama(
            model_path=str(self.path),
            lora_path=str(self.lora_path) if self.lora_path else None,
            n_ctx=self.context_length,
            n_batch=512,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )


def load(
    checkpoint_dir: Path | None,
    *,
    base_model: str = smollm2.MODEL_NAME,
    store_root: Path | None = None,
    threads: int | None = None,
    workers: int = DEFAULT_WORKERS,
    gguf_type: gguf_export.GgufType = gguf_export.DEFAULT_TYPE,
) -> Loaded:
    """The checkpoint (None: the base) ready to serve with llama.cpp; EngineError when it cannot be."""
    if not available():
        raise EngineError(
            "the llama.cpp backend needs llama-cpp-python: pip install '.[serve]' (or --backend torch)"
        )
    gguf_path = gguf_export.ensure_model_gguf(
        checkpoint_dir, base_model, gguf_type=gguf_type, store_root=store_root
    )
    context = gguf_export.base_for(base_model).context_length
    model = LlamaModel(gguf_path, threads or default_threads(), context, workers=workers)
    # Open the first context now: a GGUF llama.cpp refuses is a load error (the CLI's one line), not a crash later.
    model.opened.append(model.open(max(1, model.threads // workers)))
    return serving(model, base_model, str(checkpoint_dir) if checkpoint_dir is not None else None)


def serving(model: LlamaModel, base_model: str, checkpoint: str | None = None) -> Loaded:
    """`model` (any GGUF of `base_model`: ours, or an exported one) with the torch backend's tokenizer, renderer
    and stop tokens: what `LlamaGenerator` serves."""
    from machine_lsp.engines import render

    tokenizer, renderer = render.load_tokenizer_and_renderer(base_model)
    stop_ids = {int(t) for t in renderer.get_stop_sequences() if isinstance(t, int)}
    if tokenizer.eos_token_id is not None:
        stop_ids.add(int(tokenizer.eos_token_id))
    return Loaded(
        tokenizer=tokenizer,
        renderer=renderer,
        model=model,
        stop_ids=stop_ids,
        pad_id=int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stop_ids)),
        context_length=model.context_length,
        base_model=base_model,
        checkpoint=checkpoint,
    )


def load_backend(
    backend: str | None,
    checkpoint_dir: Path | None,
    *,
    base_model: str = smollm2.MODEL_NAME,
    store_root: Path | None = None,
    workers: int = DEFAULT_WORKERS,
    merge: bool = True,
    gguf_type: gguf_export.GgufType | None = None,
) -> Loaded:
    """The seam where a backend is chosen: the checkpoint loaded by `backend` (None: `default_backend()`; a GGUF
    of `gguf_type`, None: `gguf_export.DEFAULT_TYPE`). EngineError when it cannot be."""
    if (backend or default_backend()) == LLAMA_CPP:
        return load(
            checkpoint_dir,
            base_model=base_model,
            store_root=store_root,
            workers=workers,
            gguf_type=gguf_type or gguf_export.DEFAULT_TYPE,
        )
    from machine_lsp.serve import generation

    return generation.load(checkpoint_dir, base_model=base_model, merge=merge, store_root=store_root)


def describe(backend: str | None, gguf_type: str | None = None) -> str:
    """How `load_backend` will serve, for the loading line: "llama.cpp (f16 GGUF)" or "torch"."""
    if (backend or default_backend()) == TORCH:
        return TORCH
    return f"{LLAMA_CPP} ({gguf_type or gguf_export.DEFAULT_TYPE} GGUF)"


def generator_for(loaded: Loaded, *, max_batch: int = 32) -> BatchGenerator:
    """The generator for `loaded`'s backend: `LlamaGenerator` for a GGUF, else the torch `BatchGenerator`."""
    if isinstance(loaded.model, LlamaModel):
        return LlamaGenerator(loaded, workers=min(loaded.model.workers, max_batch))
    return BatchGenerator(loaded, max_batch=max_batch)


def warm(loaded: Loaded) -> None:
    """One forward pass before `loaded` takes requests (a swap's new checkpoint), by its own backend: a model that
    loads but cannot run fails here, while the old one still serves."""
    from machine_lsp.serve import generation

    if not isinstance(loaded.model, LlamaModel):
        generation.warm(loaded)
        return
    import numpy as np

    llm = loaded.model.opened[-1]  # the context load() opened, which the generator takes first
    try:
        llm.eval([loaded.pad_id])
        finite = bool(np.isfinite(last_logits(llm)).all())
    finally:
        llm.reset()
    if not finite:
        raise ValueError("the model's first forward pass gave non-finite logits")


class LlamaGenerator(BatchGenerator):
    """`Generation`s decoded by `workers` llama.cpp contexts, each request by one context, in arrival order.

    The queue, `submit`, the finish counts (`in_flight`, `finished`) and the shutdown rule (queued and decoding
    generations end with "error": the server is shutting down) are `BatchGenerator`'s; only decoding differs."""

    def __init__(self, loaded: Loaded, *, workers: int = DEFAULT_WORKERS, seed: int = 0) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if not isinstance(loaded.model, LlamaModel):
            raise TypeError("LlamaGenerator serves a GGUF loaded by llama_backend.load()")
        super().__init__(loaded, max_batch=workers, seed=seed)
        self.model: LlamaModel = loaded.model
        self.workers = workers
        threads = max(1, self.model.threads // workers)
        # Contexts open here, not in the threads: a GGUF that does not load fails here, not a request.
        self._contexts = [self.model.open(threads) for _ in range(workers)]
        self._threads = [
            threading.Thread(
                target=self._llama_worker, args=(i,), name=f"machine-serve-llama-{i}", daemon=True
            )
            for i in range(workers)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """`BatchGenerator.close` for every worker; a context is freed only once its thread has stopped."""
        self._thread = self._threads[0]
        super().close(timeout)
        for thread, llm in zip(self._threads, self._contexts, strict=True):
            thread.join(timeout=timeout)
            if not thread.is_alive():
                llm.close()

    # -- worker threads ---------------------------------------------------------------------------------------

    def _take(self) -> Generation | None:
        with self._wake:
            while True:
                if self._closed:
                    return None
                while self._pending:
                    generation = self._pending.popleft()
                    if not generation.cancelled:
                        return generation
                    generation._finish("cancelled")
                self._wake.wait()

    def _llama_worker(self, index: int) -> None:
        import numpy as np

        llm = self._contexts[index]
        rng = np.random.default_rng(self.seed + index)
        while (generation := self._take()) is not None:
            self.waves += 1
            try:
                self._decode_one(llm, generation, rng)
            except Exception as exc:  # a failed request fails alone, never the server
                llm.reset()
                if generation.finish_reason is None:
                    generation._finish("error", f"{type(exc).__name__}: {exc}")

    def _decode_one(self, llm: Any, generation: Generation, rng: Any) -> None:
        stop_ids = self.loaded.stop_ids
        _evaluate_prompt(llm, generation.prompt)
        while True:
            if self._closed:
                generation._finish("error", SHUTTING_DOWN)
                return
            if generation.cancelled:
                generation._finish("cancelled")
                return
            try:
                token = choose(last_logits(llm), generation.temperature, generation.top_p, rng)
            except ValueError as exc:
                generation._finish("error", f"cannot sample this request: {exc}")
                return
            if token in stop_ids:
                generation._finish("stop")
                return
            generation._emit(token)
            if len(generation.tokens) >= generation.max_tokens:
                generation._finish("length")
                return
            llm.eval([token])


def _evaluate_prompt(llm: Any, prompt: list[int]) -> None:
    """Evaluate `prompt`, reusing the context's cached prefix (at least one token is evaluated for fresh logits)."""
    import numpy as np

    cached = llm.input_ids[: llm.n_tokens]
    span = min(len(cached), len(prompt) - 1)
    differs = np.flatnonzero(cached[:span] != np.asarray(prompt[:span], dtype=cached.dtype))
    llm.n_tokens = int(differs[0]) if differs.size else span  # eval() drops the KV cache from here on
    llm.eval(prompt[llm.n_tokens :])


def last_logits(llm: Any) -> Any:
    """The float32 logits of the last evaluated token (a copy: the next decode overwrites them)."""
    import numpy as np

    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).copy()


def choose(logits: Any, temperature: float, top_p: float, rng: Any) -> int:
    """Greedy where temperature is 0, else temperature then nucleus sampling (the torch backend's rule)."""
    import numpy as np

    if temperature < MIN_TEMPERATURE:  # 1e-40 would overflow logits / T: it is greedy anyway
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        sorted_probs = probs[order]
        keep = np.cumsum(sorted_probs) - sorted_probs < top_p
        keep[0] = True  # the most likely token always stays (top_p 0 is greedy, as in the torch backend)
        probs = np.zeros_like(probs)
        probs[order[keep]] = sorted_probs[keep]
        probs /= probs.sum()
    if not np.isfinite(probs).all() or probs.sum() <= 0:
        raise ValueError(f"no finite distribution at temperature {temperature:g}, top_p {top_p:g}")
    return int(rng.choice(len(probs), p=probs))
