"""The CLI built from the verb registry (core/verb_registry.py): every registry CLI verb has its parser, named and
described by its line and running the job its line names; no parser is outside the registry."""

from __future__ import annotations

import argparse
import importlib

import pytest

from machine_lsp.cli.main import REGISTRARS, build_parser
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core import verb_registry
from machine_lsp.core.verb_registry import CLI_VERBS, VERBS


def cli_parsers(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Every subcommand under `parser`: its words -> (its parser, the help its group lists it with)."""
    found: dict[str, tuple[argparse.ArgumentParser, str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                words = f"{prefix} {name}".strip()
                found[words] = (sub, helps[name])
                found |= cli_parsers(sub, words)
    return found


def test_the_cli_has_exactly_the_registry_verbs_with_the_registry_help():
    parsers = cli_parsers(build_parser())
    assert set(parsers) == set(CLI_VERBS)
    for words, (_parser, listed_help) in parsers.items():
        assert listed_help == verb_registry.cli_verb(words).help, words


def test_every_registry_verb_is_taken_by_a_module_and_unknown_words_are_refused():
    verbs = VerbParsers(argparse.ArgumentParser(prog="machine").add_subparsers(dest="command"))
    assert "train smoke" in verbs.missing()
    for name in REGISTRARS:
        importlib.import_module(name).register(verbs)
    assert verbs.missing() == []
    with pytest.raises(KeyError, match="no CLI verb 'train fly' in core/verb_registry.py"):
        verbs.parser("train fly", lambda args: 0)


def test_a_cli_verb_runs_the_job_its_line_names_and_groups_show_their_help(capsys):
    parser = build_parser()
    parsers = cli_parsers(parser)
    with_jobs = {v.cli: v.job for v in VERBS if v.cli and v.job}
    assert {"train smoke", "train run", "retrain", "train eval baseline", "train eval pairs"} <= set(
        with_jobs
    )
    for words, job in with_jobs.items():
        assert parsers[words][0].get_default("job_verb") == job, words
    args = parser.parse_args(["train", "eval"])
    assert args.func(args) == 2
    assert "usage: machine train eval" in capsys.readouterr().err
