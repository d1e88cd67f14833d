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


def fit_columns(
    total: int,
    rows: list[list[Any]],
    columns: tuple[tuple[str, int, int], ...],
    drop_first: tuple[str, ...] = (),
) -> list[int]:
    """Column widths for a heavy-box table `total` cells wide (0: the column is left out). Each column gets its
    content width within (least, most); then the widest shrinks first until the table fits, and when even the
    least widths do not fit, the `drop_first` columns are left out, in that order."""
    from rich.text import Text

    natural = [len(name) for name, _, _ in columns]
    for cells in rows:
        for i, cell in enumerate(cells):
            natural[i] = max(natural[i], Text.from_markup(cell).cell_len if isinstance(cell, str) else 1)
    widths = [max(least, min(n, most)) for n, (_, least, most) in zip(natural, columns, strict=True)]
    names = [name for name, _, _ in columns]
    dropped: set[int] = set()

    def room() -> int:
        return total - (1 + 3 * (len(columns) - len(dropped)))  # borders and padding

    for name in drop_first:
        if sum(columns[i][1] for i in range(len(columns)) if i not in dropped) <= room():
            break
        if name in names:
            dropped.add(names.index(name))
    for i in dropped:
        widths[i] = 0
    while sum(widths) > room():
        shrinkable = [i for i, (_, least, _) in enumerate(columns) if i not in dropped and widths[i] > least]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths
