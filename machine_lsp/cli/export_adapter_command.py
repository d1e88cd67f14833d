"""`machine export adapter CHECKPOINT --format peft|gguf-lora|gguf-merged [--gguf-type T] [--out DIR]`
(`engines.adapter_export`).

CHECKPOINT is what `machine serve` takes (`latest`, `local://RUN/NAME`, a checkpoint directory), or a
`tinker://RUN/sampler_weights/NAME` checkpoint, downloaded through the tinker SDK first
(`engines.adapter_export.from_tinker`). The default --out is `./<run>-<name>-<format>/`. Heavy imports (torch, gguf) happen only inside the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from machine_lsp.cli.serve_commands import add_gguf_type
from machine_lsp.core.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from machine_lsp.core.store import find_machine_dir

FORMATS = ("peft", "gguf-lora", "gguf-merged")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint", nargs="?", metavar="CHECKPOINT", help="adapter: latest, local://RUN/NAME or a directory"
    )
    parser.add_argument(
        "--format",
        dest="adapter_format",
        choices=FORMATS,
        help="adapter: peft (peft/transformers/vLLM), gguf-lora (llama.cpp --lora, Ollama ADAPTER), "
        "gguf-merged (one GGUF: Ollama FROM, LM Studio)",
    )
    add_gguf_type(parser, "adapter: the GGUF model written (gguf-merged; gguf-lora's base)")


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if args.format != "adapter" or not args.checkpoint or not args.adapter_format:
        err.print("machine export: usage: machine export adapter CHECKPOINT --format FORMAT [--out DIR]")
        return EXIT_USAGE
    if args.gguf_type and args.adapter_format == "peft":
        err.print("machine export: --gguf-type is the type of a GGUF (gguf-merged, gguf-lora); peft has none")
        return EXIT_USAGE
    from machine_lsp.serve.checkpoints import CheckpointError, resolve

    try:
        target = resolve(args.checkpoint, find_machine_dir())
    except CheckpointError as exc:
        err.print(f"machine export: {escape(str(exc))}")
        return EXIT_USAGE
    if target.kind == "base":
        err.print(
            f"machine export: {escape(target.address)} has no adapter to export (the base model has none)"
        )
        return EXIT_USAGE
    import tempfile

    from machine_lsp.engines.base import EngineError

    try:
        with tempfile.TemporaryDirectory(prefix="machine-export-") as work:
            written = _export(target, args, Path(work), err)
    except (EngineError, OSError) as exc:
        err.print(f"machine export: {escape(' '.join(str(exc).split()))}")
        return EXIT_FAILED
    for path in written:
        print(path)
    err.print(
        f"exported {escape(target.address)} as {args.adapter_format} into {escape(str(written[0].parent))}"
    )
    return EXIT_OK


def _export(target: Any, args: argparse.Namespace, work: Path, err: Console) -> list[Path]:
    """The export; a `tinker://` checkpoint is downloaded through the SDK into `work` first."""
    from machine_lsp.engines import adapter_export

    directory = target.directory
    if target.kind == "tinker":
        directory = adapter_export.from_tinker(_tinker_engine(err), target.address, work, _say(err))
        run_id = target.address.removeprefix("tinker://").split("/")[0]
    else:
        run_id = directory.parent.parent.name
    out: Path = args.out or Path(f"{run_id}-{directory.name}-{args.adapter_format}")
    fmt, kind = args.adapter_format, args.gguf_type
    return adapter_export.export(directory, target.base_model, fmt, out, directory.name, kind)


def _say(err: Console) -> Any:
    return lambda message: err.print(escape(message))


def _tinker_engine(err: Console) -> Any:
    """The Tinker engine this project trains with (machine.toml's `[tinker] base_url` unless TINKER_BASE_URL is
    set), after its bounded preflight."""
    import os

    from machine_lsp.engines.base import get_engine
    from machine_lsp.scaffold.config import configured_base_url

    base_url = None if os.environ.get("TINKER_BASE_URL") else configured_base_url(Path.cwd())
    engine = get_engine("tinker", base_url=base_url, progress=_say(err))
    engine.preflight()
    return engine
