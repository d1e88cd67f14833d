"""Padding-free packing for the local engine's log-prob passes (DPO, KTO): every prompt through the model once.

A DPO pair's chosen and rejected datums, and a KTO example and its mismatched KL datum, start with the same prompt.
Run as separate padded rows, that prompt goes through every layer twice in each of the step's passes (policy,
backward, reference). Here the rows of a micro-batch become one sequence: each distinct prompt once, then the
completions that follow it, with their own position ids (continuing the prompt's) and a block attention mask (a
completion sees its prompt and its own earlier tokens, nothing else). Every token attends to exactly the keys it
would in its own row, at the same positions: the math of one row at a time, with no padding and no repeated prompt
(only the float rounding order of the sums differs).

Rows can also come as a *tail*: a second pass under `torch.no_grad()` that reads the first pass's key/value cache,
so a tail completion (KTO's KL datums, which take no gradient) costs only its own tokens, and nothing in the
backward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

Rows = Sequence[tuple[list[int], list[int], list[float]]]
#: where one row's trained positions are in its micro-batch's sequence: (indices, target tokens, loss weights)
Picks = dict[int, tuple[list[int], list[int], list[float]]]
PREFIX = 0  # segment id of a prompt's tokens; row i's completion is segment i + 1
#: most tokens in one packed sequence: its attention costs the length squared (the mask skips no work), so packs
#: stay short enough for the linear layers to dominate (SmolLM2-135M: attention ~5% of a pass at 256 tokens)
PACK_TOKENS = 256
#: attention implementations that take the 4D masks built here (sdpa: boolean, eager: additive); others: unpacked
PACKED_ATTENTION = ("sdpa", "eager")


def first_trained(weights: Sequence[float]) -> int | None:
    return next((k for k, w in enumerate(weights) if w > 0), None)


def prompt_groups(rows: Rows, indices: Sequence[int]) -> dict[tuple[int, ...], list[int]]:
    """Rows by shared prompt: the inputs up to and including the first trained position (the first hidden state
    the loss reads depends on nothing after it). Rows with no trained position need no pass and are left out."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in indices:
        first = first_trained(rows[i][2])
        if first is not None:
            groups.setdefault(tuple(rows[i][0][: first + 1]), []).append(i)
    return groups


@dataclass
class MicroBatch:
    """One packed sequence, built pass by pass: its tokens' ids, positions, prompt group and segment."""

    ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    group: list[int] = field(default_factory=list)
    segment: list[int] = field(default_factory=list)
    prompt_end: dict[tuple[int, ...], int] = field(default_factory=dict)  # prompt -> index of its last token
    number: dict[tuple[int, ...], int] = field(default_factory=dict)  # prompt -> its group number

    def add(self, prompt: tuple[int, ...], members: Sequence[int], rows: Rows, picks: Picks) -> None:
        """The prompt (unless an earlier pass holds it), then each member's completion; each member's trained
        positions go into `picks`."""
        number = self.number.setdefault(prompt, len(self.number))
        if prompt not in self.prompt_end:
            self._extend(prompt, range(len(prompt)), number, PREFIX)
            self.prompt_end[prompt] = len(self.ids) - 1
        for i in members:
            inputs, targets, weights = rows[i]
            start = len(self.ids)
            self._extend(inputs[len(prompt) :], range(len(prompt), len(inputs)), number, i + 1)
            trained = [k for k, w in enumerate(weights) if w > 0]  # the first is the prompt's last token
            where = [self.prompt_end[prompt] if k < len(prompt) else start + k - len(prompt) for k in trained]
            picks[i] = (where, [targets[k] for k in trained], [weights[k] for k in trained])

    def _extend(self, ids: Sequence[int], positions: range, number: int, segment: int) -> None:
        self.ids += ids
        self.positions += positions
        self.group += [number] * len(ids)
        self.segment += [segment] * len(ids)

    def mask(self, start: int, end: int, attention: str) -> torch.Tensor:
        """[1, 1, tokens start..end, tokens 0..end]: a token sees its prompt and its own segment's earlier tokens."""
        import torch

        pos, group, seg = (torch.tensor(x[:end]) for x in (self.positions, self.group, self.segment))
        q_pos, q_group, q_seg = pos[start:, None], group[start:, None], seg[start:, None]
        allowed = (
            (group[None] == q_group) & (pos[None] <= q_pos) & ((seg[None] == PREFIX) | (seg[None] == q_seg))
        )
        if attention == "sdpa":
            return allowed[None, None]
        blocked = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(
            ~allowed, torch.finfo(torch.float32).min
        )
        return blocked[None, None]


