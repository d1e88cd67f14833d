"""The optimizer keys of machine.toml `[train]`: the cookbook's defaults, written by the scaffold, validated, and
turned into the engines' settings (one Adam for both engines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from machine_lsp.engines.base import EngineError, OptimizerSettings
from machine_lsp.scaffold.config import ConfigError, MachineConfig, load_config, render_toml
from machine_lsp.scaffold.support import lora_settings


def test_defaults_are_the_cookbooks_and_the_scaffold_writes_them(tmp_path: Path) -> None:
    import inspect

    from tinker_cookbook.supervised import train

    fields = inspect.signature(train.Config).parameters
    text = render_toml(MachineConfig())
    for key in ("adam_beta1", "adam_beta2", "adam_eps"):
        assert f"\n{key} = " in text
        assert getattr(MachineConfig().train, key) == fields[key].default
    assert MachineConfig().train.checkpoint_ttl == fields["ttl_seconds"].default
    (tmp_path / "machine.toml").write_text(text)
    cfg = load_config(tmp_path / "machine.toml").train
    assert lora_settings(cfg).optimizer == OptimizerSettings(beta1=0.9, beta2=0.95, eps=1e-8)


def test_machine_toml_values_reach_the_engine_settings(tmp_path: Path) -> None:
    (tmp_path / "machine.toml").write_text("[train]\nadam_beta1 = 0.8\nadam_beta2 = 0.99\nadam_eps = 1e-6\n")
    lora = lora_settings(load_config(tmp_path / "machine.toml").train)
    assert lora.optimizer == OptimizerSettings(beta1=0.8, beta2=0.99, eps=1e-6)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("adam_eps = 0.0", "adam_eps must be > 0"),
        ("adam_beta2 = 1.0", "adam_beta1 and adam_beta2 must be in [0, 1)"),
        ("adam_beta1 = -0.1", "adam_beta1 and adam_beta2 must be in [0, 1)"),
        ("checkpoint_ttl = 60", "checkpoint_ttl must be 0 or >= 3600 s"),
        ("adam_eps = 'small'", "Expected `float`"),
    ],
)
def test_bad_optimizer_values_are_one_clear_error(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "machine.toml").write_text(f"[train]\n{line}\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "machine.toml")
    assert message in str(err.value) and "machine.toml" in str(err.value)


def test_engine_settings_refuse_bad_values_too() -> None:
    with pytest.raises(EngineError, match="adam_eps must be positive"):
        OptimizerSettings(eps=0.0)
    with pytest.raises(EngineError, match=r"adam_beta2 must be in \[0, 1\)"):
        OptimizerSettings(beta2=1.0)
