"""DPO and KTO on the real SmolLM2 (a few local steps each): the loss starts where the math says (the policy is the
reference before its first step), is finite and falls; the reference (the base, adapter disabled) never moves; the
losses agree with tinker-cookbook's DPO loss on the same log-probs."""

from __future__ import annotations

import math
from typing import Any

import pytest
from engine_helpers import MODEL

from machine_lsp.core.schema import Message
from machine_lsp.engines import render
from machine_lsp.engines.base import EngineError, LoraSettings
from machine_lsp.engines.objectives import Objective

pytestmark = pytest.mark.slow

QUESTIONS = [(3, 4), (12, 30), (9, 9), (40, 2)]
STEPS = 4
LR = 5e-4


def _conversation(question: str, answer: str) -> list[Message]:
    return [Message(role="user", content=question), Message(role="assistant", content=answer)]


def _datum(trainer: Any, question: str, answer: str) -> Any:
    # the completion only, summed (reduction "none"), as the cookbook's DPO datums are built
    return render.to_datum(
        _conversation(question, answer), trainer.renderer, train_on="last_assistant_message", reduction="none"
    )


def _dpo_batch(trainer: Any) -> list[Any]:
    batch = []
    for a, b in QUESTIONS:
        question = f"What is {a} plus {b}?"
        batch += [
            _datum(trainer, question, f"answer: {a + b}"),
            _datum(trainer, question, f"Sure! {a} plus {b} is {a + b}."),
        ]
    return batch


def _kto_batch(trainer: Any) -> tuple[list[Any], list[bool]]:
    """Good and bad answers, then each example's prompt with the previous example's answer (the KL pairs)."""
    examples = []
    for i, (a, b) in enumerate(QUESTIONS):
        good = i % 2 == 0
        answer = f"answer: {a + b}" if good else f"Well, {a} plus {b} is {a + b}."
        examples.append((f"What is {a} plus {b}?", answer, good))
    datums = [_datum(trainer, q, ans) for q, ans, _ in examples]
    mismatched = [_datum(trainer, q, examples[i - 1][1]) for i, (q, _, _) in enumerate(examples)]
    return datums + mismatched, [good for _, _, good in examples]


def _reference(trainer: Any, batch: list[Any]) -> list[Any]:
    from machine_lsp.engines.local.local_objectives import reference_logprobs

    return reference_logprobs(
        trainer, trainer._check_batch(batch), cached=False
    )  # a fresh pass, not the kept


def _policy(trainer: Any, batch: list[Any]) -> tuple[list[Any], list[Any]]:
    import torch

    from machine_lsp.engines.local.local_objectives import token_logprobs

    with torch.no_grad():
        return token_logprobs(trainer, trainer._check_batch(batch))


def _train(trainer: Any, batch: list[Any], objective: Objective) -> list[Any]:
    stats = []
    for _ in range(STEPS):
        pending = trainer.submit_step(batch, LR, objective)
        assert pending.done()
        stats.append(pending.result())
    return stats


@pytest.fixture(scope="module")
def dpo_run(local_engine: Any) -> dict[str, Any]:
    trainer = local_engine.create_trainer(MODEL, LoraSettings(), local_engine.store_root / "runs" / "dpo-run")
    batch = _dpo_batch(trainer)
    before = _reference(trainer, batch)
    stats = _train(trainer, batch, Objective(name="dpo", beta=0.1))
    return {"trainer": trainer, "batch": batch, "before": before, "stats": stats}


def test_dpo_loss_starts_at_log_2_and_falls(dpo_run: dict[str, Any]) -> None:
    losses = [s.loss for s in dpo_run["stats"]]
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[0] == pytest.approx(math.log(2), abs=1e-7)  # policy == reference: delta 0
    assert losses[-1] < losses[0] - 1e-3, losses
    last = dpo_run["stats"][-1].metrics
    assert last["margin"] > 0 and last["accuracy"] == 1.0 and last["pairs"] == len(QUESTIONS), last
    assert dpo_run["stats"][0].trained_tokens > 0


