"""The engine registry (engines.registry) is the one table of engine names, default models and learning rates,
checkpoint address schemes and construction; the CLI, the editor's job plan, the jobs and machine.toml read it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

import pytest

from machine_lsp.cli.job_support import resolved_engine
from machine_lsp.engines import smollm2
from machine_lsp.engines.base import LOCAL_SCHEME, TINKER_SCHEME, EngineError, get_engine
from machine_lsp.engines.registry import ENGINE_NAMES, ENGINES, EngineName, engine_for_address, engine_spec
from machine_lsp.lsp.plan import plan_job
from machine_lsp.scaffold.config import TrainSection

ADDRESSES = ("tinker://run-1/sampler_weights/final", "local://run-1/final", "runs/r1/checkpoints/final", None)


def test_the_names_type_and_schemes_come_from_the_table() -> None:
    assert get_args(EngineName) == ENGINE_NAMES == ("local", "tinker")
    assert (LOCAL_SCHEME, TINKER_SCHEME) == (engine_spec("local").scheme, engine_spec("tinker").scheme)
    assert engine_spec("local").default_model == smollm2.MODEL_NAME  # the embedded model needs no download
    assert len({spec.scheme for spec in ENGINES}) == len(ENGINES)
    with pytest.raises(EngineError, match="unknown engine 'gpu': choose one of local, tinker"):
        get_engine("gpu")


def test_machine_toml_defaults_are_the_registrys() -> None:
    for spec in ENGINES:
        train = TrainSection(engine=spec.name)
        assert (train.resolved_model(), train.resolved_lr()) == (spec.default_model, spec.default_lr)


def test_the_cli_and_the_editor_pick_the_same_engine_for_an_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`machine eval --checkpoint X` and the editor's eval plan: a checkpoint's scheme names its engine, else
    machine.toml's engine."""
    (tmp_path / "machine.toml").write_text('[train]\nengine = "tinker"\n')
    monkeypatch.chdir(tmp_path)
    expected = ["tinker", "local", "tinker", "tinker"]
    assert [engine_for_address(a) or "tinker" for a in ADDRESSES] == expected
    cli = [resolved_engine(argparse.Namespace(engine=None, config=None), a) for a in ADDRESSES]
    editor = [plan_job("eval", tmp_path, {"checkpoint": a}).engine for a in ADDRESSES]
    assert cli == editor == expected
