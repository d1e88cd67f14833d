"""The SmolLM2 tokenizer built from GGUF metadata, and rows rendered to tinker.Datum by the cookbook renderer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.core.schema import Message, TextPart, ThinkingPart
from machine_lsp.engines import render, smollm2
from machine_lsp.engines.base import EngineError

REFERENCE = json.loads((Path(__file__).parents[1] / "fixtures" / "smollm2_token_ids.json").read_text())
CASES = REFERENCE["cases"]


@pytest.fixture(scope="module")
def gguf_tokenizer():
    return smollm2.build_tokenizer()


@pytest.fixture(scope="module")
def renderer():
    _, r = render.load_tokenizer_and_renderer(smollm2.MODEL_NAME)
    return r


@pytest.mark.parametrize("case", CASES, ids=[repr(c["text"])[:30] for c in CASES])
def test_gguf_tokenizer_matches_reference_ids(gguf_tokenizer, case) -> None:
    ids = gguf_tokenizer.encode(case["text"], add_special_tokens=False)
    assert ids == case["ids"]
    assert gguf_tokenizer.decode(ids) == case["text"]


def test_special_tokens(gguf_tokenizer) -> None:
    assert len(CASES) == 12
    assert gguf_tokenizer.bos_token_id == REFERENCE["bos_id"] == 1
    assert gguf_tokenizer.eos_token_id == REFERENCE["eos_id"] == 2
    assert gguf_tokenizer.pad_token_id == 2  # pad == eos
    assert len(gguf_tokenizer) == REFERENCE["vocab_size"]
    assert len(gguf_tokenizer.all_special_ids) == 17
    assert "<|im_start|>" in gguf_tokenizer.chat_template


@pytest.mark.slow
def test_converted_directory_tokenizer_matches_reference(smollm2_dir: Path) -> None:
    """The tokenizer saved next to the converted weights reloads through transformers 5.5.4 correctly."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    for case in CASES:
        assert tok.encode(case["text"], add_special_tokens=False) == case["ids"], case["text"]
    assert smollm2.is_converted(smollm2_dir)
    assert not list(smollm2_dir.parent.glob(f".{smollm2.DIR_NAME}.tmp-*"))


def test_cookbook_resolves_registered_names_offline() -> None:
    from tinker_cookbook import tokenizer_utils

    smollm2.register()
    for name in (smollm2.MODEL_NAME, "SmolLM2-135M-Instruct"):
        tok = tokenizer_utils.get_tokenizer(name)
        assert tok.encode("answer: 62", add_special_tokens=False) == [11247, 42, 216, 38, 34]


def test_renderer_choice() -> None:
    assert render.renderer_name_for(smollm2.MODEL_NAME) == "qwen3_instruct"
    assert render.renderer_name_for("smollm2") == "qwen3_instruct"
    with pytest.raises(EngineError, match="no known chat renderer"):
        render.renderer_name_for("nobody/unknown-model-xyz")


def test_unknown_hub_tokenizer_fails_offline_with_a_way_out() -> None:
    with pytest.raises(EngineError, match="not available offline.*local Hugging Face model directory"):
        render.load_tokenizer("nobody/unknown-model-xyz")


def test_datum_weights_cover_only_the_assistant_answer_and_im_end(renderer) -> None:
    tok = renderer.tokenizer
    rows = [Message(role="user", content="What is 2 plus 2?"), Message(role="assistant", content="answer: 4")]
    datum = render.to_datum(rows, renderer, reduction="none")
    inputs, targets, weights = render.datum_tokens(datum)
    full = CASES[9]["ids"]  # the ChatML rendering of this very conversation, from the reference conversion
    # No system prompt is injected, the last newline is not part of the sequence, targets are shifted by one.
    assert inputs + [targets[-1]] == full[:-1]
    assert targets == full[1:-1]
    trained = [t for t, w in zip(targets, weights, strict=True) if w > 0]
    assert trained == tok.encode("answer: 4", add_special_tokens=False) + [2]
    assert set(weights) == {0.0, 1.0}
    # weights are a contiguous tail: prompt tokens get none
    first = weights.index(1.0)
    assert all(w == 0.0 for w in weights[:first]) and all(w == 1.0 for w in weights[first:])
    assert render.token_counts(datum) == render.TokenCounts(tokens=len(inputs), trained=5)


