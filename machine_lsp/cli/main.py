"""Entry point of the `machine` CLI.

The verbs, their help and their groups are the verb registry's (`core/verb_registry.py`); each area of the tool
adds its verbs' arguments and handlers (see the REGISTRARS list) so that the parser is assembled from small modules
rather than one long file. A registrar receives the `VerbParsers` (`cli/verb_parsers.py`), takes each of its verbs'
parsers by the verb's words and sets `func` on it; `func(args) -> int` returns the exit code.
Exit codes (one rule for every verb): 0 ok, 1 findings in the data or a refused tag, 2 bad usage or unreadable
input, 3 the store (or an output file) cannot be read or written (one-line store error), 130 interrupted/cancelled.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from machine_lsp import __version__
from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.exit_codes import EXIT_BROKEN_PIPE, EXIT_CANCELLED, EXIT_STORE, EXIT_USAGE, UsageError
from machine_lsp.core.store import StoreError

# Modules that expose `register(verbs: VerbParsers) -> None`; every CLI verb of the registry is taken by one of them.
REGISTRARS = [
    "machine_lsp.cli.tag_commands",  # good, bad, tagged, data, export
    "machine_lsp.cli.tag_edit_commands",  # untag, retag
    "machine_lsp.cli.validate_command",  # train validate
    "machine_lsp.cli.train_commands",  # train sft|smoke|run
    "machine_lsp.cli.eval_commands",  # train eval init|baseline|checkpoint|compare|probe
    "machine_lsp.cli.promote_commands",  # train promote|rollback|promoted
    "machine_lsp.cli.jobs_commands",  # jobs [list|cancel|prune]
    "machine_lsp.cli.sessions_command",  # sessions
    "machine_lsp.cli.serve_commands",  # serve, use
    "machine_lsp.cli.capture_commands",  # capture proxy
    "machine_lsp.cli.tinker_commands",  # tinker serve|status|stop
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="machine",
        description="Tag AI turns, validate chat JSONL, fine-tune and evaluate models.",
    )
    parser.add_argument("--version", action="version", version=f"machine-lsp {__version__}")
    verbs = VerbParsers(parser.add_subparsers(dest="command", metavar="COMMAND"))
    for name in REGISTRARS:
        importlib.import_module(name).register(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        print(f"machine: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:  # any verb that reaches the store: one line, never a traceback
        print(f"machine: store: {exc}", file=sys.stderr)
        return EXIT_STORE
    except KeyboardInterrupt:
        print("machine: interrupted", file=sys.stderr)
        return EXIT_CANCELLED
    except BrokenPipeError:
        # The reader went away (`machine tagged --json | head`): not worth a traceback. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
