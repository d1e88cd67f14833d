"""Checkpoints as GGUF files for llama.cpp (and Ollama, LM Studio): the merged model, or the LoRA adapter alone.

* Written with the `gguf` package. Every metadata key except the file type (architecture, hyper-parameters, the
  tokenizer, the chat template) is copied from the GGUF the embedded model ships in (`smollm2.gguf_path()`), so
  llama.cpp sees exactly the model the HF directory was converted from; only the tensors are ours.
* Tensor names and the q/k row order follow llama.cpp's converter (`convert_hf_to_gguf.py`, `LlamaModel`):
  transformers un-permutes q/k when it reads a llama GGUF, so writing them back applies llama.cpp's permutation.
  Writing the base model therefore reproduces the shipped GGUF's tensors exactly (dequantized); a test checks it.
* A merged model is the peft adapter merged into the float32 base weights (`merge_and_unload`), written as f32 or
  f16 by the `gguf` package, or as q8_0 by llama.cpp's own quantizer (`llama_model_quantize`, what `llama-quantize`
  runs) from that f32 file. `GGUF_TYPES` lists them; `DEFAULT_TYPE` is what `machine serve` and `machine export
  adapter` use unless told (the choice, measured against the torch reference: docs/SERVE.md).
* A LoRA GGUF carries `lora_a`/`lora_b` per target weight (`general.type=adapter`, `adapter.lora.alpha`), the
  layout llama.cpp's `--lora` and Ollama's `ADAPTER` read (`convert_lora_to_gguf.py`).
* Only llama-architecture models whose tokenizer metadata we have (the embedded SmolLM2) are supported; other
  bases get a precise `EngineError` (serve them with `--backend torch`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from machine_lsp.engines import smollm2
from machine_lsp.engines.base import EngineError

GgufType = Literal["f32", "f16", "q8_0"]
GGUF_TYPES: tuple[GgufType, ...] = ("f32", "f16", "q8_0")
QUANTIZED: dict[str, int] = {
    "q8_0": 7
}  # llama.cpp's `LLAMA_FTYPE_MOSTLY_Q8_0`: made by its quantizer from f32
DEFAULT_TYPE: GgufType = "f16"  # as right as torch on the minimal-sft eval; q8_0 was not (docs/SERVE.md)
WRITER_VERSION = 1
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.weight$")
_LAYER_NORM = re.compile(r"^model\.layers\.(\d+)\.(input_layernorm|post_attention_layernorm)\.weight$")
_PROJ = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_output",
    "gate_proj": "ffn_gate",
    "up_proj": "ffn_up",
    "down_proj": "ffn_down",
}
_NORM = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
_SKIP = {"lm_head.weight"}  # tied to the embeddings in SmolLM2; llama.cpp reuses token_embd


def gguf_name(hf_name: str) -> str:
    """llama.cpp's tensor name for a transformers llama tensor name; EngineError for one it has no slot for."""
    if hf_name in _GLOBAL:
        return _GLOBAL[hf_name]
    layer = _LAYER.match(hf_name)
    if layer and layer.group(3) in _PROJ:
        return f"blk.{layer.group(1)}.{_PROJ[layer.group(3)]}.weight"
    norm = _LAYER_NORM.match(hf_name)
    if norm:
        return f"blk.{norm.group(1)}.{_NORM[norm.group(2)]}.weight"
    raise EngineError(f"no llama.cpp tensor for {hf_name!r}: only llama-architecture models export to GGUF")


def permute_rows(weights: Any, heads: int) -> Any:
    """llama.cpp's q/k row order (`LlamaModel.permute`): rotary halves interleaved per head."""
    rows = weights.shape[0]
    return (
        weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


class _Base:
    """The base GGUF's metadata: what every file we write copies, and the head counts the permutation needs."""

    def __init__(self, path: Path) -> None:
        import gguf

        reader = gguf.GGUFReader(str(path))
        fields = reader.fields
        self.path = path
        self.arch = str(fields["general.architecture"].contents())
        if self.arch != "llama":
            raise EngineError(f"{path.name}: architecture {self.arch!r}; only llama models export to GGUF")
        self.heads = int(fields["llama.attention.head_count"].contents())
        self.kv_heads = int(fields["llama.attention.head_count_kv"].contents())
        self.context_length = int(fields["llama.context_length"].contents())
        self.fields = [f for name, f in fields.items() if not name.startswith("GGUF.")]

    def copy_metadata(self, writer: Any, *, skip: Iterable[str] = ()) -> None:
        import gguf

        skipped = {"general.architecture", *skip}
        for field in self.fields:
            if field.name in skipped:
                continue
            kind = gguf.GGUFValueType(field.types[0])
            sub = gguf.GGUFValueType(field.types[-1]) if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)

    def oriented(self, hf_name: str, weights: Any) -> Any:
        """`weights` in llama.cpp's row order (q and k rows permuted, everything else as is)."""
        if hf_name.endswith("self_attn.q_proj.weight") or ".self_attn.q_proj." in hf_name:
            return permute_rows(weights, self.heads)
        if hf_name.endswith("self_attn.k_proj.weight") or ".self_attn.k_proj." in hf_name:
            return permute_rows(weights, self.kv_heads)
        return weights


