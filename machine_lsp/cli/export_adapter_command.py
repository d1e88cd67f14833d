"""`machine export adapter CHECKPOINT --format peft|gguf-lora|gguf-merged [--out DIR]` (`engines.adapter_export`).

CHECKPOINT is what `machine serve` takes (`latest`, `local://RUN/NAME`, a checkpoint directory). The default --out
is `./<run>-<name>-<format>/`. Heavy imports (torch, gguf) happen only inside the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

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


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if args.format != "adapter" or not args.checkpoint or not args.adapter_format:
        err.print("machine export: usage: machine export adapter CHECKPOINT --format FORMAT [--out DIR]")
        return EXIT_USAGE
    from machine_lsp.serve.checkpoints import CheckpointError, resolve

    try:
        target = resolve(args.checkpoint, find_machine_dir())
    except CheckpointError as exc:
        err.print(f"machine export: {escape(str(exc))}")
        return EXIT_USAGE
    if target.directory is None:
        err.print(
            f"machine export: {escape(target.address)} has no local adapter to export "
            "(the base model has none; a tinker:// checkpoint is not downloaded by this command)"
        )
        return EXIT_USAGE
    run_id, name = target.directory.parent.parent.name, target.directory.name
    out: Path = args.out or Path(f"{run_id}-{name}-{args.adapter_format}")

    from machine_lsp.engines import adapter_export
    from machine_lsp.engines.base import EngineError

    try:
        written = adapter_export.export(target.directory, target.base_model, args.adapter_format, out, name)
    except (EngineError, OSError) as exc:
        err.print(f"machine export: {escape(str(exc))}")
        return EXIT_FAILED
    for path in written:
        print(path)
    err.print(f"exported {escape(target.address)} as {args.adapter_format} into {escape(str(out))}")
    return EXIT_OK
