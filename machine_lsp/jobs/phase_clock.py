"""Where a training job's time goes: seconds per named phase, kept in the job's result as `timings`.

A phase entered twice adds up; the order of first entry is kept, so the table reads as the job ran
(bench/retrain_phases.py prints it). Wall-clock seconds (`time.perf_counter`), rounded to 0.01 s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class PhaseClock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def as_dict(self) -> dict[str, float]:
        return {name: round(seconds, 2) for name, seconds in self.seconds.items()}