def base_for(base_model: str) -> _Base:
    if not smollm2.is_smollm2(base_model):
        raise EngineError(
            f"GGUF export knows the embedded model ({smollm2.MODEL_NAME}) only, not {base_model!r}; "
            "serve it with --backend torch"
        )
    return _Base(smollm2.gguf_path())


def _write_atomically(out: Path, fill: Callable[[Path], None]) -> Path:
    """`fill(temp)` writes a file next to `out`, then it is renamed over `out` (never written through a link)."""
    out = Path(out)
    if out.is_symlink():
        raise EngineError(f"{out} is a symbolic link; refusing to write through it")
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(handle)
    temp = Path(temp_name)
    try:
        fill(temp)
        os.replace(temp, out)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return out


def write_model(state: dict[str, Any], base: _Base, out: Path, dtype: GgufType = "f32") -> Path:
    """Write a transformers llama state dict (numpy float32 arrays) as an f32 or f16 GGUF model file at `out`
    (q8_0: `quantize` this f32 file)."""
    import gguf
    import numpy as np

    if dtype not in ("f32", "f16"):
        raise ValueError(f"write_model writes f32 or f16, not {dtype!r} (quantize the f32 file)")
    file_type = gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16

    def fill(temp: Path) -> None:
        writer = gguf.GGUFWriter(str(temp), base.arch)
        base.copy_metadata(writer, skip={"general.file_type", "general.quantization_version"})
        writer.add_file_type(int(file_type))
        for hf_name, weights in state.items():
            if hf_name in _SKIP:
                continue
            array = np.ascontiguousarray(base.oriented(hf_name, weights), dtype=np.float32)
            if dtype == "f16" and array.ndim > 1:  # norms stay f32, as llama.cpp's converter keeps them
                array = array.astype(np.float16)
            writer.add_tensor(gguf_name(hf_name), array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    return _write_atomically(out, fill)


def merged_state(
    checkpoint_dir: Path | None, base_model: str, store_root: Path | None = None
) -> dict[str, Any]:
    """The float32 weights the torch backend serves: the base, with the checkpoint's LoRA merged when given."""
    import torch

    from machine_lsp.engines.local import LocalEngine

    engine = LocalEngine(store_root=store_root)
    model = engine.sampler_for(base_model, str(checkpoint_dir) if checkpoint_dir is not None else None).model
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    with torch.no_grad():
        return {name: tensor.detach().float().numpy() for name, tensor in model.state_dict().items()}


# ---------------------------------------------------------------------------------------------------------------
# LoRA adapters

_PEFT_KEY = re.compile(r"^base_model\.model\.(.+)\.(lora_A|lora_B)\.weight$")


def lora_tensors(checkpoint_dir: Path, base: _Base) -> tuple[dict[str, Any], float]:
    """{llama.cpp name: array} for a peft adapter, and the alpha llama.cpp scales it by (alpha / rank)."""
    from safetensors.numpy import load_file

    config = json.loads((checkpoint_dir / "adapter_config.json").read_text())
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    if config.get("use_dora"):
        raise EngineError(f"{checkpoint_dir}: DoRA adapters have no llama.cpp LoRA form; export gguf-merged")
    if config.get("use_rslora"):
        alpha = alpha * rank**0.5  # rsLoRA scales by alpha/sqrt(r); llama.cpp by alpha/r
    tensors: dict[str, Any] = {}
    for key, array in load_file(str(checkpoint_dir / "adapter_model.safetensors")).items():
        match = _PEFT_KEY.match(key)
        if match is None:
            raise EngineError(f"{checkpoint_dir}: adapter tensor {key!r} is not a LoRA A/B weight")
        hf_name = f"{match.group(1)}.weight"
        target = gguf_name(hf_name)
        if match.group(2) == "lora_A":
            tensors[f"{target}.lora_a"] = array.astype("float32")
        else:  # B's rows are the weight's rows: they take the q/k permutation
            tensors[f"{target}.lora_b"] = base.oriented(hf_name, array.astype("float32"))
    return tensors, alpha


def write_lora(checkpoint_dir: Path, base_model: str, out: Path) -> Path:
    """Write the checkpoint's peft adapter as a llama.cpp LoRA GGUF at `out`."""
    import gguf
    import numpy as np

    base = base_for(base_model)
    tensors, alpha = lora_tensors(checkpoint_dir, base)

    def fill(temp: Path) -> None:
        writer = gguf.GGUFWriter(str(temp), base.arch)
        writer.add_string("general.type", "adapter")
        writer.add_string("adapter.type", "lora")
        writer.add_float32("adapter.lora.alpha", alpha)
        writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))
        for name, array in tensors.items():
            writer.add_tensor(name, np.ascontiguousarray(array))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    return _write_atomically(out, fill)


# ---------------------------------------------------------------------------------------------------------------
# Quantized types: llama.cpp's own quantizer