def test_dpo_reference_is_the_base_and_never_moves(dpo_run: dict[str, Any]) -> None:
    import torch

    trainer, batch = dpo_run["trainer"], dpo_run["batch"]
    after = _reference(trainer, batch)
    assert all(torch.equal(x, y) for x, y in zip(dpo_run["before"], after, strict=True))
    policy, _ = _policy(trainer, batch)
    assert not all(torch.allclose(p, r) for p, r in zip(policy, after, strict=True))  # the adapter did train


def test_dpo_loss_is_the_cookbooks_on_the_same_logprobs(dpo_run: dict[str, Any]) -> None:
    import torch
    from tinker_cookbook.preference.train_dpo import compute_dpo_loss

    from machine_lsp.engines.objectives.dpo_loss import dpo_loss

    trainer, batch = dpo_run["trainer"], dpo_run["batch"]
    policy, weights = _policy(trainer, batch)
    reference = _reference(trainer, batch)
    ours, metrics = dpo_loss(Objective(name="dpo"), weights, policy, reference)
    sums = [torch.dot(lp, w) for lp, w in zip(policy, weights, strict=True)]
    refs = [torch.dot(lp, w) for lp, w in zip(reference, weights, strict=True)]
    theirs, their_metrics = compute_dpo_loss(sums[0::2], sums[1::2], refs[0::2], refs[1::2], 0.1)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-5)
    assert metrics["margin"] == pytest.approx(their_metrics["margin"], rel=1e-5)


def _trl_chosen_nll(trainer: Any, batch: list[Any]) -> float:
    """TRL's RPO term, computed its way: one CrossEntropyLoss(ignore_index=-100) over the chosen half's full-model
    logits, prompt tokens labelled -100 (DPOTrainer's `nll_loss`), independent of our per-token log-probs."""
    import torch
    import torch.nn.functional as F

    logits, labels = [], []
    for datum in batch[0::2]:
        inputs, targets, weights = render.datum_tokens(datum)
        with torch.no_grad():
            logits.append(trainer.model(input_ids=torch.tensor([inputs]), use_cache=False).logits[0].float())
        labels.append(torch.tensor([t if w > 0 else -100 for t, w in zip(targets, weights, strict=True)]))
    return float(F.cross_entropy(torch.cat(logits), torch.cat(labels), ignore_index=-100))


def test_rpo_alpha_zero_is_dpo_and_alpha_adds_exactly_trls_chosen_nll(dpo_run: dict[str, Any]) -> None:
    import torch

    from machine_lsp.engines.objectives.dpo_loss import dpo_loss

    trainer, batch = dpo_run["trainer"], dpo_run["batch"]
    policy, weights = _policy(trainer, batch)
    reference = _reference(trainer, batch)
    pure, pure_metrics = dpo_loss(Objective(name="dpo"), weights, policy, reference)
    zero, zero_metrics = dpo_loss(Objective(name="dpo", rpo_alpha=0.0), weights, policy, reference)
    assert torch.equal(pure, zero) and pure_metrics == zero_metrics and "nll_loss" not in zero_metrics
    nll = _trl_chosen_nll(trainer, batch)
    assert nll > 0
    rpo, metrics = dpo_loss(Objective(name="dpo", rpo_alpha=0.5), weights, policy, reference)
    assert float(rpo) == pytest.approx(float(pure) + 0.5 * nll, rel=1e-4)
    assert metrics["nll_loss"] == pytest.approx(nll, rel=1e-4) and metrics["preference_loss"] == float(pure)
    assert metrics["dpo_loss"] == float(rpo) and metrics["margin"] == pure_metrics["margin"]


def test_rpo_steps_train_the_chosen_answer_and_report_both_terms(local_engine: Any) -> None:
    trainer = local_engine.create_trainer(MODEL, LoraSettings(), local_engine.store_root / "runs" / "rpo-run")
    batch = _dpo_batch(trainer)
    stats = [trainer.submit_step(batch, LR, Objective(name="dpo", rpo_alpha=1.0)).result() for _ in range(2)]
    first, last = stats[0].metrics, stats[-1].metrics
    assert first["preference_loss"] == pytest.approx(math.log(2), abs=1e-6)  # policy == reference
    for step in stats:
        m = step.metrics
        assert step.loss == pytest.approx(m["preference_loss"] + m["nll_loss"], rel=1e-6)
    assert last["nll_loss"] < first["nll_loss"], (first, last)
    assert _trl_chosen_nll(trainer, batch) < last["nll_loss"]  # the second step lowered it again


