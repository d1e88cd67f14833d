"""How long a training run is: the one rule that turns rows into epochs and optimizer steps (pure).

`machine train run`, the editor's job plan, the scaffolded train_sft.py and the estimate all size a run here.

The rule (grounded in `bench/run_floor.py`, see docs/TRAINING.md): a run needs at least `MIN_STEPS` optimizer steps
and `MIN_TRAINED_TOKENS` trained (loss-bearing) tokens to move the embedded model. With epochs left unset, a small
set is repeated (epochs grow, up to `MAX_EPOCHS`) until both floors are met; a large set trains one epoch. Epochs
or a step cap set by hand are obeyed, and a run that then falls under a floor gets a warning naming it.

A scoped run (the store's tags plus anchor rows, `core.anchors`) is sized differently, because its risk is the
style bleeding into other answers and bleed grows with optimizer steps, not with rows (`bench/scoped_sweep.py`: at
constant batch 8, 24 tags took 8 steps and bled into 25% of the probes, 80 tags 11 steps and 58%). It trains
`MIN_STEPS` steps (cycling a partial epoch rather than rounding up to whole epochs), and once its rows fill more
than `MIN_STEPS` batches the batch grows (up to `MAX_SCOPED_BATCH`) so those steps still see every row once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec

from machine_lsp.core.schema import Message, text_of

# Measured (bench/run_floor.py, docs/BENCHMARKS.md): 10 or 20 rows x 2 steps leave the held-out format at 0/8,
# 6 steps reach 8/8; 12 steps on 10 rows bleed the format into 12/12 off-distribution probes.
MIN_STEPS = 6
MIN_TRAINED_TOKENS = 200  # ~ 6 steps over 10 short answers ("answer: 42"): a set of tiny answers repeats more
MAX_EPOCHS = 32  # a handful of rows is repeated at most this often
# past MIN_STEPS x this many rows a scoped run takes more steps rather than a bigger batch
MAX_SCOPED_BATCH = 128
LOCAL_TOKENS_PER_SECOND = 60.0  # local engine, 1 thread, LoRA r16 (FACTS: ~197 tokens in 3.1-3.4 s per step)
LOCAL_LOAD_SECONDS = 10.0  # loading the converted SmolLM2 and building the trainer
CHARS_PER_TOKEN = 4  # English chat text; the language server estimates without a tokenizer
TOKENS_PER_MESSAGE = 4  # the chat template's role header and end-of-turn marker


def estimate_tokens(conversations: Iterable[Sequence[Message]]) -> tuple[int, int]:
    """(tokens, trained tokens) of one pass over `conversations`, estimated from characters: the answer to
    "how big is this run" where no tokenizer may be loaded. Assistant messages count as trained."""
    tokens = trained = 0
    for messages in conversations:
        for message in messages:
            n = len(text_of(message)) // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE
            tokens += n
            trained += n if message.role == "assistant" else 0
    return tokens, trained


class RunSize(msgspec.Struct, kw_only=True):
    rows: int
    batch_size: int
    epochs: int
    steps: int
    trained_tokens: int  # over the whole run (estimated where no tokenizer ran)
    tokens: int  # every token fed to the model over the run
    auto: bool  # epochs were chosen by the rule, not set by hand
    grown_from: int | None = None  # the configured batch size, when a scoped run grew it
    anchors: int = 0  # of `rows`, the base model's answers added to scope the run (core.anchors)
    warning: str | None = None  # the run falls under a floor

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(self.rows / self.batch_size) if self.rows else 0


def size_run(
    rows: int,
    batch_size: int,
    *,
    epochs: int | None = None,
    steps: int | None = None,
    trained_tokens_per_epoch: int = 0,
    tokens_per_epoch: int = 0,
    scoped: bool = False,
) -> RunSize:
    """Epochs and steps for `rows` rows in batches of `batch_size`.

    `epochs`/`steps` are the hand-set values (None: let the rule choose); `steps` caps the run and, when it asks
    for more than `epochs` give, further epochs are cycled (as `scaffold.support.schedule` does). `scoped`: the
    rows include anchors, and an auto-sized run keeps to the step floor (the module's docstring says why)."""
    if rows <= 0:
        return RunSize(
            rows=0, batch_size=batch_size, epochs=0, steps=0, trained_tokens=0, tokens=0, auto=False
        )
    auto = epochs is None and steps is None
    configured = batch_size
    if auto and scoped:
        batch_size = max(batch_size, min(MAX_SCOPED_BATCH, math.ceil(rows / MIN_STEPS)))
    per_epoch = math.ceil(rows / batch_size)
    chosen_epochs, total = _epochs_and_steps(per_epoch, epochs, steps, scoped, trained_tokens_per_epoch)
    fraction = total / per_epoch  # epochs' worth of data the steps see
    trained = round(trained_tokens_per_epoch * fraction)
    size = RunSize(
        rows=rows,
        batch_size=batch_size,
        epochs=chosen_epochs,
        steps=total,
        trained_tokens=trained,
        tokens=round(tokens_per_epoch * fraction),
        auto=auto,
        grown_from=configured if batch_size != configured else None,
    )
    size.warning = too_short(size, known_tokens=trained_tokens_per_epoch > 0)
    return size


def _epochs_and_steps(
    per_epoch: int, epochs: int | None, steps: int | None, scoped: bool, trained_tokens_per_epoch: int
) -> tuple[int, int]:
    """(epochs, steps): hand-set values obeyed; else a scoped run keeps to the floors (cycling a partial epoch), a
    plain one repeats whole epochs until it clears them."""
    if steps is not None:
        return max(epochs or 1, math.ceil(steps / per_epoch)), steps
    if epochs is not None:
        return epochs, epochs * per_epoch
    if scoped:
        floor = max(MIN_STEPS, per_epoch, _steps_for_tokens(trained_tokens_per_epoch, per_epoch))
        total = min(MAX_EPOCHS * per_epoch, floor)
        return math.ceil(total / per_epoch), total
    by_steps = math.ceil(MIN_STEPS / per_epoch)
    by_tokens = math.ceil(MIN_TRAINED_TOKENS / trained_tokens_per_epoch) if trained_tokens_per_epoch else 1
    chosen = min(MAX_EPOCHS, max(1, by_steps, by_tokens))
    return chosen, chosen * per_epoch


def _steps_for_tokens(trained_tokens_per_epoch: int, per_epoch: int) -> int:
    """Steps that reach the trained-token floor at this epoch's tokens per step (1 when they are unknown)."""
    if not trained_tokens_per_epoch:
        return 1
    return math.ceil(MIN_TRAINED_TOKENS * per_epoch / trained_tokens_per_epoch)


def too_short(size: RunSize, *, known_tokens: bool = True) -> str | None:
    """The plain warning for a run under a floor, naming the floor; None when it clears both."""
    if size.steps < MIN_STEPS:
        return (
            f"too short to move the model: {size.steps} optimizer step{'s' * (size.steps != 1)} "
            f"(the floor is {MIN_STEPS}); leave epochs and steps unset to let the rows size the run"
        )
    if known_tokens and size.trained_tokens < MIN_TRAINED_TOKENS:
        return (
            f"too short to move the model: ~{size.trained_tokens} trained tokens (the floor is "
            f"{MIN_TRAINED_TOKENS}); tag more turns or raise epochs"
        )
    return None


def estimated_seconds(size: RunSize, engine: str) -> float | None:
    """Wall time of a local run (loading + steps at the measured token rate); None for Tinker (a shared service's
    queue decides)."""
    if engine != "local":
        return None
    return LOCAL_LOAD_SECONDS + size.tokens / LOCAL_TOKENS_PER_SECOND


def describe_size(size: RunSize, engine: str) -> str:
    """`20 rows x 4 epochs = 12 steps of batch 8 (...), ~420 trained of ~1,800 tokens, about 40 s` (+ warning)."""
    how = "sized from the rows" if size.auto else "as configured"
    rows = (
        f"{size.rows} rows"
        if not size.anchors
        else f"{size.rows} rows ({size.rows - size.anchors} + {size.anchors} anchors)"
    )
    text = (
        f"{rows} x {_epochs(size)} = {size.steps} "
        f"step{'s' * (size.steps != 1)} of batch {min(size.batch_size, size.rows)} ({_grown(size)}{how}), "
        f"~{size.trained_tokens:,} trained of ~{size.tokens:,} tokens"
    )
    seconds = estimated_seconds(size, engine)
    if seconds is not None:
        text += f", about {_duration(seconds)}"
    if size.warning:
        text += f"; warning: {size.warning}"
    return text


def _epochs(size: RunSize) -> str:
    """ "4 epochs", or "1.5 epochs" when the steps end inside an epoch."""
    if (
        not size.batches_per_epoch
        or size.steps % size.batches_per_epoch == 0
        or size.steps < size.batches_per_epoch
    ):
        return f"{size.epochs} epoch{'s' * (size.epochs != 1)}"
    return f"{size.steps / size.batches_per_epoch:.1f} epochs"


def _grown(size: RunSize) -> str:
    if size.grown_from is None:
        return ""
    return f"grown from {size.grown_from}: a scoped run keeps near {MIN_STEPS} steps; "


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"
