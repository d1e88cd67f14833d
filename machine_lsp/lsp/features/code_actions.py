"""Code actions: tag the row / session entry under the cursor, tag a selection, quick fixes for findings.

Tag actions carry a `machine.tag` command (the store is only touched when the user picks one); a row already tagged
also offers `machine.untag` for each of its standing tags. Actions whose
command carries `ask` (a note, a rewrite, a selection's prompt) are offered only to clients that declared
`clientPrompts` (they ask the user, then add the answer to the arguments); to those clients the plain tags carry
`offer: "note"` (ask for a note, an empty answer skips it); the others get the plain actions, and
hover names the `machine.tag` arguments for a note or rewrite. Quick fixes are sent without edits and resolved
lazily (`codeAction/resolve`) when the client supports it; the file's fix-all is lsp/fix_all.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from machine_lsp.core.conflicts import claim_kind, standing
from machine_lsp.core.schema import TagRecord
from machine_lsp.core.selection import row_info
from machine_lsp.core.store import Store, StoreError
from machine_lsp.lsp.features import LanguageFeature
from machine_lsp.lsp.features.diagnostics import DiagnosticsFeature
from machine_lsp.lsp.fix_all import FIX_ALL_KIND, fix_all_action, resolve_fix_all
from machine_lsp.lsp.positions import to_client_character

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase

TAG_KIND = "refactor.machine.tag"
#: Quick fixes are computed for at most this many lines of a range (a select-all on a big file stays quick).
MAX_FIX_LINES = 200


class StandingTags:
    """The store's standing records, read again only when tagged.jsonl changed (code actions are asked for on every
    cursor move: re-reading a large store each time would stall the server)."""

    def __init__(self) -> None:
        self._key: tuple[str, int, int] | None = None
        self._records: list[TagRecord] = []

    def on_line(self, project_start: Path, uri: str, line: int) -> list[TagRecord]:
        store = Store.open(project_start)
        try:
            st = os.stat(store.tagged_path, follow_symlinks=False)
        except OSError:
            return []
        key = (str(store.tagged_path), st.st_mtime_ns, st.st_size)
        if key != self._key:
            try:
                self._records = standing(store.records())
            except StoreError:
                self._records = []
            self._key = key
        return [
            r for r in self._records if r.source.uri == uri and line in (r.source.line, r.source.end_line)
        ]


class CodeActionsFeature(LanguageFeature):
    def __init__(self, server: ServerBase, diagnostics: DiagnosticsFeature) -> None:
        super().__init__(server)
        self.diagnostics = diagnostics  # its per-line results hold the findings' fixes
        self._standing = StandingTags()

    def register(self) -> None:
        server = self.server

        @server.feature(
            types.TEXT_DOCUMENT_CODE_ACTION,
            types.CodeActionOptions(
                code_action_kinds=[types.CodeActionKind.QuickFix, TAG_KIND, FIX_ALL_KIND],
                resolve_provider=True,
            ),
        )
        def code_actions(params: types.CodeActionParams) -> list[types.CodeAction] | None:
            return self.actions(params) or None

        @server.feature(types.CODE_ACTION_RESOLVE)
        def resolve(action: types.CodeAction) -> types.CodeAction:
            return self.resolve(action)

    # -- actions --------------------------------------------------------------------------------------------
    def actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        doc = self.server.open_document(uri)
        if doc is None:
            return []
        lines = doc.lines
        rng = params.range
        only = params.context.only
        out: list[types.CodeAction] = []
        if _wanted(only, types.CodeActionKind.QuickFix):
            out.extend(self._quick_fixes(uri, rng, params.context.diagnostics))
        # Asked for by kind (on save, "Source Action…"), or next to a line's own quick fix in the light bulb.
        if (only and _wanted(only, FIX_ALL_KIND)) or (not only and out):
            eager = not self._client_resolves_edits()
            out.extend(
                a for a in [fix_all_action(self.server, self.diagnostics, uri, eager=eager)] if a is not None
            )
        if not _wanted(only, TAG_KIND):
            return out
        line0 = rng.start.line
        selection = rng.start != rng.end
        info = row_info(lines[line0]) if 0 <= line0 < len(lines) else None
        if info is not None and (not selection or rng.start.line == rng.end.line or rng.end.character == 0):
            tools = info["tools"] or (
                info["kind"] == "session_log" and any('"toolCall"' in line for line in lines)
            )
            out.extend(self._tag_actions(uri, line0 + 1, info["kind"], tools))
            out.extend(self._untag_actions(uri, line0 + 1, info["kind"]))
            out.extend(self._rewrite_actions(uri, line0 + 1))
        elif selection and self.server.settings.client_prompts:  # the selection's prompt is asked for
            out.extend(self._selection_actions(uri, rng))
        return out

    def _tag_actions(self, uri: str, line: int, kind: str, tools: bool) -> list[types.CodeAction]:
        where = "row" if kind == "chat_jsonl" else "entry"

        def action(title: str, **extra: Any) -> types.CodeAction:
            return _command_action(
                title, "machine.tag", {"uri": uri, "line": line, "verdict": "good", **extra}
            )

        # A client that asks the user (clientPrompts) offers a note on the plain tags too: `offer` is skippable
        # (an empty answer tags without one), where `ask` must be answered.
        offer = {"offer": "note"} if self.server.settings.client_prompts else {}
        actions = [
            action(f"Tag {where} as good", **offer),
            action(f"Tag {where} as bad", verdict="bad", **offer),
        ]
        if self.server.settings.client_prompts:  # only a client that asks the user can complete these
            actions.append(action("Tag as good with note…", ask="note"))
            actions.append(action("Tag as good with rewrite…", ask="rewrite"))
        if tools:
            actions.append(action("Tag as good with full trace", trace=True))
        return actions

    def _untag_actions(self, uri: str, line: int, kind: str) -> list[types.CodeAction]:
        """One "Untag" per standing tag made from this row or entry (a tag with a note is changed by tagging
        again with the note: that record supersedes the old one)."""
        where = "row" if kind == "chat_jsonl" else "entry"
        return [
            _command_action(
                f"Untag {where} (record {record.id[:8]}, {claim_kind(record)})",
                "machine.untag",
                {"uri": uri, "id": record.id},
            )
            for record in self._standing.on_line(self.server.project_start(uri), uri, line)
        ]

    def _rewrite_actions(self, uri: str, line: int) -> list[types.CodeAction]:
        """ "Add a rewrite…" on a row whose standing tag is bad: the client asks for the better answer and sends
        `machine.retag {id, verdict: good, rewrite}`, which keeps the model's answer as the original, so the row
        becomes a preference pair (rewrite chosen, original rejected). Only a client that asks the user."""
        if not self.server.settings.client_prompts:
            return []
        return [
            _command_action(
                f"Add a rewrite… (record {record.id[:8]} becomes a pair)",
                "machine.retag",
                {"uri": uri, "id": record.id, "verdict": "good", "ask": "rewrite"},
            )
            for record in self._standing.on_line(self.server.project_start(uri), uri, line)
            if record.verdict == "bad"
        ]

    def _selection_actions(self, uri: str, rng: types.Range) -> list[types.CodeAction]:
        selection = {
            "start": {"line": rng.start.line, "character": rng.start.character},
            "end": {"line": rng.end.line, "character": rng.end.character},
        }
        return [
            _command_action(
                f"Tag selection as {verdict}…",
                "machine.tag",
                {"uri": uri, "range": selection, "verdict": verdict, "ask": "prompt"},
            )
            for verdict in ("good", "bad")
        ]

    # -- quick fixes ----------------------------------------------------------------------------------------
    def _quick_fixes(
        self, uri: str, rng: types.Range, sent: list[types.Diagnostic]
    ) -> list[types.CodeAction]:
        """A fix for every finding on the lines `rng` touches, from the server's own per-line results: clients
        send only some diagnostics in the context (eglot: those under the cursor), or none."""
        eager = not self._client_resolves_edits()
        state = self.diagnostics.docs.get(uri)
        published = state.published if state is not None and state.kind is not None else []
        lines = {d.range.start.line for d in sent if d.source == "machine" and d.code}
        if state is not None and state.kind is not None:
            last = (
                rng.end.line if rng.end.line == rng.start.line or rng.end.character > 0 else rng.end.line - 1
            )
            lines.update(
                range(rng.start.line, min(max(last, rng.start.line), rng.start.line + MAX_FIX_LINES) + 1)
            )
        out = []
        for line0 in sorted(lines):
            result = self.diagnostics.line_result(uri, line0)
            if result is None:
                continue
            seen: set[str] = set()
            for finding in result.findings:
                if finding.fix is None or finding.code in seen:
                    continue
                seen.add(finding.code)
                on_line = [d for d in sent if d.range.start.line == line0 and d.code == finding.code] or [
                    d for d in published if d.range.start.line == line0 and d.code == finding.code
                ]
                action = types.CodeAction(
                    title=finding.fix.title,
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=on_line or None,
                    is_preferred=True,
                    data={"uri": uri, "line": line0, "code": finding.code},
                )
                out.append(self.resolve(action) if eager else action)
        return out

    def _client_resolves_edits(self) -> bool:
        caps = self.server.client_capabilities
        support = (
            caps.text_document
            and caps.text_document.code_action
            and caps.text_document.code_action.resolve_support
        )
        return bool(support and "edit" in support.properties)

    def resolve(self, action: types.CodeAction) -> types.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        if data.get("fix_all") is True:
            return resolve_fix_all(self.server, self.diagnostics, action)
        uri, line0, code = data.get("uri"), data.get("line"), data.get("code")
        if not isinstance(uri, str) or not isinstance(line0, int):
            return action
        result = self.diagnostics.line_result(uri, line0)
        doc = self.server.open_document(uri)
        if result is None or doc is None:
            return action
        finding = next((f for f in result.findings if f.code == code and f.fix is not None), None)
        if finding is None:
            return action
        lines = doc.lines
        codec = doc.position_codec
        edits = []
        for edit in finding.fix.edits:
            # check_line numbered this line line0 + 1; edits use 1-based lines and code-point columns.
            start = _position(codec, lines, edit.line - 1, edit.column - 1)
            end = _position(codec, lines, edit.end_line - 1, edit.end_column - 1)
            edits.append(types.TextEdit(range=types.Range(start=start, end=end), new_text=edit.new_text))
        action.edit = types.WorkspaceEdit(
            document_changes=[
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=doc.version),
                    edits=edits,
                )
            ]
        )
        return action


def _command_action(title: str, command: str, args: dict[str, Any]) -> types.CodeAction:
    """A tag action: `command` with its one argument object, run only when the user picks it."""
    return types.CodeAction(
        title=title, kind=TAG_KIND, command=types.Command(title=title, command=command, arguments=[args])
    )


def _position(codec, lines, line0: int, col0: int) -> types.Position:
    if line0 >= len(lines):
        return types.Position(line=len(lines), character=0)
    return types.Position(line=line0, character=to_client_character(codec, lines[line0], col0))


def _wanted(only: list[str] | None, kind: str) -> bool:
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)
