"""The one sizing rule: rows -> epochs and steps, with the floors and their warning."""

from __future__ import annotations

from machine_lsp.core import run_plan
from machine_lsp.core.run_plan import MIN_STEPS, MIN_TRAINED_TOKENS, describe_size, size_run


def test_small_sets_grow_epochs_until_the_step_floor() -> None:
    # the case: 10 rows, batch 8 -> 2 batches an epoch; 1 epoch was 2 steps and moved nothing
    size = size_run(10, 8, trained_tokens_per_epoch=1000)
    assert size.auto and size.steps >= MIN_STEPS and size.steps == size.epochs * 2
    assert size.warning is None


def test_the_token_floor_repeats_short_answers() -> None:
    size = size_run(8, 8, trained_tokens_per_epoch=20)  # 8 steps of 20 trained tokens: 160 < the floor
    assert size.trained_tokens >= MIN_TRAINED_TOKENS and size.steps == MIN_TRAINED_TOKENS // 20
    capped = size_run(1, 8, trained_tokens_per_epoch=1)
    assert capped.epochs == run_plan.MAX_EPOCHS and "trained tokens" in (capped.warning or "")


def test_large_sets_train_one_epoch() -> None:
    size = size_run(400, 8, trained_tokens_per_epoch=20_000, tokens_per_epoch=80_000)
    assert (size.epochs, size.steps, size.tokens, size.warning) == (1, 50, 80_000, None)


def test_hand_set_lengths_are_obeyed_and_warned_about() -> None:
    size = size_run(10, 8, epochs=1, trained_tokens_per_epoch=1000)
    assert (size.steps, size.auto) == (2, False)
    assert (
        size.warning and f"the floor is {MIN_STEPS}" in size.warning and "2 optimizer steps" in size.warning
    )
    capped = size_run(10, 8, steps=5, trained_tokens_per_epoch=1000)
    assert (capped.epochs, capped.steps) == (3, 5)  # cycles a third epoch for the fifth step


def test_no_rows_is_an_empty_run() -> None:
    assert size_run(0, 8).steps == 0


def test_the_plan_text_names_rows_epochs_steps_tokens_and_time() -> None:
    size = size_run(20, 8, trained_tokens_per_epoch=300, tokens_per_epoch=900)
    text = describe_size(size, "local")
    assert text.startswith(
        f"20 rows x {size.epochs} epochs = {size.steps} steps of batch 8 (sized from the rows)"
    )
    assert f"~{size.tokens:,} tokens" in text and "about" in text
    assert "about" not in describe_size(size, "tinker")  # a shared service's queue decides


def test_characters_estimate_tokens_and_trained_tokens() -> None:
    from machine_lsp.core.schema import Message

    convo = [Message(role="user", content="a" * 40), Message(role="assistant", content="b" * 8)]
    assert run_plan.estimate_tokens([convo, convo]) == (2 * (14 + 6), 2 * 6)


def test_a_scoped_run_keeps_to_the_step_floor_cycling_a_partial_epoch() -> None:
    # 27 rows in batches of 8: 4 batches an epoch; the plain rule rounds up to 2 epochs = 8 steps, which bled the
    # style into 25% of the probes (bench/scoped_sweep.py); a scoped run stops at the floor, 1.5 epochs in
    plain = size_run(27, 8, trained_tokens_per_epoch=1000)
    scoped = size_run(27, 8, trained_tokens_per_epoch=1000, scoped=True)
    assert (plain.steps, scoped.steps, scoped.epochs, scoped.batch_size) == (8, MIN_STEPS, 2, 8)
    assert scoped.grown_from is None and "1.5 epochs = 6 steps of batch 8" in describe_size(scoped, "local")


def test_a_scoped_run_grows_its_batch_so_the_floor_sees_every_row() -> None:
    size = size_run(120, 8, trained_tokens_per_epoch=2400, tokens_per_epoch=9600, scoped=True)
    assert (size.steps, size.epochs, size.batch_size, size.grown_from) == (MIN_STEPS, 1, 20, 8)
    assert (size.trained_tokens, size.tokens) == (2400, 9600)  # one pass
    assert "6 steps of batch 20 (grown from 8" in describe_size(size, "local")
    huge = size_run(
        1000, 8, trained_tokens_per_epoch=20_000, scoped=True
    )  # the batch stops growing at the cap
    assert (huge.batch_size, huge.steps) == (run_plan.MAX_SCOPED_BATCH, 8)
    hand = size_run(120, 8, epochs=1, scoped=True)  # set by hand: obeyed, batch untouched
    assert (hand.batch_size, hand.steps, hand.grown_from) == (8, 15, None)


def test_a_scoped_run_of_tiny_answers_still_meets_the_token_floor() -> None:
    size = size_run(9, 8, trained_tokens_per_epoch=30, scoped=True)  # 15 trained tokens a step
    assert size.steps == MIN_TRAINED_TOKENS // 15 + 1 and size.trained_tokens >= MIN_TRAINED_TOKENS


def test_the_schedule_cuts_the_sizes_batch() -> None:
    from machine_lsp.scaffold.config import TrainSection
    from machine_lsp.scaffold.support import schedule

    cfg = TrainSection()
    size = size_run(120, cfg.batch_size, scoped=True)
    plan = schedule(120, cfg, size)
    assert [len(b) for b in plan] == [20] * 6 and sorted(i for b in plan for i in b) == list(range(120))
    partial = schedule(27, cfg, size_run(27, cfg.batch_size, scoped=True))
    assert [len(b) for b in partial] == [
        8,
        8,
        8,
        3,
        8,
        8,
    ]  # an epoch, then the next epoch's first two batches