def test_kto_loss_starts_at_one_half_and_falls(local_engine: Any) -> None:
    import torch

    trainer = local_engine.create_trainer(MODEL, LoraSettings(), local_engine.store_root / "runs" / "kto-run")
    batch, labels = _kto_batch(trainer)
    objective = Objective(name="kto", beta=0.1).for_batch(labels)
    with pytest.raises(EngineError, match="label per example"):
        trainer.submit_step(batch[:-1], LR, objective)  # the shape is checked before any compute
    before = _reference(trainer, batch)
    stats = _train(trainer, batch, objective)
    losses = [s.loss for s in stats]
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[0] == 0.5  # 1 - sigmoid(0) for every example, weights 1: exactly, policy = reference
    assert losses[-1] < losses[0] - 1e-4, losses
    last = stats[-1].metrics
    assert last["chosen_reward"] > last["rejected_reward"], last
    assert (last["desirable"], last["undesirable"]) == (2, 2)
    after = _reference(trainer, batch)
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))


def _full_logprobs(trainer: Any, datum: Any, *, adapter: bool) -> Any:
    """Every target token's log-prob of one datum, as Tinker's `forward` and `compute_logprobs` return them."""
    import contextlib

    import torch

    inputs, targets, _ = render.datum_tokens(datum)
    off = contextlib.nullcontext() if adapter else trainer.model.disable_adapter()
    with torch.no_grad(), off:
        logits = trainer.model(input_ids=torch.tensor([inputs]), use_cache=False).logits[0]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(targets)[:, None])[:, 0]


@pytest.mark.parametrize("rpo_alpha", [0.0, 1.0])
def test_the_tinker_dpo_step_computes_the_local_loss_up_to_the_network(
    dpo_run: dict[str, Any], rpo_alpha: float
) -> None:
    """The hosted path as far as this machine goes: the SDK's own client-side half of forward_backward_custom
    (`TrainingClient._compute_custom_loss`) on the forward output Tinker would send (the real model's log-probs)
    with our loss gives the local engine's DPO loss (RPO's too), and sends cross-entropy weights only on
    completion tokens."""
    import torch
    from tinker import types
    from tinker.lib.public_interfaces.training_client import TrainingClient

    from machine_lsp.engines.objectives.dpo_loss import dpo_loss
    from machine_lsp.engines.tinker.tinker_objectives import custom_loss, loss_and_metrics

    trainer, batch = dpo_run["trainer"], dpo_run["batch"]
    objective = Objective(name="dpo", beta=0.1, rpo_alpha=rpo_alpha)
    reference = [_full_logprobs(trainer, d, adapter=False) for d in batch]
    forward = types.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=[
            {"logprobs": types.TensorData.from_torch(_full_logprobs(trainer, d, adapter=True))} for d in batch
        ],
        metrics={},
    )
    result = TrainingClient._compute_custom_loss(batch, custom_loss(objective, reference), forward)
    policy, weights = _policy(trainer, batch)
    local, _ = dpo_loss(objective, weights, policy, _reference(trainer, batch))
    assert result.loss_sum == pytest.approx(float(local), rel=1e-4)
    loss, metrics = loss_and_metrics(
        objective, types.ForwardBackwardOutput("ArrayRecord", [], result.metrics)
    )
    assert loss == pytest.approx(result.loss_sum, rel=1e-6) and metrics["pairs"] == len(QUESTIONS)
    for datum, sent in zip(batch, result.data, strict=True):
        trained = torch.tensor(render.datum_tokens(datum)[2]) > 0
        grad = sent.loss_fn_inputs["weights"].to_torch()
        assert bool((grad[~trained] == 0).all()) and bool((grad[trained] != 0).any())


