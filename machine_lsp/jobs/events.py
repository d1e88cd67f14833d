"""The job event protocol: one JSON object per line on a job's stdout (see docs/ARCHITECTURE.md).

Pure: msgspec only. The language server and the CLI both decode these lines; the child writes them.
Every event is tagged by its ``event`` field. Optional numbers are ``null`` when unknown (e.g. the ETA before
the first step) rather than missing, so readers can rely on every field being present.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

import msgspec

__all__ = [
    "Checkpoint",
    "Done",
    "Error",
    "Eval",
    "Event",
    "EventDecodeError",
    "Log",
    "Progress",
    "Ready",
    "SWAP_FAILED",
    "Start",
    "Step",
    "decode_event",
    "encode_event",
    "event_to_dict",
    "iter_events",
]


class _Event(msgspec.Struct, tag_field="event", kw_only=True):
    pass


class Start(_Event, tag="start"):
    """The job began; ``run_dir`` holds manifest.json, events.jsonl and stderr.log."""

    job: str
    run_id: str
    run_dir: str
    total: int | None = None
    message: str = ""


class Step(_Event, tag="step"):
    """One optimizer step finished."""

    step: int
    total: int | None
    loss: float
    lr: float
    tokens: int
    seconds_per_step: float
    eta_seconds: float | None = None


class Progress(_Event, tag="progress"):
    """Generic progress of a job that is not training (validation, evaluation, model loading)."""

    done: int
    total: int | None = None
    message: str = ""


class Checkpoint(_Event, tag="checkpoint"):
    """A checkpoint was saved; ``address`` is ``local://<run>/<name>`` or ``tinker://<run>/sampler_weights/<name>``."""

    name: str
    address: str
    step: int


class Eval(_Event, tag="eval"):
    """An evaluation finished and its result file was written."""

    name: str
    accuracy: float
    correct: int
    n: int
    result_path: str
    format_rate: float | None = None
    bleed_rate: float | None = None


SWAP_FAILED = (
    "swap failed: "  # how a ``log`` warning of a ``serve`` job says a swap failed (the old one serves)
)


class Ready(_Event, tag="ready"):
    """A long-lived job (the ``serve`` verb) is up: ``url`` is where it answers (``http://127.0.0.1:PORT``).
    The job runs on until it is cancelled; its ``done`` event comes after it stopped. A ``serve`` job that follows
    `promoted` or `latest` emits ``ready`` again after each swap (``name``: the checkpoint now served, ``message``:
    the swap's line), and a ``log`` warning starting with ``SWAP_FAILED`` when one fails."""

    url: str
    name: str = ""  # what is served (the checkpoint address)
    message: str = ""


class Log(_Event, tag="log"):
    message: str
    level: Literal["debug", "info", "warning", "error"] = "info"


class Done(_Event, tag="done"):
    """The job succeeded. ``result`` is verb-specific JSON (see jobs/__main__.py)."""

    result: dict[str, Any] = msgspec.field(default_factory=dict)
    message: str = ""


class Error(_Event, tag="error"):
    """The job failed (``kind``: usage, input, engine, cancelled, crash) or was cancelled."""

    message: str
    kind: str = "crash"


Event = Start | Step | Progress | Checkpoint | Eval | Ready | Log | Done | Error

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)


class EventDecodeError(ValueError):
    """A line on a job's stdout is not a valid event."""


def encode_event(event: Event) -> bytes:
    """One event as a JSON line (with the trailing newline)."""
    return _encoder.encode(event) + b"\n"


def decode_event(line: bytes | str) -> Event:
    """Parse one line into an event; raises EventDecodeError with the reason."""
    data = line.encode() if isinstance(line, str) else line
    data = data.strip()
    if not data:
        raise EventDecodeError("empty line")
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        preview = data[:120].decode("utf-8", "replace")
        raise EventDecodeError(f"not a job event ({exc}): {preview}") from None


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as plain JSON-compatible builtins (e.g. to forward it over LSP)."""
    return msgspec.to_builtins(event)


def iter_events(lines: Iterable[bytes | str]) -> Iterator[Event]:
    """Decode an iterable of lines, skipping blank ones."""
    for line in lines:
        if line.strip():
            yield decode_event(line)
