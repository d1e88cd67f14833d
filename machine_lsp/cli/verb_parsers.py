"""The CLI's parsers for the verb registry's CLI verbs (`core/verb_registry.py`): a verb's module asks for its parser
by its words and adds its arguments and its `func`; the name, the help, the group it sits in and its place in
`machine --help` come from the registry.

Every registry verb's parser is made up front, in registry order. A group (`train`, `train eval`, `jobs`,
`capture`, `tinker`: a verb whose words begin others') shows its help on stderr with exit 2 when no verb follows,
unless its module gives it a `func` of its own (`machine jobs` lists). :meth:`VerbParsers.missing` names the
registry verbs no module took (tests/core/test_verb_registry.py keeps it empty).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from machine_lsp.core.exit_codes import EXIT_USAGE
from machine_lsp.core.verb_registry import CLI_VERBS, cli_verb


class VerbParsers:
    def __init__(self, top: argparse._SubParsersAction) -> None:
        subparsers: dict[str, argparse._SubParsersAction] = {"": top}
        groups = {words.rsplit(" ", 1)[0] for words in CLI_VERBS if " " in words}
        self._parsers: dict[str, argparse.ArgumentParser] = {}
        self._taken: set[str] = set(groups)  # a group is its verbs' (its module may still take it)
        for (
            words
        ) in CLI_VERBS:  # a group comes before its verbs in the registry (registry_problems checks it)
            group, _, name = words.rpartition(" ")
            parser = subparsers[group].add_parser(name, help=cli_verb(words).help)
            self._parsers[words] = parser
            if words in groups:
                dest = words.rsplit(" ", 1)[-1] + "_command"  # args.train_command, args.eval_command, ...
                subparsers[words] = parser.add_subparsers(dest=dest, metavar="VERB")
                parser.set_defaults(func=lambda args, group=parser: show_help(group))

    def parser(
        self, words: str, func: Callable[[argparse.Namespace], int], **options: Any
    ) -> argparse.ArgumentParser:
        """The parser of the registry's CLI verb `words` ("train smoke"), running `func` (its handler: the args in,
        the exit code out), with `options` (`description`, `epilog`, `formatter_class`) set on it; KeyError for words
        the registry does not have."""
        if words not in self._parsers:
            cli_verb(words)  # raises, naming the registry
        parser = self._parsers[words]
        parser.set_defaults(func=func)
        if (job := cli_verb(words).job) is not None:
            parser.set_defaults(job_verb=job)  # the job its handler runs: the registry's, as the server's
        for option, value in options.items():
            setattr(parser, option, value)
        self._taken.add(words)
        return parser

    def missing(self) -> list[str]:
        """The registry's CLI verbs no module has taken (a verb with no arguments or handler)."""
        return [words for words in CLI_VERBS if words not in self._taken]


def show_help(parser: argparse.ArgumentParser) -> int:
    """A group with no verb after it: its help on stderr, exit 2 (bad usage)."""
    parser.print_help(sys.stderr)
    return EXIT_USAGE
