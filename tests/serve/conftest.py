"""Two real servers for the whole serve suite (model loads kept few):

* `base_server`: `machine serve base --api-key … --backend torch` in a fresh project (the key is checked on every
  request; the torch backend, so both backends answer the API tests).
* `trained_server`: `machine serve latest --backend llama.cpp` in a project where an 8-step `machine train run` on
  the local engine taught SmolLM2 one tool call and the `answer: N` form (`make test` installs llama-cpp-python:
  without it this server fails to start, it is never skipped).

And what the llama.cpp tests share across modules, each computed once: `trained_checkpoint` (that run's
checkpoint directory), `eval_prompts` (examples/minimal-sft's held-out rows as token prompts) and their
`eval_expected` answers, `base_torch` and `trained_torch` (the torch backend's greedy answers to them on the base
model and on that checkpoint, the reference every llama.cpp path and every export is compared with).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from llama_helpers import (  # noqa: E402
    MAX_TOKENS,
    decode_all,
    minimal_sft_eval,
    minimal_sft_prompts,
    token_prompts,
)
from serve_helpers import API_KEY, BASH_TOOL, MODEL, ServeProcess, machine, training_rows  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from machine_lsp.engines import smollm2

    return smollm2.ensure_model()


@pytest.fixture(scope="session")
def base_project(tmp_path_factory: pytest.TempPathFactory, smollm2_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("serve-base")
    (root / ".machine").mkdir()
    return root


@pytest.fixture(scope="session")
def base_server(base_project: Path) -> Iterator[ServeProcess]:
    server = ServeProcess(base_project, "base", "--api-key", API_KEY, "--backend", "torch")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tools_system_prompt() -> str:
    from machine_lsp.core.schema import Message
    from machine_lsp.engines import render
    from machine_lsp.serve import protocol

    _, renderer = render.load_tokenizer_and_renderer(MODEL)
    messages = protocol.with_tools([Message(role="user", content="x")], [BASH_TOOL["function"]], renderer)
    return str(messages[0].content)


@pytest.fixture(scope="session")
def trained_project(
    tmp_path_factory: pytest.TempPathFactory, smollm2_dir: Path, tools_system_prompt: str
) -> Path:
    root = tmp_path_factory.mktemp("serve-trained")
    (root / ".machine").mkdir()
    rows = training_rows(tools_system_prompt)
    (root / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = machine(
        root,
        *("train", "run", "--yes", "--data", "train.jsonl", "--steps", "8"),
        *("--lr", "1e-3", "--batch-size", "4"),
        *("--save-every", "0"),
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root


@pytest.fixture(scope="session")
def trained_server(trained_project: Path) -> Iterator[ServeProcess]:
    server = ServeProcess(trained_project, "latest", "--backend", "llama.cpp")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def trained_checkpoint(trained_project: Path) -> Path:
    from machine_lsp.serve.checkpoints import resolve

    directory = resolve("latest", trained_project / ".machine").directory
    assert directory is not None
    return directory


@pytest.fixture(scope="session")
def eval_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return minimal_sft_eval(tmp_path_factory.mktemp("minimal-sft"))


@pytest.fixture(scope="session")
def eval_prompts(eval_rows: list[dict]) -> list[list[int]]:
    from machine_lsp.engines import render

    _, renderer = render.load_tokenizer_and_renderer(MODEL)
    return token_prompts(minimal_sft_prompts(eval_rows), renderer)


@pytest.fixture(scope="session")
def eval_expected(eval_rows: list[dict]) -> list[str]:
    """The right answer of each held-out row (`answer: N`)."""
    return [row["expected"] for row in eval_rows]


@pytest.fixture(scope="session")
def base_torch(eval_prompts: list[list[int]], smollm2_dir: Path) -> list:
    """The torch backend's greedy answers (tokens, finish reason) to the eval prompts on the base model."""
    from machine_lsp.serve import generation

    return decode_all(generation.BatchGenerator(generation.load(None)), eval_prompts, MAX_TOKENS)


@pytest.fixture(scope="session")
def trained_torch(
    trained_project: Path, trained_checkpoint: Path, eval_prompts: list[list[int]]
) -> dict[str, Any]:
    """{"answers": [(tokens, finish reason)] per eval prompt, "stop_ids": the served stop tokens}."""
    from machine_lsp.serve import generation

    loaded = generation.load(trained_checkpoint, store_root=trained_project / ".machine")
    answers = decode_all(generation.BatchGenerator(loaded), eval_prompts, MAX_TOKENS)
    return {"answers": answers, "stop_ids": loaded.stop_ids}
