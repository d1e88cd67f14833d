"""The one place the CLI makes rich consoles.

`emoji=False` everywhere: rich would otherwise turn `:abc:` in a path or a note into an emoji (`x.jsonl:abc` printed
as `x.jsonl🔤`). User text is still escaped with `rich.markup.escape` where it is printed inside markup.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console


def console(*, stderr: bool = False, **options: Any) -> Console:
    options.setdefault("soft_wrap", True)
    return Console(stderr=stderr, emoji=False, **options)


def console_out(**options: Any) -> Console:
    return console(**options)


def console_err(**options: Any) -> Console:
    return console(stderr=True, **options)