def llama_cpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def quantize(source: Path, out: Path, gguf_type: GgufType) -> Path:
    """`source` (an f32 GGUF) quantized to `gguf_type` by llama.cpp (`llama_model_quantize`), written atomically."""
    if not llama_cpp_installed():
        raise EngineError(
            f"a {gguf_type} GGUF is made by llama.cpp's quantizer: pip install '.[serve]' (or --gguf-type f32)"
        )
    import ctypes
    import logging

    import llama_cpp

    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # its log callback: no line per tensor
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANTIZED[gguf_type]
    params.nthread = max(1, len(os.sched_getaffinity(0)) // 2)

    def fill(temp: Path) -> None:
        code = llama_cpp.llama_model_quantize(str(source).encode(), str(temp).encode(), ctypes.byref(params))
        if code != 0:
            raise EngineError(f"llama.cpp could not quantize {source.name} to {gguf_type} (code {code})")

    return _write_atomically(out, fill)


# ---------------------------------------------------------------------------------------------------------------
# The per-checkpoint cache `machine serve --backend llama.cpp` loads

CACHE_DIR = "llama.cpp"  # inside a checkpoint directory; the base's lives under the model cache


def _fingerprint(checkpoint_dir: Path | None, gguf_type: GgufType) -> dict[str, Any]:
    import hashlib

    info: dict[str, Any] = {
        "writer_version": WRITER_VERSION,
        "gguf_type": gguf_type,
        "base_gguf_size": smollm2.gguf_path().stat().st_size,
    }
    if checkpoint_dir is not None:
        for name in ADAPTER_FILES:
            info[name] = hashlib.sha256((checkpoint_dir / name).read_bytes()).hexdigest()
    return info


def cached_model_path(checkpoint_dir: Path | None, gguf_type: GgufType = DEFAULT_TYPE) -> Path:
    """Where the merged GGUF of `checkpoint_dir` (None: the base model) is cached."""
    folder = (
        checkpoint_dir / CACHE_DIR
        if checkpoint_dir is not None
        else smollm2.cache_root() / "models" / f"{smollm2.DIR_NAME}-gguf"
    )
    return folder / f"model-{gguf_type}.gguf"


def marker_path(model: Path) -> Path:
    """The marker beside a cached GGUF: the fingerprint (adapter hashes, type, writer) it was written for."""
    return model.with_suffix(".json")


def _is_fresh(model: Path, want: dict[str, Any]) -> bool:
    try:
        return json.loads(marker_path(model).read_text()) == want and model.is_file()
    except (OSError, ValueError):
        return False


def _keep_others(folder: Path, temp: Path, rebuilt: set[str]) -> None:
    """Hard-link every other file of the cache folder into the build's `temp` (a build replaces its own type's
    GGUF and marker only: the other types, and markers other versions of this code wrote, stay)."""
    if not folder.is_dir():
        return
    for old in folder.iterdir():
        if old.name not in rebuilt and old.is_file() and not old.is_symlink():
            os.link(old, temp / old.name)


def ensure_model_gguf(
    checkpoint_dir: Path | None,
    base_model: str = smollm2.MODEL_NAME,
    *,
    gguf_type: GgufType = DEFAULT_TYPE,
    store_root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The merged GGUF of `gguf_type` for `checkpoint_dir` (None: the base), written once and reused while the
    adapter is the same (its marker records the adapter's hashes); written atomically under a lock
    (`core.build_once`). A quantized type is made from the cached f32 file when that one is current, else from an
    f32 file written for it and deleted after (a checkpoint keeps only the type it is served as)."""
    from machine_lsp.core.build_once import build_once

    if gguf_type not in GGUF_TYPES:
        raise EngineError(f"unknown GGUF type {gguf_type!r}: use one of {', '.join(GGUF_TYPES)}")
    base = base_for(base_model)
    path = cached_model_path(checkpoint_dir, gguf_type)
    want = _fingerprint(checkpoint_dir, gguf_type)

    def build(temp: Path) -> None:
        _keep_others(path.parent, temp, {path.name, marker_path(path).name})
        if gguf_type not in QUANTIZED:
            write_model(
                merged_state(checkpoint_dir, base_model, store_root), base, temp / path.name, gguf_type
            )
        else:
            f32 = cached_model_path(checkpoint_dir, "f32")
            fresh = _is_fresh(f32, _fingerprint(checkpoint_dir, "f32"))
            source = f32 if fresh else temp / ".merged-f32.gguf.part"
            if not fresh:
                write_model(merged_state(checkpoint_dir, base_model, store_root), base, source, "f32")
            quantize(source, temp / path.name, gguf_type)
            if not fresh:
                source.unlink()
        marker_path(temp / path.name).write_text(json.dumps(want, indent=2) + "\n")

    build_once(
        path.parent,
        lambda folder: _is_fresh(folder / path.name, want),
        build,
        progress or smollm2._stderr,
        waiting=f"{path.parent}: another process is writing this GGUF; waiting for it",
        error=EngineError,
        timeout_s=smollm2.LOCK_TIMEOUT_S,
    )
    return path
