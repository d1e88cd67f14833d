"""Greedy answers kept between runs: a model that has not changed is not asked the same prompt twice.

A retrain asks the base model (anchors; the gate's reference when nothing is promoted) or the promoted checkpoint
(the gate's reference) the same prompts every time: the built-in anchor pool, the bleed probes, the tool probes and
most held-out rows. Greedy decoding makes the answer a function of the weights, the prompt's tokens and the
generation settings, so `GreedyAnswers` keys each answer by all of them:

* the weights: for the base model its name and a fingerprint of its directory (config.json's bytes, the size and
  mtime of every weights file); for a local checkpoint its address and the sha256 of its adapter file (a checkpoint
  is written once and never changed, and a new run with a reused name gets another adapter);
* the prompt's token ids (the renderer's output: system prompt, tools and messages all in it);
* max_tokens and the stop tokens.

The candidate's answers are kept too, under its own checkpoint's key: once promoted it is the next run's
reference, whose bleed and tool probes are then already answered. Only an engine whose sampler takes token
prompts (the local one) is cached; a remote sampler is asked every time. The model behind a cached sampler loads
only when an answer is missing (`load`), so a reference whose answers are all known costs no model load.

One file per model identity, `.machine/cache/greedy/<sha256 of the identity>.json` ({"identity", "answers": {key:
token ids}}), replaced atomically after each batch that added answers (core.safe_files: never through a link). A
file that cannot be read or decoded is treated as empty and rewritten. Batch composition can change float rounding
in a left-padded batch, so a cached answer may differ from a fresh one on a near-tie token: both are the model's
greedy answer to that prompt, and the gate compares its two sides on the same footing either way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core import safe_files

CACHE_DIR = ("cache", "greedy")


class _CacheFile(msgspec.Struct):
    identity: str
    answers: dict[str, list[int]] = msgspec.field(default_factory=dict)


class CacheStats(msgspec.Struct, kw_only=True):
    """Kept in the job's result (`greedy_cache`): how many answers came from the cache and how many were sampled."""

    hits: int = 0
    sampled: int = 0


def base_identity(model: str, model_dir: Path) -> str:
    """The base model's weights: its name and its directory's fingerprint."""
    parts = [f"base:{model}"]
    config = model_dir / "config.json"
    if config.is_file():
        parts.append(hashlib.sha256(config.read_bytes()).hexdigest())
    for weights in sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("*.bin")):
        st = weights.stat()
        parts.append(f"{weights.name}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def checkpoint_identity(address: str, checkpoint_dir: Path) -> str | None:
    """A local checkpoint's weights (its address and adapter's sha256); None when it has no adapter file."""
    adapter = checkpoint_dir / "adapter_model.safetensors"
    if not adapter.is_file():
        return None
    return f"checkpoint:{address}|{hashlib.sha256(adapter.read_bytes()).hexdigest()}"


class GreedyAnswers:
    """A sampler with a memory: `sample_tokens` answers known prompts from the cache and samples the rest."""

    def __init__(self, cache: AnswerCache, identity: str, template: Any, load: Callable[[], Any]) -> None:
        """`template`: a sampler of the same model family (its renderer, tokenizer and stop tokens are used
        without sampling); `load`: returns the sampler to ask on a miss, called at most once."""
        self.renderer = template.renderer
        self.tokenizer = template.tokenizer
        self.stop_ids = set(getattr(template, "stop_ids", ()) or ())
        self.identity = identity
        self.stats = cache.stats
        self._load = load
        self._sampler: Any = None
        self._machine_dir = cache.machine_dir
        self._path = cache.machine_dir.joinpath(
            *CACHE_DIR, hashlib.sha256(identity.encode()).hexdigest() + ".json"
        )
        self._file = self._read()

    def sample_tokens(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[list[int]]:
        keys = [self._key(prompt, max_tokens) for prompt in prompts]
        todo: list[int] = []  # first position of each prompt not answered yet (a repeat is sampled once)
        for i, key in enumerate(keys):
            if key not in self._file.answers and all(keys[j] != key for j in todo):
                todo.append(i)
        if todo:
            if self._sampler is None:
                self._sampler = self._load()
            outputs = self._sampler.sample_tokens([list(prompts[i]) for i in todo], max_tokens)
            for i, output in zip(todo, outputs, strict=True):
                self._file.answers[keys[i]] = [int(t) for t in output]
            self._write()
        self.stats.sampled += len(todo)
        self.stats.hits += len(prompts) - len(todo)
        return [list(self._file.answers[key]) for key in keys]

    def _key(self, prompt: Sequence[int], max_tokens: int) -> str:
        settings = f"greedy|max_tokens={max_tokens}|stop={sorted(self.stop_ids)}|"
        return hashlib.sha256((settings + ",".join(map(str, prompt))).encode()).hexdigest()

    def _read(self) -> _CacheFile:
        try:
            payload = safe_files.read_file_safely(self._path, root=self._machine_dir)
            if payload:
                cached = msgspec.json.decode(payload, type=_CacheFile)
                if cached.identity == self.identity:
                    return cached
        except (OSError, msgspec.MsgspecError):
            pass  # unreadable or foreign: start empty, rewritten on the first answer
        return _CacheFile(identity=self.identity)

    def _write(self) -> None:
        try:
            safe_files.write_file_safely(self._path, msgspec.json.encode(self._file), root=self._machine_dir)
        except OSError:
            pass  # a cache that cannot be written only costs the next run its samples


class AnswerCache:
    """The cached samplers of one job, sharing one count of hits and samples."""

    def __init__(self, machine_dir: Path) -> None:
        self.machine_dir = machine_dir
        self.stats = CacheStats()

    def base(self, engine: Any, base: Any, model: str) -> Any:
        """`base` (the base model's sampler) behind the cache, or as it is when its engine cannot be cached."""
        if not hasattr(base, "sample_tokens") or not hasattr(engine, "model_path"):
            return base
        identity = base_identity(model, engine.model_path(model))
        return GreedyAnswers(self, identity, base, lambda: base)

    def checkpoint(self, engine: Any, model: str, address: str, template: Any) -> Any | None:
        """A local checkpoint's answers, its model loaded only on a miss; None when it cannot be cached (load
        it the usual way). `template`: a sampler of the same base model (renderer, tokenizer, stop tokens)."""
        from machine_lsp.engines.base import EngineError, resolve_local_checkpoint
        from machine_lsp.engines.local.local import read_manifest, same_model

        if not hasattr(template, "sample_tokens") or not address.startswith("local://"):
            return None
        try:  # what loading would check first (its base model), without loading: a mismatch loads as before
            path = resolve_local_checkpoint(address, self.machine_dir)
            if not same_model(read_manifest(path).base_model, model):
                return None
        except (EngineError, OSError, msgspec.MsgspecError):
            return None
        identity = checkpoint_identity(address, path)
        if identity is None:
            return None
        return GreedyAnswers(self, identity, template, lambda: engine.sampler_for(model, address))

    def candidate(self, sampler: Any, address: str | None) -> Any:
        """The new checkpoint's answers, kept for when it is the next run's reference."""
        if address is None or not hasattr(sampler, "sample_tokens"):
            return sampler
        from machine_lsp.engines.base import EngineError, resolve_local_checkpoint

        try:
            identity = checkpoint_identity(address, resolve_local_checkpoint(address, self.machine_dir))
        except EngineError:
            return sampler
        return sampler if identity is None else GreedyAnswers(self, identity, sampler, lambda: sampler)
