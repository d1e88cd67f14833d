"""`machine export adapter`: each format loaded by its real consumer here, answering like the served checkpoint.

peft -> transformers + peft (`PeftModel.from_pretrained` on the base directory, greedy `generate`); gguf-merged ->
llama_cpp on the file alone (the default type, f16: the file `machine serve` serves, as right as torch row by row);
gguf-lora -> llama_cpp on the exported base GGUF (`--gguf-type f32`: token for token) with `lora_path`. The prompts
are the held-out rows of examples/minimal-sft; the reference is the torch backend serving the same checkpoint
(conftest's `trained_torch`, shared with the backend test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llama_helpers import MAX_TOKENS, assert_as_right, decode_all
from serve_helpers import machine

ROWS = 8  # of the 24 the backend test compares: each consumer decodes them alone, one after another


@pytest.fixture(scope="module")
def reference(
    trained_checkpoint: Path, eval_prompts: list[list[int]], trained_torch: dict, eval_expected: list[str]
) -> dict[str, Any]:
    """The torch backend's greedy answers for the trained checkpoint (conftest), the first ROWS of them."""
    return {
        "prompts": eval_prompts[:ROWS],
        "expected": eval_expected[:ROWS],
        "answers": trained_torch["answers"][:ROWS],
        "stop_ids": trained_torch["stop_ids"],
        "checkpoint": trained_checkpoint,
    }


def export(project: Path, fmt: str, out: Path, *options: str) -> list[Path]:
    argv = ["export", "adapter", "latest", "--format", fmt, "--out", str(out), *options]
    done = machine(project, *argv, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return [Path(line) for line in done.stdout.splitlines()]


def llama_answers(reference: dict[str, Any], model: Path, lora: Path | None = None) -> tuple[list, Any]:
    """The exported file(s) alone in llama_cpp (with `lora_path` for a LoRA GGUF), greedy; and the tokenizer."""
    from machine_lsp.engines import smollm2
    from machine_lsp.serve import llama_backend

    gguf = llama_backend.LlamaModel(path=model, threads=1, context_length=2048, lora_path=lora)
    loaded = llama_backend.serving(gguf, smollm2.MODEL_NAME)
    answers = decode_all(llama_backend.generator_for(loaded), reference["prompts"], MAX_TOKENS)
    return answers, loaded.tokenizer


@pytest.mark.slow
def test_peft_export_loads_in_peft(
    trained_project: Path, tmp_path: Path, reference: dict, smollm2_dir: Path
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    written = export(trained_project, "peft", tmp_path / "peft")
    assert sorted(p.name for p in written) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "manifest.json",
    ]
    base = AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(tmp_path / "peft")).eval()
    stop_ids = reference["stop_ids"]
    for prompt, (want, _) in zip(reference["prompts"], reference["answers"], strict=True):
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=MAX_TOKENS,
                do_sample=False,
                eos_token_id=sorted(stop_ids),
                pad_token_id=2,
            )
        got = [t for t in out[0, len(prompt) :].tolist() if t not in stop_ids]
        assert got == want


@pytest.mark.slow
def test_gguf_merged_export_loads_in_llama_cpp(
    trained_project: Path, tmp_path: Path, reference: dict
) -> None:
    import filecmp

    from machine_lsp.engines import gguf_export

    (merged,) = export(trained_project, "gguf-merged", tmp_path / "merged")
    assert merged.name == f"{reference['checkpoint'].name}-f16.gguf"
    served = gguf_export.cached_model_path(reference["checkpoint"], "f16")
    assert filecmp.cmp(merged, served, shallow=False)  # the very file `machine serve` serves
    answers, tokenizer = llama_answers(reference, merged)
    assert_as_right(reference["answers"], answers, reference["expected"], tokenizer)


@pytest.mark.slow
def test_gguf_lora_export_loads_in_llama_cpp_with_lora_path(
    trained_project: Path, tmp_path: Path, reference: dict
) -> None:
    import gguf

    lora, base = export(trained_project, "gguf-lora", tmp_path / "lora", "--gguf-type", "f32")
    assert (lora.name, base.name) == (f"{reference['checkpoint'].name}.lora.gguf", "base-f32.gguf")
    fields = gguf.GGUFReader(str(lora)).fields
    config = json.loads((reference["checkpoint"] / "adapter_config.json").read_text())
    assert fields["general.type"].contents() == "adapter"
    assert fields["adapter.lora.alpha"].contents() == config["lora_alpha"]
    assert llama_answers(reference, base, lora)[0] == reference["answers"]


def test_export_adapter_refuses_what_it_cannot_export(trained_project: Path, tmp_path: Path) -> None:
    done = machine(trained_project, "export", "adapter", "base", "--format", "peft")
    assert done.returncode == 2 and "has no adapter to export" in done.stderr
    done = machine(trained_project, "export", "adapter", "latest")
    assert done.returncode == 2 and "usage: machine export adapter CHECKPOINT --format" in done.stderr
    done = machine(trained_project, "export", "adapter", "latest", "--format", "peft", "--gguf-type", "f16")
    assert done.returncode == 2 and "--gguf-type is the type of a GGUF" in done.stderr
    done = machine(trained_project, "export", "adapter", "nope", "--format", "peft")
    assert done.returncode == 2 and "unknown checkpoint 'nope'" in done.stderr
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "adapter_config.json").symlink_to(victim)
    done = machine(
        trained_project, "export", "adapter", "latest", "--format", "peft", "--out", str(tmp_path / "out")
    )
    assert done.returncode == 1 and "symbolic link" in done.stderr
    assert victim.read_text() == "keep"