def micro_batches(
    groups: dict[tuple[int, ...], list[int]], rows: Rows, max_tokens: int
) -> list[list[tuple[int, ...]]]:
    """Prompts cut into micro-batches of at most `max_tokens` packed tokens (a larger group gets one alone)."""
    batches: list[list[tuple[int, ...]]] = []
    size = max_tokens
    for prompt, members in groups.items():
        tokens = len(prompt) + sum(len(rows[i][0]) - len(prompt) for i in members)
        if size + tokens > max_tokens:
            batches.append([])
            size = 0
        batches[-1].append(prompt)
        size += tokens
    return batches


def packed_logprobs(owner: Any, rows: Rows, graded: int) -> tuple[list[Any], list[Any]]:
    """Per row: (log-probs of its trained target tokens, their weights). rows[:graded] run in the caller's grad
    mode, rows[graded:] are the no-gradient tail. Only trained positions go through the output head."""
    import torch

    from machine_lsp.engines.local.local_batching import fast_head

    lm = owner._lm
    if fast_head(lm):
        model, head = lm.base_model, lm.get_output_embeddings()
    else:  # logits post-processed (soft-capping, scaling): the model's own full forward
        model, head = lm, (lambda x: x)
    attention = lm.config._attn_implementation
    logprobs: list[Any] = [torch.zeros(0)] * len(rows)
    weights: list[Any] = [torch.zeros(0)] * len(rows)
    main, tail = prompt_groups(rows, range(graded)), prompt_groups(rows, range(graded, len(rows)))
    everything = {p: main.get(p, []) + tail.get(p, []) for p in {**main, **tail}}
    for prompts in micro_batches(everything, rows, min(PACK_TOKENS, owner.engine.max_micro_tokens)):
        micro, main_picks, tail_picks = MicroBatch(), {}, {}
        for prompt in prompts:
            if prompt in main:
                micro.add(prompt, main[prompt], rows, main_picks)
        split = len(micro.ids)
        for prompt in prompts:
            if prompt in tail:
                micro.add(prompt, tail[prompt], rows, tail_picks)
        hidden, cache = None, None
        if split:
            hidden, cache = _forward(model, micro, 0, split, attention, None)
            _pick(main_picks, hidden, head, logprobs, weights)
        if len(micro.ids) > split:
            with torch.no_grad():
                rest, _ = _forward(model, micro, split, len(micro.ids), attention, cache)
                _pick(
                    tail_picks,
                    rest if hidden is None else torch.cat([hidden.detach(), rest]),
                    head,
                    logprobs,
                    weights,
                )
    return logprobs, weights


def _forward(
    model: Any, micro: MicroBatch, start: int, end: int, attention: str, cache: Any
) -> tuple[Any, Any]:
    """Hidden states (or logits) of micro's tokens [start, end), reading `cache` (the tokens before `start`)."""
    import torch

    out = model(
        input_ids=torch.tensor([micro.ids[start:end]]),
        position_ids=torch.tensor([micro.positions[start:end]]),
        attention_mask=micro.mask(start, end, attention),
        past_key_values=cache,
        use_cache=end < len(micro.ids),  # a tail follows: keep this pass's keys and values for it
    )
    return (out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits)[
        0
    ], out.past_key_values


def _pick(picks: Picks, hidden: Any, head: Any, logprobs: list[Any], weights: list[Any]) -> None:
    """The log-probs of the picked rows' targets: the head and log-softmax only at their trained positions."""
    import torch

    order = list(picks)
    index = torch.tensor([k for i in order for k in picks[i][0]], dtype=torch.long)
    target = torch.tensor([t for i in order for t in picks[i][1]], dtype=torch.long)
    logits = head(hidden[index])
    picked = torch.log_softmax(logits.float(), dim=-1).gather(1, target[:, None])[:, 0]
    for i, part in zip(order, picked.split([len(picks[i][0]) for i in order]), strict=True):
        logprobs[i] = part
        weights[i] = torch.tensor(picks[i][2], dtype=torch.float32)
