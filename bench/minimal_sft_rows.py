"""The minimal-sft corpus (seed 0: 48 training rows, 24 held out) as the benchmarks use it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from machine_lsp.core.schema import Message

REPO = Path(__file__).resolve().parents[1]


def build_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The raw (train, held-out) rows from examples/minimal-sft/make_corpus.py."""
    path = REPO / "examples" / "minimal-sft" / "make_corpus.py"
    spec = importlib.util.spec_from_file_location("minimal_sft_make_corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_rows(0, 48, 24)


def messages(items: list[dict[str, Any]]) -> list[Message]:
    return [Message(role=m["role"], content=m["content"]) for m in items]
