"""Diagnostics as you type for chat JSONL: per-line results cached by line text, dataset findings on top.

An edit marks only the lines it touched (the LineDocument records them); after a short debounce those lines are
re-checked with `validate.check_line` (cached by text, so moved or repeated lines cost a dict lookup) and the
dataset-level findings (duplicates, train/eval leakage) are recomputed from the per-line fingerprints. The pass on
open (and any change of more than a few lines) checks in batches with `validate.check_lines` instead: same results.
Push (`publishDiagnostics`) or pull (`textDocument/diagnostic`) is chosen from the client's capabilities.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from lsprotocol import types
from pygls.uris import to_fs_path

from machine_lsp.core import validate
from machine_lsp.core.sniff import binary_reason_of_lines, session_log_format
from machine_lsp.core.verb_registry import palette_title
from machine_lsp.lsp import compat
from machine_lsp.lsp.documents import FULL_EDIT, LineDocument, LineEdit
from machine_lsp.lsp.features import LanguageFeature
from machine_lsp.lsp.finding_diagnostics import SOURCE, file_diagnostic, shift_to_line, to_diagnostic
from machine_lsp.lsp.line_index import Filled, LineEntry, LineIndex
from machine_lsp.lsp.positions import strip_eol

logger = logging.getLogger(__name__)

_CHUNK = 2000  # lines checked between yields to the event loop
_FEW = 16  # at most this many lines to check: one at a time; more: batched (validate.check_lines)
#: The per-line cache (line text -> checked entry) is emptied when its keys pass this many characters, and when a
#: document closes: it saves re-checking moved and repeated lines, never more than this much memory.
CACHE_CHARS = 32 * 1024 * 1024
_ENTRY_OVERHEAD = 160  # what a cached entry costs beyond its text (dict slot, LineEntry, LineResult), roughly
_strip_eol = operator.methodcaller("rstrip", "\r\n")  # strip_eol, called from C (a line holds no other \r \n)
_findings_of = operator.attrgetter("findings")


@dataclass
class DocState:
    uri: str
    kind: str | None  # "train", "eval"; None when not chat JSONL (e.g. a session log)
    index: LineIndex | None = None
    file_diagnostics: list[types.Diagnostic] = field(default_factory=list)
    dataset: list[types.Diagnostic] = field(default_factory=list)
    dataset_findings: list[Any] = field(default_factory=list)  # the core's Findings behind `dataset`
    published: list[types.Diagnostic] = field(default_factory=list)
    result_id: int = 0
    task: asyncio.Task | None = None
    sleeping: bool = False
    last_check_ms: float = 0.0
    last_checked_lines: int = 0
    announced_prompts: int | None = None  # LineIndex.prompts_version other documents last saw (leakage)


class DiagnosticsFeature(LanguageFeature):
    def __init__(self, server) -> None:
        super().__init__(server)
        self.docs: dict[str, DocState] = {}
        self.pull = False
        self._cache: dict[str, dict[str, LineEntry]] = {}  # kind -> line text -> entry
        self._cache_chars = 0

    # -- wiring ---------------------------------------------------------------------------------------------
    def register(self) -> None:
        server = self.server

        @server.feature(
            types.TEXT_DOCUMENT_DIAGNOSTIC,
            types.DiagnosticOptions(
                identifier=SOURCE, inter_file_dependencies=True, workspace_diagnostics=False
            ),
        )
        async def pull(params: types.DocumentDiagnosticParams) -> types.DocumentDiagnosticReport:
            return await self.report(params.text_document.uri, params.previous_result_id)

    def initialized(self) -> None:
        caps = self.server.client_capabilities
        self.pull = bool(caps.text_document and caps.text_document.diagnostic is not None)
        if not self.pull:  # never both: a push-only client gets no diagnosticProvider
            compat.unregister_feature(self.server, types.TEXT_DOCUMENT_DIAGNOSTIC)

    # -- document lifecycle ---------------------------------------------------------------------------------
    def document_open(self, uri: str) -> None:
        self.opened(uri)

    def document_change(self, uri: str) -> None:
        self.schedule(uri)

    def document_close(self, uri: str) -> None:
        self.closed(uri)

    def opened(self, uri: str) -> None:
        doc = self.server.workspace.get_text_document(uri)
        path = to_fs_path(uri) or uri
        kind = self.server.settings.kind_of(path.replace("\\", "/"))
        if kind is None:
            return
        if session_log_format(doc.lines) is not None:
            kind = None
        state = DocState(uri=uri, kind=kind)
        self.docs[uri] = state
        if kind is not None:
            self.schedule(uri, delay=0.0)

    def closed(self, uri: str) -> None:
        state = self.docs.pop(uri, None)
        self._clear_cache()  # its lines are the bulk of the cache; other documents re-fill what they need
        if state is None:
            return
        if state.task is not None:
            state.task.cancel()
        if not self.pull:
            self.server.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=[])
            )
        if state.index is not None and state.index.prompt_counts:
            self._dataset_changed(exclude=uri)

    def settings_changed(self) -> None:
        """Globs may have changed: re-classify every open document."""
        self._clear_cache()
        for uri in list(self.server.workspace.text_documents):
            old = self.docs.pop(uri, None)
            if old is not None and old.task is not None:
                old.task.cancel()
            self.opened(uri)
            if uri not in self.docs or self.docs[uri].kind is None:
                self._clear(uri)
        if self.pull:
            self._refresh_client()

    def _clear(self, uri: str) -> None:
        if not self.pull:
            self.server.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=[])
            )

    # -- scheduling -----------------------------------------------------------------------------------------
    def schedule(self, uri: str, delay: float | None = None) -> None:
        state = self.docs.get(uri)
        if state is None or state.kind is None:
            return
        if state.task is not None and not state.task.done():
            if not state.sleeping:
                return  # the running pass picks up the new edits before it finishes
            state.task.cancel()
        if delay is None:
            delay = self.server.settings.debounce_ms / 1000
        state.task = asyncio.ensure_future(self._run(state, delay))

    async def _run(self, state: DocState, delay: float) -> None:
        state.sleeping = True
        try:
            await asyncio.sleep(delay)
        finally:
            state.sleeping = False
        try:
            changed = await self.check(state)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a validator bug must not take the server down
            logger.exception("diagnostics failed for %s", state.uri)
            state.file_diagnostics = [
                file_diagnostic(f"machine-lsp could not check this file: {exc}", "error")
            ]
            state.index = None
            changed = True
        if changed:
            self._publish(state)

    async def wait_idle(self, uri: str) -> DocState | None:
        state = self.docs.get(uri)
        while state is not None and state.task is not None and not state.task.done():
            await asyncio.shield(state.task)
            state = self.docs.get(uri)
        return state

    # -- checking -------------------------------------------------------------------------------------------
    async def check(self, state: DocState) -> bool:
        """Bring `state` up to date with its document; re-checks only lines touched since the last check."""
        doc = self.server.workspace.get_text_document(state.uri)
        started = time.perf_counter()
        checked = 0
        dirty = False  # dataset-level findings must be recomputed
        while True:
            edits = doc.take_edits() if isinstance(doc, LineDocument) else [FULL_EDIT]
            lines = doc.lines
            kind = self._per_line_kind(state, doc, lines)
            if kind is None:  # a finding about the whole file stands for every line
                break
            index, spliced = self._spliced_index(state, edits, len(lines))
            many = index.pending is None or len(index.pending) > _CHUNK
            filled = await self._fill(index, list(lines) if many else lines, kind)
            checked += filled.count
            dirty |= spliced or filled.dirty
            if isinstance(doc, LineDocument) and doc.edits:
                continue  # typed while we were checking
            break
        if state.index is not None and (dirty or self._leaks(state, state.index.touched_prompts)):
            self._dataset(state, doc.lines)
        if state.index is not None:
            state.index.touched_prompts.clear()
        if checked > _CHUNK:
            # A big pass allocates almost nothing the collector tracks, so its new 100k-slot lists (the index, the
            # document's lines) are still in the youngest generation when it ends, and the first collection after
            # it, typically in the next keystroke's check, walks them (~4 ms). Do that walk here, in the pass, and
            # move them to the oldest generation, which is walked rarely.
            gc.collect(1)
        state.last_check_ms = (time.perf_counter() - started) * 1000
        state.last_checked_lines = checked
        return True

    def _per_line_kind(self, state: DocState, doc: Any, lines: Sequence[str]) -> str | None:
        """The kind the lines are checked as, or None when one finding covers the whole file (too big, binary,
        or another chat format: its fix is served with line 1's, line_result); that finding is then set."""
        unchecked = _too_big(doc, self.server.settings.max_file_mb) or binary_reason_of_lines(lines)
        if unchecked:
            state.index = None
            state.dataset, state.dataset_findings = [], []
            state.file_diagnostics = [file_diagnostic(unchecked)]
            return None
        kind = validate.refine_kind(state.kind or "auto", lines)  # DPO pairs / KTO rows: their own checks
        other_format = kind not in validate.PREFERENCE_KINDS and lines and _other_format(lines)
        diagnosis = validate.diagnose_lines(lines) if other_format else None
        if diagnosis is not None:
            state.index = None
            state.dataset, state.dataset_findings = [], [diagnosis]
            state.file_diagnostics = [to_diagnostic(doc.position_codec, lines, diagnosis, None)]
            return None
        state.file_diagnostics = []
        return kind

    def _spliced_index(self, state: DocState, edits: list[LineEdit], count: int) -> tuple[LineIndex, bool]:
        """`state`'s line index with `edits` applied (a new one after a full edit), and whether the dataset-level
        findings must be recomputed."""
        index = state.index
        if index is None or FULL_EDIT in edits:
            state.index = LineIndex(count)
            return state.index, True
        dirty = False
        dataset_lines = {f.line - 1 for f in state.dataset_findings}
        for edit in edits:
            delta = edit.new_count - (edit.old_end - edit.start)
            if delta and any(line >= edit.start for line in dataset_lines):
                dirty = True  # findings below the edit would move (and name moved lines)
            dirty |= index.splice(edit)
        if len(index.entries) != count:
            state.index = LineIndex(count)
            return state.index, True
        return index, dirty

    async def _fill(self, index: LineIndex, lines: Sequence[str], kind: str) -> Filled:
        """Check every line whose entry is None, _CHUNK lines at a time (batched: validate.check_lines, the cache
        and the counts are driven from C); yields to the loop after every full chunk."""
        if self._cache_chars > CACHE_CHARS:
            self._clear_cache()
        entries = index.entries
        filled = Filled()
        todo: Sequence[int]
        if index.pending is None and entries.count(None) == len(entries):
            todo = range(len(entries))
        else:
            positions = range(len(entries)) if index.pending is None else index.pending
            todo = [position for position in positions if entries[position] is None]
        index.pending = []
        if len(todo) <= _FEW:  # an edit: line by line (the batch set-up would cost more than the check)
            cache = self._cache.setdefault(kind, {})
            for position in todo:
                text = strip_eol(lines[position])
                if position == 0 and text.startswith("\ufeff"):
                    entry = self._entry(text, lines[position], kind)  # the BOM rule depends on the position
                else:
                    entry = cache.get(text)
                    if entry is None:
                        entry = cache[text] = self._entry(text, lines[position], kind, cached=True)
                        self._cache_chars += len(text) + _ENTRY_OVERHEAD
                filled.dirty |= index.put(position, entry)
            filled.count = len(todo)
            return filled
        for start in range(0, len(todo), _CHUNK):
            chunk = todo[start : start + _CHUNK]
            filled.dirty |= index.put_many(chunk, self._entries(chunk, lines, kind))
            filled.count += len(chunk)
            if len(chunk) == _CHUNK:
                await asyncio.sleep(0)
        return filled

    def _entries(self, positions: Sequence[int], lines: Sequence[str], kind: str) -> list[LineEntry]:
        """Entries for lines `positions`: from the cache by text, else checked by validate.check_lines."""
        cache = self._cache.setdefault(kind, {})
        if type(positions) is range and positions.step == 1:
            raw = lines[positions.start : positions.stop]
        else:
            raw = [lines[position] for position in positions]
        texts = list(map(_strip_eol, raw))
        found: list[LineEntry | None] = list(map(cache.get, texts))
        if positions[0] == 0 and texts[0].startswith("\ufeff"):
            found[0] = self._entry(texts[0], raw[0], kind)  # the BOM rule depends on the position: not cached
        missing = found.count(None)
        if not missing:
            return found  # type: ignore[return-value]
        if missing == len(found):
            todo = range(len(found))
            todo_texts = texts
        else:
            todo = [i for i, entry in enumerate(found) if entry is None]
            todo_texts = [texts[i] for i in todo]
        results = validate.check_lines(todo_texts, kind, fallback=_check_cached)  # type: ignore[arg-type]
        new = list(map(LineEntry, results, itertools.repeat(())))
        for i in itertools.compress(range(len(results)), map(_findings_of, results)):
            new[i] = self._entry_of(results[i], raw[todo[i]])
        cache.update(zip(todo_texts, new, strict=True))
        self._cache_chars += sum(map(len, todo_texts)) + _ENTRY_OVERHEAD * len(todo_texts)
        if type(todo) is range:
            return new
        for i, entry in zip(todo, new, strict=True):
            found[i] = entry
        return found  # type: ignore[return-value]

    @property
    def cache_chars(self) -> int:
        """What the per-line cache holds, in characters of line text plus a per-entry allowance."""
        return self._cache_chars

    def _clear_cache(self) -> None:
        self._cache.clear()
        self._cache_chars = 0

    def _entry(self, text: str, line: str, kind: str, *, cached: bool = False) -> LineEntry:
        """The entry of a line; `cached`: for any position (the cache), else for line 1 (the BOM rule applies)."""
        checked = _check_cached(text, 1, kind) if cached else validate.check_line(text, 1, kind)  # type: ignore[arg-type]
        return self._entry_of(checked, line)

    def _entry_of(self, result, line: str) -> LineEntry:
        codec = self.server.workspace.position_codec
        diagnostics = tuple(
            to_diagnostic(codec, [line], finding, line_offset=0) for finding in result.findings
        )
        return LineEntry(result=result, diagnostics=diagnostics)

    def _dataset(self, state: DocState, lines: Sequence[str]) -> None:
        index = state.index
        if index is None:
            return
        other = self._other_prompts(state)
        duplicates = sum(index.fp_counts.values()) > len(index.fp_counts)
        if not duplicates and not (other and not other.isdisjoint(index.prompt_counts)):
            # The counts cover exactly the checked rows: no duplicate and no leaked prompt, so no finding.
            state.dataset_findings, state.dataset = [], []
            return
        results = [entry.result if entry is not None else None for entry in index.entries]
        codec = self.server.workspace.position_codec
        findings = validate.dataset_findings(results, other)
        state.dataset_findings = findings
        state.dataset = [to_diagnostic(codec, lines, f, line_offset=None) for f in findings]

    def _leaks(self, state: DocState, prompts: set[str]) -> bool:
        if not prompts:
            return False
        other = self._other_prompts(state)
        return bool(other and not other.isdisjoint(prompts))

    def _other_prompts(self, state: DocState) -> set[str] | None:
        """Prompts of open files of the other kind (train vs eval), for leakage checks."""
        other: set[str] = set()
        found = False
        for uri, st in self.docs.items():
            if uri != state.uri and st.kind is not None and (st.kind == "eval") != (state.kind == "eval"):
                found = True
                if st.index is not None:
                    other.update(st.index.prompt_counts)
        return other if found else None

    def _dataset_changed(self, exclude: str) -> None:
        for uri, st in self.docs.items():
            if uri != exclude and st.kind is not None and st.index is not None:
                doc = self.server.workspace.get_text_document(uri)
                before = st.dataset
                self._dataset(st, doc.lines)
                if before != st.dataset:
                    self._publish(st, propagate=False)

    # -- results --------------------------------------------------------------------------------------------
    def diagnostics_of(self, state: DocState) -> list[types.Diagnostic]:
        out = list(state.file_diagnostics)
        if state.index is not None:
            entries = state.index.entries
            for line in state.index.diag_lines:
                entry = entries[line]
                if entry is not None:
                    out.extend(shift_to_line(d, line) for d in entry.diagnostics)
        out.extend(state.dataset)
        return out

    def _publish(self, state: DocState, propagate: bool = True) -> None:
        state.published = self.diagnostics_of(state)
        state.result_id += 1
        if not self.pull:
            doc = self.server.workspace.get_text_document(state.uri)
            self.server.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(
                    uri=state.uri, diagnostics=state.published, version=doc.version
                )
            )
        elif not propagate:
            self._refresh_client()
        version = state.index.prompts_version if state.index is not None else -1
        if propagate and state.announced_prompts != version:
            state.announced_prompts = version
            if any(
                st.kind is not None and (st.kind == "eval") != (state.kind == "eval")
                for st in self.docs.values()
            ):
                self._dataset_changed(exclude=state.uri)

    def _refresh_client(self) -> None:
        caps = self.server.client_capabilities
        if caps.workspace and caps.workspace.diagnostics and caps.workspace.diagnostics.refresh_support:
            self.server.workspace_diagnostic_refresh(None)

    async def report(self, uri: str, previous_result_id: str | None) -> types.DocumentDiagnosticReport:
        state = await self.wait_idle(uri)
        if state is None or state.kind is None:
            return types.RelatedFullDocumentDiagnosticReport(items=[], result_id="none")
        if state.result_id == 0:
            await self.check(state)
            self._publish(state)
        result_id = f"{id(state)}-{state.result_id}"
        if previous_result_id == result_id:
            return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        return types.RelatedFullDocumentDiagnosticReport(items=state.published, result_id=result_id)

    def line_result(self, uri: str, line0: int) -> Any | None:
        """The cached core result for a line (used by quick fixes), computed if missing."""
        state = self.docs.get(uri)
        opened = self.server.open_line(uri, line0)
        if opened is None:
            return None
        kind = state.kind if state is not None and state.kind else "auto"
        result = validate.check_line(strip_eol(opened[1]), line0 + 1, kind)  # type: ignore[arg-type]
        extra = [f for f in (state.dataset_findings if state else []) if f.line == line0 + 1]
        if extra:
            result = msgspec.structs.replace(result, findings=[*result.findings, *extra])
        return result


def _other_format(lines: Sequence[str]) -> bool:
    """Cheap pre-sniff for validate.diagnose_lines on the first non-blank line."""
    first = next((line for line in itertools.islice(lines, 64) if line.strip()), "")
    head = first[:4096].lstrip("\ufeff \t")
    return head.startswith("[") or "conversations" in head or '"prompt"' in head


def _check_cached(text: str, line_no: int, kind: str):
    """check_lines' fallback: cached entries are checked as line 1 (and moved when published); a line starting with
    a BOM is checked as line 2, since the BOM rule holds on the first line only (which is never cached)."""
    return validate.check_line(text, 2 if text.startswith("\ufeff") else 1, kind)  # type: ignore[arg-type]


def _too_big(doc, max_mb: float) -> str | None:
    if max_mb <= 0:
        return None
    size = doc.chars if isinstance(doc, LineDocument) else len(doc.source)  # code points: close enough
    if size > max_mb * 1024 * 1024:
        too_big = f"file too large for live validation ({size / 1048576:.1f} MB > {max_mb:g} MB)"
        return f"{too_big}; run {palette_title('machine.validate')} (`machine train validate`)"
    return None
