"""The turns of session logs, built once per document version in a worker process, never on the event loop.

A hover or a tag on a 40,000-line log needs the turns of the whole file (a turn's conversation is its path from
the root). Building them is pure Python that allocates a lot: in a thread it would hold the GIL (and trigger
garbage collections) long enough to stall the event loop, so it runs in one worker *process*
(`turn_worker.py`, started on first use, spawn: it imports only the core). The worker keeps the turns of the
last few document versions; the server sends a document's lines only when the worker does not have that version,
and gets back one rendered hover or one Turn (small), never the whole list.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import msgspec

from machine_lsp.core.selection import SelectionError
from machine_lsp.core.transcripts import TranscriptError, Turn
from machine_lsp.lsp import turn_worker
from machine_lsp.lsp.documents import LineDocument


class TurnCache:
    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._lock = asyncio.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    async def _call(self, function: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor(), function, *args)
        except BrokenProcessPool:  # the worker died (e.g. out of memory): start a fresh one next time
            self._pool = None
            raise

    async def _with_lines(self, doc: LineDocument, call: Any, args: Any) -> Any:
        """`call(uri, version, ..., lines or None, ...)`: tries without the lines, sends them if the worker lacks
        this version. One at a time, so two requests on a new version send the lines once."""
        async with self._lock:
            try:
                return await self._call(call, doc.uri, doc.version, *args(None))
            except turn_worker.NeedLines:
                return await self._call(call, doc.uri, doc.version, *args(list(doc.lines)))

    async def prepare(self, doc: LineDocument) -> None:
        """Build the turns of an opened session log ahead of the first hover."""
        async with self._lock:
            await self._call(turn_worker.prepare, doc.uri, doc.version, False, list(doc.lines))

    async def hover(self, doc: LineDocument, line: int) -> str:
        """The hover markdown for 1-based `line` (an error message when the entry cannot be read)."""
        answer = await self._with_lines(doc, turn_worker.hover, lambda lines: (lines, line))
        if answer[0] == "ok":
            return answer[1]
        return f"machine: cannot tag this entry: {_error(answer).message if answer[0] == 'transcript' else answer[1]}"

    async def turn(self, doc: LineDocument, line: int | None, trace: bool) -> Turn:
        """The turn at 1-based `line` (None: the last) of an open session log; raises TranscriptError."""
        answer = await self._with_lines(doc, turn_worker.turn, lambda lines: (trace, lines, line))
        return _unwrap(answer)

    async def turn_of_lines(self, lines: list[str], uri: str, line: int | None, trace: bool) -> Turn:
        """The turn at `line` of a file that is not open (nothing kept)."""
        return _unwrap(await self._call(turn_worker.turn, uri, None, trace, lines, line))

    def forget(self, uri: str) -> None:
        if self._pool is not None:
            self._pool.submit(turn_worker.forget, uri)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _error(answer: tuple[Any, ...]) -> TranscriptError:
    _, uri, message, line, column = answer
    return TranscriptError(uri, message, line, column)


def _unwrap(answer: tuple[Any, ...]) -> Turn:
    kind = answer[0]
    if kind == "ok":
        return msgspec.msgpack.decode(answer[1], type=Turn)
    if kind == "transcript":
        raise _error(answer)
    if kind == "selection":
        raise SelectionError(answer[1])
    raise UnicodeError(answer[1])