def test_a_frozen_reference_is_the_adapter_then_and_the_trained_weights_stay(dpo_run: dict[str, Any]) -> None:
    """sft+dpo's DPO stage: after `freeze_reference` the reference is the adapter as it was (not the base), a
    later step leaves it where it was, and the reference pass puts the trained weights back."""
    import torch

    trainer, batch = dpo_run["trainer"], dpo_run["batch"]
    trainer.freeze_reference()
    try:
        frozen_policy, _ = _policy(trainer, batch)
        reference = _reference(trainer, batch)
        assert all(torch.equal(p, r) for p, r in zip(frozen_policy, reference, strict=True))
        assert not all(torch.equal(r, b) for r, b in zip(reference, dpo_run["before"], strict=True))
        stats = trainer.submit_step(batch, LR, Objective(name="dpo", beta=0.1)).result()
        assert stats.loss == pytest.approx(
            math.log(2), abs=1e-6
        )  # the policy started at the frozen reference
        weights = [p.detach().clone() for p in trainer.params]
        after = _reference(trainer, batch)
        assert all(torch.equal(x, y) for x, y in zip(reference, after, strict=True))
        assert all(torch.equal(p, w) for p, w in zip(trainer.params, weights, strict=True))
        assert not all(torch.equal(p, r) for p, r in zip(_policy(trainer, batch)[0], after, strict=True))
    finally:
        trainer.reference_state = None  # the module's other tests use the base as the reference


def test_packed_logprobs_are_each_rows_own_and_the_tail_takes_no_gradient(dpo_run: dict[str, Any]) -> None:
    """Packing (each shared prompt once, completions behind a block mask) computes what each row alone computes,
    in one sequence or cut into one micro-batch per prompt; KTO's KL tail carries no graph."""
    import torch

    from machine_lsp.engines.local.local_objectives import padded_logprobs, token_logprobs

    trainer = dpo_run["trainer"]
    batch, _ = _kto_batch(trainer)
    rows = trainer._check_batch(batch)
    graded = len(rows) // 2
    with torch.no_grad():
        alone = [padded_logprobs(trainer, [row])[0][0] for row in rows]  # one row per forward: no packing
    packed, weights = token_logprobs(trainer, rows, graded)
    assert [p.requires_grad for p in packed] == [True] * graded + [False] * (len(rows) - graded)
    assert all(torch.equal(w, torch.ones(len(p))) for w, p in zip(weights, alone, strict=True))
    for got, want in zip(packed, alone, strict=True):
        assert torch.allclose(got.detach(), want, atol=1e-4, rtol=0), (got, want)
    size = trainer.engine.max_micro_tokens
    trainer.engine.max_micro_tokens = 1  # every prompt group in a micro-batch of its own
    try:
        with torch.no_grad():
            apart, _ = token_logprobs(trainer, rows, graded)
    finally:
        trainer.engine.max_micro_tokens = size
    assert all(torch.allclose(a, w, atol=1e-4, rtol=0) for a, w in zip(apart, alone, strict=True))


def test_reference_logprobs_are_kept_per_row_for_the_reference_they_came_from(
    dpo_run: dict[str, Any],
) -> None:
    import torch

    from machine_lsp.engines.local.local_objectives import reference_logprobs

    trainer = dpo_run["trainer"]
    rows = trainer._check_batch(dpo_run["batch"])
    kept = reference_logprobs(trainer, rows)
    again = reference_logprobs(trainer, rows[2:] + rows[:2])  # the same rows in another order: no pass
    assert all(a is k for a, k in zip(again, kept[2:] + kept[:2], strict=True))
    fresh = reference_logprobs(trainer, rows, cached=False)
    assert all(torch.equal(f, k) for f, k in zip(fresh, kept, strict=True))
    trainer.freeze_reference()  # another reference: the kept rows no longer apply
    try:
        frozen = reference_logprobs(trainer, rows)
        assert not any(torch.equal(f, k) for f, k in zip(frozen, kept, strict=True))
    finally:
        trainer.reference_state = None
    back = reference_logprobs(trainer, rows)
    assert all(torch.equal(b, k) and b is not k for b, k in zip(back, kept, strict=True))