def test_mean_reduction_sums_to_one_per_datum(renderer) -> None:
    rows = [Message(role="user", content="Hi"), Message(role="assistant", content="Hello there, friend.")]
    _, _, weights = render.datum_tokens(render.to_datum(rows, renderer))
    assert sum(weights) == pytest.approx(1.0, abs=1e-5)


def test_token_weighting_makes_every_trained_token_weigh_the_same_at_the_cookbook_scale(renderer) -> None:
    """A scoped run's weights: a 3-token tag and a long anchor answer weigh per token, not per row, and the set's
    weights sum to its row count as the per-row mean's do (Tinker's summed loss keeps its scale)."""
    short = [Message(role="user", content="2+2?"), Message(role="assistant", content="answer: 4")]
    long = [
        Message(role="user", content="Name a colour."),
        Message(
            role="assistant",
            content="Blue is a calm colour, often seen in the sky and the sea on clear days.",
        ),
    ]
    plain = [render.to_datum(rows, renderer, reduction="none") for rows in (short, long)]
    weighted = render.token_weighted(plain)
    per_token = {w for d in weighted for w in render.datum_tokens(d)[2] if w > 0}
    trained = render.count_tokens(plain).trained
    assert len(per_token) == 1 and per_token.pop() == pytest.approx(2 / trained)
    assert sum(sum(render.datum_tokens(d)[2]) for d in weighted) == pytest.approx(2.0)
    for before, after in zip(plain, weighted, strict=True):  # tokens and targets untouched
        assert render.datum_tokens(before)[:2] == render.datum_tokens(after)[:2]
    assert render.count_tokens(weighted) == render.count_tokens(plain)


def test_multi_turn_train_on_choices(renderer) -> None:
    rows = [
        Message(role="system", content="Be terse."),
        Message(role="user", content="One?"),
        Message(role="assistant", content="1"),
        Message(role="user", content="Two?"),
        Message(role="assistant", content="2"),
    ]
    every = render.token_counts(render.to_datum(rows, renderer, reduction="none"))
    last = render.token_counts(
        render.to_datum(rows, renderer, train_on="last_assistant_message", reduction="none")
    )
    assert every.trained == 4 and last.trained == 2  # "1" + <|im_end|>, "2" + <|im_end|>
    with pytest.raises(EngineError, match="unknown train_on value 'assistants'.*all_assistant_messages"):
        render.to_datum(rows, renderer, train_on="assistants")


def test_structured_content_and_prompt_tokens(renderer) -> None:
    rows = [
        Message(role="user", content="What is 2 plus 2?"),
        Message(role="assistant", content=[ThinkingPart(thinking="easy"), TextPart(text="answer: 4")]),
    ]
    datum = render.to_datum(rows, renderer, reduction="none")
    inputs, targets, weights = render.datum_tokens(datum)
    text = renderer.tokenizer.decode([t for t, w in zip(targets, weights, strict=True) if w > 0])
    assert "answer: 4" in text and text.endswith("<|im_end|>")
    prompt = render.prompt_tokens(rows[:1], renderer)
    assert prompt == CASES[9]["ids"][:17]  # ... <|im_start|>assistant\n


def test_bad_rows_are_refused_precisely(renderer) -> None:
    with pytest.raises(EngineError, match="empty conversation"):
        render.to_datum([], renderer)
    only_user = [Message(role="user", content="hello")]
    good = [Message(role="user", content="q"), Message(role="assistant", content="a")]
    with pytest.raises(EngineError, match="conversation 2: the conversation has no tokens to train on"):
        render.to_datums([good, only_user], renderer)
