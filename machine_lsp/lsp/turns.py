"""The turns of open session logs, built once per document version and never on the event loop.

A hover or a tag on a 40,000-line log needs every turn of the file (a turn's conversation is its whole path
from the root). Building them is linear but not free, so it runs in a worker thread (one at a time: a second
request for the same version waits for the first build) and the result is kept until the document changes or
closes. The event loop stays free to answer other requests meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from machine_lsp.core.selection import document_turns
from machine_lsp.core.transcripts import TurnList
from machine_lsp.lsp.documents import LineDocument


class TurnCache:
    def __init__(self) -> None:
        # One worker: parses are CPU-bound (the GIL would serialise them anyway) and memory stays bounded.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="machine-lsp-turns")
        self._built: dict[tuple[str, bool], tuple[int | None, asyncio.Future[TurnList]]] = {}

    async def get(self, doc: LineDocument, *, trace: bool = False) -> TurnList:
        """The turns of `doc` at its current version (TranscriptError is raised as load_turns raises it)."""
        key = (doc.uri, trace)
        version = doc.version
        cached = self._built.get(key)
        if cached is None or cached[0] != version or version is None:
            # A snapshot of the lines: later edits make a new list, never change this one's items.
            lines = list(doc.lines)
            build = functools.partial(document_turns, lines, doc.uri, trace=trace)
            future = asyncio.get_running_loop().run_in_executor(self.executor, build)
            self._built[key] = (version, future)
            cached = self._built[key]
        return await asyncio.shield(cached[1])

    def forget(self, uri: str) -> None:
        for key in [key for key in self._built if key[0] == uri]:
            del self._built[key]
