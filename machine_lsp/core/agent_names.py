"""The one list of other spellings of the agents' names, shared by every place that takes one.

Harness names (`machine sessions --harness`, capture) are the npm package's short name (`claude-code`); `machine
use --agent` takes the command people type (`claude`). Both spellings of one agent are accepted everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

# Each group holds the spellings of one agent.
SAME_AGENT: tuple[frozenset[str], ...] = (frozenset({"claude", "claude-code"}),)


def spelled_as(name: str, known: Iterable[str]) -> str:
    """`name` as the list `known` spells it (`claude` -> `claude-code` when that is the known one); `name` itself
    when no other spelling is known."""
    names = tuple(known)
    if name in names:
        return name
    for group in SAME_AGENT:
        if name in group:
            for spelling in names:
                if spelling in group:
                    return spelling
    return name


def harness_name(name: str) -> str:
    """A harness name for `machine sessions --harness` and the LSP (argparse `type=`): `claude` -> `claude-code`."""
    from machine_lsp.core.sessions import HARNESSES

    return spelled_as(name, HARNESSES)
