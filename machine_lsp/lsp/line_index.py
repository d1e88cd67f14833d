"""Per-line results of a document and the counts dataset-level checks need, kept up to date edit by edit.

Pure (no pygls): `LineIndex` holds one `LineEntry` per line, the fingerprint and prompt counts (so an edit knows
whether duplicates or leakage can have changed) and the sorted lines that carry diagnostics (so publishing does
not walk 100k clean lines). `splice` applies a `documents.LineEdit`.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

_result_of = operator.attrgetter("result")
_diagnostics_of = operator.attrgetter("diagnostics")
_fingerprint_of = operator.attrgetter("fingerprint")
_prompt_key_of = operator.attrgetter("prompt_key")
_count_into = Counter.update  # adds the items' counts to a dict (any dict: the C loop of collections.Counter)


class LineEntry(msgspec.Struct, eq=False, gc=False):
    """A checked line: the core's result and its diagnostics with line 0 (shifted when published).

    Identity eq: `entries.index(None)` stays a C loop. Built from C on a full pass, and never in a reference cycle,
    hence gc=False: 100k tracked entries would make every collection walk them (~1/3 of a full pass)."""

    result: Any  # validate.LineResult
    diagnostics: tuple[Any, ...]  # lsprotocol Diagnostics, on line 0


@dataclass
class Filled:
    count: int = 0
    dirty: bool = False


class LineIndex:
    """Per-line entries of a document plus what dataset-level checks need, all maintained incrementally:
    fingerprint and prompt counts (so an edit knows whether duplicates or leakage can have changed) and the
    sorted lines that carry diagnostics (so publishing does not walk 100k clean lines)."""

    def __init__(self, count: int) -> None:
        self.entries: list[LineEntry | None] = [None] * count
        # Plain dicts of ints and strings: the garbage collector never tracks (walks) them, however large.
        self.fp_counts: dict[int, int] = {}
        self.prompt_counts: dict[str, int] = {}
        self.prompts_version = 0
        self.touched_prompts: set[str] = set()
        self.diag_lines: list[int] = []
        self.pending: list[int] | None = None  # lines to check; None: all of them

    def splice(self, edit) -> bool:
        """Replace lines [start, old_end) by new_count unchecked lines; True if a duplicate was involved."""
        dirty = False
        for entry in self.entries[edit.start : edit.old_end]:
            if entry is not None:
                dirty |= self._count(entry.result, -1)
        self.entries[edit.start : edit.old_end] = [None] * edit.new_count
        delta = edit.new_count - (edit.old_end - edit.start)
        lines = self.diag_lines
        lo = bisect.bisect_left(lines, edit.start)
        hi = bisect.bisect_left(lines, edit.old_end)
        self.diag_lines = lines[:lo] + [line + delta for line in lines[hi:]]
        if self.pending is not None:
            kept = [p for p in self.pending if p < edit.start] + [
                p + delta for p in self.pending if p >= edit.old_end
            ]
            self.pending = sorted({*kept, *range(edit.start, edit.start + edit.new_count)})
        return dirty

    def put(self, line: int, entry: LineEntry) -> bool:
        self.entries[line] = entry
        if entry.diagnostics:
            bisect.insort(self.diag_lines, line)
        return self._count(entry.result, +1)

    def put_many(self, positions: Sequence[int], entries: list[LineEntry]) -> bool:
        """`put` for many lines at once (the same state afterwards), with the counting done from C."""
        if type(positions) is range and positions.step == 1:
            self.entries[positions.start : positions.stop] = entries
        else:
            for position, entry in zip(positions, entries, strict=True):
                self.entries[position] = entry
        with_diagnostics = list(itertools.compress(positions, map(_diagnostics_of, entries)))
        if with_diagnostics and type(positions) is not range:
            with_diagnostics.sort()
        if with_diagnostics:
            lines = self.diag_lines
            if not lines or lines[-1] <= with_diagnostics[0]:
                lines += with_diagnostics
            else:
                self.diag_lines = sorted(lines + with_diagnostics)
        results = list(map(_result_of, entries))
        # A fingerprint already counted, or repeated among these lines, is a duplicate (put's `dirty`).
        fp_counts = self.fp_counts
        before = len(fp_counts)
        _count_into(fp_counts, map(_fingerprint_of, results))
        rows = len(results) - fp_counts.pop(None, 0)
        dirty = len(fp_counts) - before < rows
        keys = list(filter(None, map(_prompt_key_of, results)))
        if keys:
            prompt_counts = self.prompt_counts
            before = len(prompt_counts)
            _count_into(prompt_counts, keys)
            self.prompts_version += len(prompt_counts) - before  # one step per prompt that appeared
            self.touched_prompts.update(keys)
        return dirty

    def _count(self, result, step: int) -> bool:
        dirty = False
        fp = result.fingerprint
        if fp is not None:
            before = self.fp_counts.get(fp, 0)
            after = before + step
            dirty = max(before, after) > 1
            if after:
                self.fp_counts[fp] = after
            else:
                self.fp_counts.pop(fp, None)
        key = result.prompt_key
        if key:
            before = self.prompt_counts.get(key, 0)
            after = before + step
            if after:
                self.prompt_counts[key] = after
            else:
                self.prompt_counts.pop(key, None)
            if (before == 0) != (after == 0):
                self.prompts_version += 1
            self.touched_prompts.add(key)
        return dirty
