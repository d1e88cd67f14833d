"""The local engine's sampler: batched greedy decoding with a KV cache, with or without the LoRA adapter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from machine_lsp.engines import render
from machine_lsp.engines.base import EngineError

if TYPE_CHECKING:  # pragma: no cover
    from machine_lsp.core.schema import Message


class SamplingEngine(Protocol):
    """What the sampler uses of `LocalEngine` (declared here so this module does not import it)."""

    sample_batch_size: int  # prompts decoded together


@dataclass(eq=False)
class LocalSampler:
    """`Sampler` implementation: batched greedy decoding (transformers `generate`), left padding, KV cache."""

    engine: SamplingEngine
    tokenizer: Any
    renderer: Any
    model: Any
    adapter_enabled: bool = field(default=True, kw_only=True)
    stop_ids: set[int] = field(init=False)
    pad_id: int = field(init=False)

    def __post_init__(self) -> None:
        tokenizer = self.tokenizer
        self.stop_ids = {int(t) for t in self.renderer.get_stop_sequences() if isinstance(t, int)}
        if tokenizer.eos_token_id is not None:
            self.stop_ids.add(int(tokenizer.eos_token_id))
        self.pad_id = int(
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.stop_ids)
        )

    def sample(self, prompts: Sequence[Sequence[Message]], max_tokens: int) -> list[str]:
        token_lists = [render.prompt_tokens(messages, self.renderer) for messages in prompts]
        outputs = self.sample_tokens(token_lists, max_tokens)
        return [self.tokenizer.decode(tokens, skip_special_tokens=False) for tokens in outputs]

    def sample_tokens(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[list[int]]:
        """Greedy completions (stop token excluded) of token prompts, batched by similar length."""
        import contextlib

        import torch

        if max_tokens < 1:
            raise EngineError(f"max_tokens must be at least 1, got {max_tokens}")
        if any(not p for p in prompts):
            raise EngineError("cannot sample from an empty prompt")
        results: list[list[int]] = [[] for _ in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        size = self.engine.sample_batch_size
        was_training = self.model.training
        self.model.eval()
        disable = (
            self.model.disable_adapter()
            if not self.adapter_enabled and hasattr(self.model, "disable_adapter")
            else contextlib.nullcontext()
        )
        try:
            with torch.inference_mode(), disable:
                for start in range(0, len(order), size):
                    chunk = order[start : start + size]
                    for i, tokens in zip(
                        chunk, self._greedy([prompts[i] for i in chunk], max_tokens), strict=True
                    ):
                        results[i] = tokens
        finally:
            if was_training:
                self.model.train()
        return results

    def _greedy(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[list[int]]:
        """One left-padded batch through transformers' own `generate` (greedy, KV cache). A hand-written decoder
        that dropped finished rows from the batch measured no better (bench/eval_batched.py, docs/BENCHMARKS.md)."""
        import torch

        lm = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        n = len(prompts)
        width = max(len(p) for p in prompts)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for j, p in enumerate(prompts):
            ids[j, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[j, width - len(p) :] = 1
        generated = lm.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=sorted(self.stop_ids),
            pad_token_id=self.pad_id,
        )
        results: list[list[int]] = []
        for row in generated[:, width:].tolist():
            tokens: list[int] = []
            for token in row:
                if token in self.stop_ids:
                    break
                tokens.append(token)
            results.append(tokens)
        return results
