"""``python -m machine_lsp.jobs VERB --args-json '{...}'``: run one job, streaming JSON-lines events on stdout.

Verbs and their arguments are listed in :mod:`machine_lsp.jobs.verbs`. ``--list`` prints the verbs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from machine_lsp.core.exit_codes import EXIT_USAGE
from machine_lsp.jobs import events as ev
from machine_lsp.jobs.runner import run
from machine_lsp.jobs.verbs import VERBS, load_verb


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    parser = argparse.ArgumentParser(prog="python -m machine_lsp.jobs", description=__doc__)
    parser.add_argument("verb", nargs="?", help="one of: " + ", ".join(VERBS))
    parser.add_argument("--args-json", default="{}", help="the verb's arguments as a JSON object")
    parser.add_argument("--cwd", default=None, help="project directory (default: the current directory)")
    parser.add_argument("--list", action="store_true", help="list the verbs and exit")
    ns = parser.parse_args(argv)
    if ns.list:
        for name, spec in VERBS.items():
            print(f"{name}\t{spec.help}")
        return 0
    if ns.verb not in VERBS:
        known = ", ".join(VERBS)
        line = ev.encode_event(
            ev.Error(message=f"unknown job verb {ns.verb!r} (known: {known})", kind="usage")
        )
        sys.stdout.buffer.write(line)
        sys.stdout.flush()
        return EXIT_USAGE
    cwd = Path(ns.cwd) if ns.cwd else Path.cwd()
    if ns.cwd:
        os.chdir(cwd)
    func, args_type = load_verb(ns.verb)
    return run(ns.verb, func, args_type, ns.args_json, cwd=cwd)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # An SDK call abandoned at its time bound (Tinker) can leave a non-daemon thread blocked for minutes;
    # the job's outcome is already recorded, so leave without waiting for it.
    os._exit(code)
