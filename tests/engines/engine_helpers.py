"""Helpers shared by the engine tests (imported as a top-level module: tests/ has no packages)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from machine_lsp.core.schema import Message

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PAIRS = [(3, 4), (12, 30), (7, 8), (21, 5)]


def arithmetic_rows(pairs: list[tuple[int, int]] = PAIRS) -> list[list[Message]]:
    return [
        [
            Message(role="user", content=f"What is {a} plus {b}?"),
            Message(role="assistant", content=f"answer: {a + b}"),
        ]
        for a, b in pairs
    ]


@dataclass
class TrainedRun:
    engine: Any
    trainer: Any
    run_dir: Path
    store_root: Path
    losses: list[float]
    address: str
    prompts: list[list[Message]]
    trained_outputs: list[str]
