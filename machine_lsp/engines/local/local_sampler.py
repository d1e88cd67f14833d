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
                for chunk, shared in batches(prompts, size):
                    for i, tokens in zip(
                        chunk, self._greedy([prompts[i] for i in chunk], max_tokens, shared), strict=True
                    ):
                        results[i] = tokens
        finally:
            if was_training:
                self.model.train()
        return results

    def _greedy(self, prompts: Sequence[Sequence[int]], max_tokens: int, shared: int = 0) -> list[list[int]]:
        """One batch through transformers' own `generate` (greedy, KV cache). A hand-written decoder that dropped
        finished rows from the batch measured no better (bench/eval_batched.py, docs/BENCHMARKS.md).

        The first `shared` tokens, the same in every prompt (an agent's system prompt and tools), are prefilled
        once and their cache repeated for the batch; each prompt's rest is left-padded after them. Positions come
        from the attention mask, so each prompt sees the positions it would see alone."""
        import torch

        lm = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        n = len(prompts)
        cache = None
        if shared:
            prefix = torch.tensor([list(prompts[0][:shared])], dtype=torch.long)
            cache = lm(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
            cache.batch_repeat_interleave(n)
        width = shared + max(len(p) - shared for p in prompts)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for j, p in enumerate(prompts):
            ids[j, :shared] = torch.tensor(list(p[:shared]), dtype=torch.long)
            mask[j, :shared] = 1
            ids[j, width - len(p) + shared :] = torch.tensor(list(p[shared:]), dtype=torch.long)
            mask[j, width - len(p) + shared :] = 1
        generated = lm.generate(
            input_ids=ids,
            attention_mask=mask,
            past_key_values=cache,
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


# A prefix shorter than this is not worth a separate prefill (the default system prompt of a bare question).
MIN_SHARED_PREFIX = 64


def batches(prompts: Sequence[Sequence[int]], size: int) -> list[tuple[list[int], int]]:
    """Prompts in batches of at most `size`, each with the length of the prefix all its prompts share (0: none).

    Prompts that share a long prefix (turns of one agent session, probes asked inside one system prompt) go
    together, found by sorting the token lists; the rest are batched by similar length, which keeps padding low."""
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    out: list[tuple[list[int], int]] = []
    alone: list[int] = []
    run: list[int] = []
    shared = 0
    for i in [*order, -1]:
        common = _common_prefix(prompts[run[0]], prompts[i], shared) if run and i >= 0 else 0
        # every prompt keeps at least one token of its own after the shared part
        common = min(common, len(prompts[i]) - 1) if i >= 0 else 0
        if run and (common >= MIN_SHARED_PREFIX and len(run) < size):
            run.append(i)
            shared = common
            continue
        if len(run) > 1:
            out.append((run, shared))
        else:
            alone.extend(run)
        run, shared = ([i], len(prompts[i]) - 1) if i >= 0 else ([], 0)
    alone.sort(key=lambda i: (len(prompts[i]), i))  # as before sharing: by length, then by position
    out.extend((alone[start : start + size], 0) for start in range(0, len(alone), size))
    return out


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """The length of the common prefix of `a` and `b`, at most `limit`."""
    n = 0
    for x, y in zip(a[:limit], b[:limit], strict=False):
        if x != y:
            break
        n += 1
    return n
