"""`source.fixAll.machine`: every mechanical quick fix of a chat JSONL document in one edit.

The fixes are the validator's (core.fixes.fix_all, the same rounds as `machine train validate --fix`), applied to
the editor's buffer, not the file on disk. The edit replaces only the lines that changed, so the rest of the buffer
(and the cursor) stays put. VS Code runs it on save with `"editor.codeActionsOnSave": {"source.fixAll": "explicit"}`
(or `"source.fixAll.machine"`). Offered when asked for by kind (`source`, `source.fixAll`) and, in the light bulb,
next to a line's own quick fix; sent without its edit to clients that resolve edits (`codeAction/resolve`).
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from machine_lsp.core.fixes import fix_all
from machine_lsp.core.lines import split_lines_keep_ends
from machine_lsp.lsp.positions import to_client_character

FIX_ALL_KIND = "source.fixAll.machine"
TITLE = "Fix all mechanical problems in this file (machine)"


def fix_all_action(server: Any, diagnostics: Any, uri: str, *, eager: bool) -> types.CodeAction | None:
    """The fix-all action for `uri`, or None when nothing in it can be fixed (or it is not chat JSONL)."""
    edit = _edit(server, diagnostics, uri)
    if edit is None:
        return None
    action = types.CodeAction(title=TITLE, kind=FIX_ALL_KIND, data={"uri": uri, "fix_all": True})
    if eager:
        action.edit = edit
    return action


def resolve_fix_all(server: Any, diagnostics: Any, action: types.CodeAction) -> types.CodeAction:
    data = action.data if isinstance(action.data, dict) else {}
    if isinstance(uri := data.get("uri"), str):
        action.edit = _edit(server, diagnostics, uri)
    return action


def _edit(server: Any, diagnostics: Any, uri: str) -> types.WorkspaceEdit | None:
    """`diagnostics`: the diagnostics feature, whose per-document state says which chat kind the buffer is."""
    doc = server.open_document(uri)
    state = diagnostics.docs.get(uri)
    if doc is None or state is None or state.kind is None:  # only documents checked as chat JSONL
        return None
    if doc.chars > server.settings.max_file_mb * 1024 * 1024:
        return None  # the size the diagnostics refuse too: `machine train validate --fix` on the file instead
    old = doc.source
    try:
        fixed, outcome = fix_all(old.encode("utf-8", "surrogateescape"), state.kind, file=uri)
    except ValueError:  # binary data: the diagnostics say so
        return None
    if not outcome.applied:
        return None
    text_edit = changed_lines(doc.position_codec, old, fixed.decode("utf-8", "surrogateescape"))
    versioned = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=doc.version)
    return types.WorkspaceEdit(
        document_changes=[types.TextDocumentEdit(text_document=versioned, edits=[text_edit])]
    )


def changed_lines(codec: Any, old: str, new: str) -> types.TextEdit:
    """One edit replacing the lines between the texts' common first and last lines."""
    a, b = split_lines_keep_ends(old), split_lines_keep_ends(new)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    end_line = len(a) - tail
    if (
        end_line == len(a) and a and a[-1] == a[-1].rstrip("\r\n")
    ):  # the last line has no end: stop at its end
        end = types.Position(line=len(a) - 1, character=to_client_character(codec, a[-1], len(a[-1])))
    else:
        end = types.Position(line=end_line, character=0)
    return types.TextEdit(
        range=types.Range(start=types.Position(line=head, character=0), end=end),
        new_text="".join(b[head : len(b) - tail]),
    )
