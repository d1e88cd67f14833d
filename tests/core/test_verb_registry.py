"""The verb registry's rules (core/verb_registry.py): one name per verb and palette command, groups before their
verbs, one job per server command, every job one the runner has; its palette list and the titles messages use.
The CLI built from it: tests/cli/test_cli_verbs.py; the server: tests/lsp/test_verb_registry_server.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine_lsp.core import verb_registry
from machine_lsp.core.verb_registry import VERBS, Palette, Verb, registry_problems
from machine_lsp.jobs.verbs import VERBS as JOB_VERBS


def test_the_registry_keeps_its_rules():
    assert registry_problems() == []


def test_each_broken_rule_is_named():
    smoke = Verb("2 steps", "train smoke", "machine.train.smoke", "train-smoke", "Smoke", False)
    broken = (
        Verb("group", "train"),
        smoke,
        Verb("again", "train smoke"),
        Verb("orphan", "eval probe"),
        Verb("other job", None, "machine.train.smoke", "train-run", "Smoke", False),
        Verb("asks without a job", "jobs", asks=True),
        Verb("nowhere"),
        Verb("a", palette=(Palette("machineLsp.x", "X"),)),
        Verb("b", palette=(Palette("machineLsp.x", "Y"),)),
    )
    problems = registry_problems(broken)
    assert "CLI verb 'train smoke' is listed twice" in problems
    assert "CLI verb 'eval probe' has no group 'eval' before it" in problems
    assert "palette command 'machineLsp.x' is listed twice" in problems
    assert any(p.startswith("server command 'machine.train.smoke' has different jobs") for p in problems)
    assert "'jobs': progress and asking are the server's, for a command that runs a job" in problems
    assert "'nowhere' is in no face (no CLI words, server command or palette entry)" in problems
    assert len(problems) == 6, problems


def test_every_job_a_verb_names_is_a_job_the_runner_has():
    named = {v.job for v in VERBS if v.job}
    assert named <= set(JOB_VERBS), named - set(JOB_VERBS)
    assert {"train-smoke", "train-run", "retrain", "eval-baseline", "serve"} <= named


def test_palette_titles_name_verbs_in_messages():
    assert verb_registry.palette_title("machine.train.smoke") == "Smoke Run"
    assert verb_registry.palette_title("machine.jobs.list") == "`machine jobs list`"
    assert verb_registry.lsp_job("machine.train.preferences") == "train-run"
    with pytest.raises(KeyError):
        verb_registry.lsp_job("machine.tag")


def test_the_palette_contribution_lists_each_palette_entry_once():
    palette = verb_registry.palette_contribution()
    ids = [c["command"] for c in palette["commands"]]
    assert len(ids) == len(set(ids)) == sum(len(v.palette) for v in VERBS)
    assert {"command": "machineLsp.tagSelection", "when": "editorHasSelection"} in palette["commandPalette"]
    assert palette["untrusted"] == [
        "machineLsp.openPanel",
        "machineLsp.restartServer",
        "machineLsp.showOutput",
    ]


def test_the_extensions_palette_list_is_the_generated_one():
    """package.json holds the registry's palette list (`npm run generate` writes it; `npm test` checks it too)."""
    package = json.loads(
        (Path(__file__).resolve().parents[2] / "editors/vscode/package.json").read_text("utf-8")
    )
    palette = verb_registry.palette_contribution()
    assert package["contributes"]["commands"] == palette["commands"], "run `make -C editors/vscode generate`"
    assert package["contributes"]["menus"]["commandPalette"] == palette["commandPalette"]
