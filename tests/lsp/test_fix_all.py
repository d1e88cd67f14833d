"""`source.fixAll.machine` over stdio: every mechanical fix of a chat JSONL buffer in one edit (the fixes of
`machine train validate --fix`), asked for by kind as VS Code's `editor.codeActionsOnSave` asks, for each client."""

from __future__ import annotations

from lsp_helpers import diagnostics, forget, open_doc, raw_request
from lsprotocol import types

LINES = [
    '{"messages": [{"role": "User", "content": "hi 😀"}, {"role": "assistant", "content": "yo"}]}',
    '{"messages": [{"role": "user", "content": "fine"}, {"role": "assistant", "content": "ok"}]}',
    '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},',
    "",
    '{"messages": [{"role": "human", "content": "q2"}, {"role": "assistant", "content": "a2"}]}',
]
FIXED = [
    '{"messages": [{"role": "user", "content": "hi 😀"}, {"role": "assistant", "content": "yo"}]}',
    LINES[1],
    '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}',
    '{"messages": [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]}',
]


async def _ask(client, uri: str, line: int, only: list[str] | None, diags=()) -> list[dict]:
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(
            start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)
        ),
        context=types.CodeActionContext(diagnostics=list(diags), only=only),
    )
    return [dict(a) for a in (await raw_request(client, types.TEXT_DOCUMENT_CODE_ACTION, params) or [])]


def _apply(text: str, edit: dict) -> str:
    """One whole-line TextEdit (the fix-all's shape: it starts and ends at column 0)."""
    lines = text.splitlines(keepends=True)
    start, end = edit["range"]["start"], edit["range"]["end"]
    assert start["character"] == 0 and end["character"] == 0, edit
    return "".join(lines[: start["line"]]) + edit["newText"] + "".join(lines[end["line"] :])


async def test_fix_all_applies_every_mechanical_fix_at_once(client):
    text = "\n".join(LINES) + "\n"
    uri = open_doc(client, client.root / "train.jsonl", text)
    found = await diagnostics(client, uri)
    assert {d.code for d in found} >= {"role-unknown", "trailing-comma", "blank-line"}
    on_save = await _ask(client, uri, 0, ["source.fixAll"])  # what codeActionsOnSave sends
    assert [a["kind"] for a in on_save] == ["source.fixAll.machine"], on_save
    action = on_save[0]
    if not action.get("edit"):  # clients that resolve edits get it lazily
        structured = client.protocol._converter.structure(action, types.CodeAction)
        action = await raw_request(client, types.CODE_ACTION_RESOLVE, structured)
    (change,) = action["edit"]["documentChanges"]
    assert change["textDocument"]["version"] == 1
    (edit,) = change["edits"]
    assert edit["range"]["start"]["line"] == 0 and edit["range"]["end"]["line"] == 5
    fixed = _apply(text, edit)
    assert fixed == "\n".join(FIXED) + "\n"
    # The light bulb on a fixable line offers it next to the line's quick fix; a clean line does not.
    bulb = await _ask(client, uri, 2, None, [d for d in found if d.range.start.line == 2])
    assert "source.fixAll.machine" in [a.get("kind") for a in bulb] and "quickfix" in [
        a.get("kind") for a in bulb
    ]
    assert "source.fixAll.machine" not in [a.get("kind") for a in await _ask(client, uri, 1, None)]
    # Applied, the buffer has nothing left to fix: no action, no finding with a fix.
    forget(client, uri)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
        )
    )
    assert await _ask(client, uri, 0, ["source.fixAll"]) == []
    assert [d for d in await diagnostics(client, uri) if d.severity == types.DiagnosticSeverity.Error] == []


async def test_fix_all_is_left_out_of_other_files(vscode):
    uri = open_doc(vscode, vscode.root / "notes.md", '{"role": "User"},\n')
    assert await _ask(vscode, uri, 0, ["source.fixAll"]) == []
