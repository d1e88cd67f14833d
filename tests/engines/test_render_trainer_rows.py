"""Published OpenAI / tinker-cookbook rows render through the cookbook renderer for SmolLM2 (tokenizer only): tools
declared by the renderer's own `create_conversation_prefix_with_tools`, developer as system, weight/trainable
deciding the trained turns, and the readiness report counting trained tokens accordingly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.core.schema import TrainingRow, decode_training_row, read_training_rows
from machine_lsp.core.validate import validate_bytes
from machine_lsp.engines import readiness, render, smollm2

FIXTURES = Path(__file__).parents[1] / "fixtures" / "trainer_rows"
FILES = sorted(FIXTURES.glob("*.jsonl"))


@pytest.fixture(scope="module")
def loaded():
    return render.load_tokenizer_and_renderer(smollm2.MODEL_NAME)


def rendered(row: TrainingRow, renderer) -> tuple[list[int], list[int], list[float]]:
    datum = render.to_datum(row.messages, renderer, reduction="none", tools=row.extra.get("tools"))
    return render.datum_tokens(datum)


def trained_text(tokenizer, targets: list[int], weights: list[float]) -> str:
    return tokenizer.decode([t for t, w in zip(targets, weights, strict=True) if w > 0])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_published_rows_render_with_trained_tokens(loaded, path: Path) -> None:
    tokenizer, renderer = loaded
    for line_no, row in read_training_rows(path):
        inputs, targets, weights = rendered(row, renderer)
        assert any(w > 0 for w in weights), (path.name, line_no)
        text = tokenizer.decode(inputs)
        for tool in row.extra.get("tools", []):
            assert f'"name": "{tool["function"]["name"]}"' in text  # declared in the prompt
        assert "<|im_start|>developer" not in text


def test_tools_are_declared_by_the_renderer_itself(loaded) -> None:
    from tinker_cookbook.third_party.openai_compat import openai_tools_to_tinker

    tokenizer, renderer = loaded
    row = next(r for _, r in read_training_rows(FIXTURES / "openai_tools.jsonl"))
    inputs, _, _ = rendered(row, renderer)
    prefix = renderer.create_conversation_prefix_with_tools(openai_tools_to_tinker(row.extra["tools"]), "")
    assert tokenizer.decode(inputs).startswith(f"<|im_start|>system\n{prefix[0]['content']}<|im_end|>")


def test_system_prompt_is_kept_beside_the_tools(loaded) -> None:
    tokenizer, renderer = loaded
    row = next(r for _, r in read_training_rows(FIXTURES / "openai_tools.jsonl"))
    row.messages.insert(
        0, decode_training_row(b'{"messages":[{"role":"developer","content":"Be terse."}]}').messages[0]
    )
    text = tokenizer.decode(rendered(row, renderer)[0])
    assert text.startswith("<|im_start|>system\nBe terse.\n\n# Tools")


def test_developer_renders_as_system(loaded) -> None:
    tokenizer, renderer = loaded
    row = next(r for _, r in read_training_rows(FIXTURES / "openai_developer.jsonl"))
    text = tokenizer.decode(rendered(row, renderer)[0])
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant that answers programming")


def test_weight_zero_turns_are_not_trained(loaded) -> None:
    tokenizer, renderer = loaded
    row = next(r for _, r in read_training_rows(FIXTURES / "openai_multiturn_weight.jsonl"))
    _, targets, weights = rendered(row, renderer)
    assert (
        trained_text(tokenizer, targets, weights)
        == "Paris, as if everyone doesn't know that already.<|im_end|>"
    )


def test_trainable_false_turns_are_not_trained(loaded) -> None:
    tokenizer, renderer = loaded
    rows = [r for _, r in read_training_rows(FIXTURES / "tinker_cookbook_trainable.jsonl")]
    _, targets, weights = rendered(rows[1], renderer)
    assert trained_text(tokenizer, targets, weights) == "Hello again!<|im_end|>"


def test_readiness_counts_trained_tokens_by_weight(loaded) -> None:
    tokenizer, _ = loaded
    data = (FIXTURES / "openai_multiturn_weight.jsonl").read_bytes()
    report = validate_bytes(data)
    result = readiness.check_readiness(data, report, smollm2.MODEL_NAME)
    assert result.findings == []
    expected = sum(
        len(tokenizer.encode(text + "<|im_end|>", add_special_tokens=False))
        for text in (
            "Paris, as if everyone doesn't know that already.",
            "Oh, just some guy named William Shakespeare. Ever heard of him?",
        )
    )
    assert result.stats["trained_tokens"] == expected


def test_readiness_flags_a_row_whose_turns_all_have_weight_zero(loaded) -> None:
    line = json.dumps(
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "weight": 0}]}
    ).encode()
    result = readiness.check_readiness(line + b"\n", validate_bytes(line), smollm2.MODEL_NAME)
    assert [f.code for f in result.findings] == ["no-trained-tokens"]
    assert "weight 0" in result.findings[0].message
