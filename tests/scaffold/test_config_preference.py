"""The preference keys of machine.toml `[train]`: rpo_alpha (DPO + NLL of the chosen answer) and sft+dpo's DPO
stage learning rate, validated with one clear error and carried into the stages."""

from __future__ import annotations

from pathlib import Path

import pytest

from machine_lsp.scaffold.config import ConfigError, MachineConfig, load_config
from machine_lsp.scaffold.support import lr_at


def _train(tmp_path: Path, text: str):
    (tmp_path / "machine.toml").write_text(f"[train]\n{text}\n")
    return load_config(tmp_path / "machine.toml").train


def test_defaults_are_pure_dpo_and_a_tenth_of_the_rate_for_the_dpo_stage(tmp_path: Path) -> None:
    cfg = MachineConfig().train
    assert cfg.rpo_alpha == 0 and cfg.dpo_learning_rate is None
    sft, dpo = _train(tmp_path, 'objective = "sft+dpo"\nlearning_rate = 4e-4').stages()
    assert (sft.objective, sft.resolved_lr()) == ("sft", 4e-4)
    assert dpo.objective == "dpo" and dpo.resolved_lr() == pytest.approx(4e-5)
    assert lr_at(1, 12, dpo) == pytest.approx(4e-5)  # what each DPO-stage step trains at


def test_set_values_reach_the_stages(tmp_path: Path) -> None:
    cfg = _train(
        tmp_path, 'objective = "sft+dpo"\nrpo_alpha = 1.0\ndpo_learning_rate = 2e-5\npairs = "p.jsonl"'
    )
    sft, dpo = cfg.stages()
    assert dpo.resolved_lr() == 2e-5 and dpo.rpo_alpha == 1.0 and dpo.data == "p.jsonl"
    assert sft.resolved_lr() == cfg.resolved_lr() and sft.data is None
    single = _train(tmp_path, 'objective = "dpo"\nrpo_alpha = 0.5\ndpo_learning_rate = 2e-5')
    assert single.stages() == [single]  # a plain dpo run trains at learning_rate


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("rpo_alpha = -1.0", "rpo_alpha must be >= 0"),
        ("rpo_alpha = nan", "rpo_alpha must be >= 0"),
        ("dpo_learning_rate = 0.0", "dpo_learning_rate must be > 0"),
    ],
)
def test_bad_values_are_one_clear_error(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _train(tmp_path, line)
    assert message in str(err.value) and "machine.toml" in str(err.value)


def test_kto_desirable_weight_is_auto_by_default_or_a_positive_number(tmp_path: Path) -> None:
    assert MachineConfig().train.kto_desirable_weight == "auto"
    assert _train(tmp_path, "kto_desirable_weight = 2.5").kto_desirable_weight == 2.5
    assert _train(tmp_path, 'kto_desirable_weight = "auto"').kto_desirable_weight == "auto"
    for line in ("kto_desirable_weight = 0.0", 'kto_desirable_weight = "balanced"'):
        with pytest.raises(ConfigError) as err:
            _train(tmp_path, line)
        assert "kto_desirable_weight" in str(err.value) and "machine.toml" in str(err.value)


def test_auto_balances_the_good_examples_against_the_bad_by_their_counts() -> None:
    from machine_lsp.engines.objectives.kto import balanced_desirable_weight

    assert balanced_desirable_weight(8, 32, 1.0) == 4.0  # minimal-preference: 8 good, 32 bad tags
    assert balanced_desirable_weight(8, 32, 0.5) == 2.0  # desirable * n_good == undesirable * n_bad
    assert balanced_desirable_weight(30, 10, 1.0) == pytest.approx(1 / 3)
    assert balanced_desirable_weight(0, 5, 1.0) == balanced_desirable_weight(5, 0, 1.0) == 1.0
