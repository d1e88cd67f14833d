"""Helpers shared by the language-server tests (imported as a plain module: tests/ is not a package)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

SERVER = [sys.executable, "-m", "machine_lsp.lsp"]
CLIENTS = ["visual-studio-code", "neovim@v0.9", "neovim@v0.11"]
WAIT = 20.0  # upper bound of any single wait; the server normally answers in milliseconds


def setup_client(client: LanguageClient) -> None:
    """Record machine/jobEvent notifications and answer showMessageRequest from `client.answers`."""
    client.job_events = []  # type: ignore[attr-defined]
    client.answers = []  # type: ignore[attr-defined]
    client.questions = []  # type: ignore[attr-defined]

    @client.feature("machine/jobEvent")
    def job_event(params: Any) -> None:
        client.job_events.append(params)  # type: ignore[attr-defined]

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def ask(params: types.ShowMessageRequestParams) -> types.MessageActionItem | None:
        client.questions.append(params)  # type: ignore[attr-defined]
        answer = client.answers.pop(0) if client.answers else None  # type: ignore[attr-defined]
        return types.MessageActionItem(title=answer) if answer else None


async def start(client: LanguageClient, spec: str, root: Path, options: dict | None = None) -> None:
    setup_client(client)
    (root / ".machine").mkdir(exist_ok=True)
    await asyncio.wait_for(
        client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities(spec),
                root_uri=root.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="project")],
                # The VS Code extension declares clientPrompts (it asks for a note / rewrite / prompt itself).
                initialization_options=options
                or {"machine": {"debounceMs": 10, "clientPrompts": spec == "visual-studio-code"}},
            )
        ),
        WAIT,
    )


def row(user: str, answer: str, **extra: Any) -> str:
    return json.dumps(
        {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}], **extra},
        ensure_ascii=False,
    )


def open_doc(client: LanguageClient, path: Path, text: str, version: int = 1) -> str:
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="jsonl", version=version, text=text)
        )
    )
    return uri


def is_pull(client: LanguageClient) -> bool:
    caps = client.capabilities
    return bool(caps and caps.text_document and caps.text_document.diagnostic is not None)


async def diagnostics(client: LanguageClient, uri: str) -> list[types.Diagnostic]:
    """The server's current diagnostics for `uri`, by pull or by waiting for a push (bounded).

    For push clients, call `forget(client, uri)` before an edit so that only the next publish counts."""
    if is_pull(client):
        report = await asyncio.wait_for(
            client.text_document_diagnostic_async(
                types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
            ),
            WAIT,
        )
        return list(report.items)

    async def pushed() -> list[types.Diagnostic]:
        while True:
            if uri in client.diagnostics:
                return list(client.diagnostics[uri])
            await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    return await asyncio.wait_for(pushed(), WAIT)


def forget(client: LanguageClient, uri: str) -> None:
    client.diagnostics.pop(uri, None)


def change(
    client: LanguageClient, uri: str, version: int, line: int, start: int, end: int, text: str
) -> None:
    """An incremental edit replacing [start, end) of `line` (client units)."""
    forget(client, uri)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(
                        start=types.Position(line=line, character=start),
                        end=types.Position(line=line, character=end),
                    ),
                    text=text,
                )
            ],
        )
    )


async def command(client: LanguageClient, command_id: str, *args: Any, token: str | None = None) -> Any:
    return await asyncio.wait_for(
        client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=command_id, arguments=list(args), work_done_token=token)
        ),
        60,
    )


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


async def raw_request(client: LanguageClient, method: str, params: Any) -> Any:
    """A request whose result stays plain JSON (pygls's client mis-structures CodeActions carrying a command)."""
    import uuid

    msg_id = str(uuid.uuid4())
    future = client.protocol.send_request(method, params, msg_id=msg_id)
    client.protocol._result_types.pop(msg_id, None)
    return plain(await asyncio.wait_for(asyncio.wrap_future(future), WAIT))


def plain(value: Any) -> Any:
    """pygls decodes JSON objects into namedtuples; turn them back into dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


async def code_actions(
    client: LanguageClient, uri: str, line: int, end: tuple[int, int] | None = None, diags=()
) -> list[dict]:
    end_line, end_char = end if end else (line, 0)
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(
            start=types.Position(line=line, character=0),
            end=types.Position(line=end_line, character=end_char),
        ),
        context=types.CodeActionContext(diagnostics=list(diags)),
    )
    result = await raw_request(client, types.TEXT_DOCUMENT_CODE_ACTION, params)
    return [dict(item) for item in (result or [])]


def store_rows(root: Path) -> list[dict]:
    path = root / ".machine" / "tagged.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def run_action(client: LanguageClient, action: dict, **extra: Any) -> Any:
    cmd = action["command"]
    args = [dict(cmd["arguments"][0], **extra)]
    return await command(client, cmd["command"], *args)


async def untyped_request(client: LanguageClient, method: str, params: Any) -> Any:
    """Send `params` exactly as given (e.g. malformed), bypassing the client's lsprotocol types."""
    import uuid
    from concurrent.futures import Future

    from pygls.protocol.json_rpc import JsonRPCRequestMessage

    msg_id = str(uuid.uuid4())
    future: Future = Future()
    client.protocol._request_futures[msg_id] = future
    client.protocol._send_data(JsonRPCRequestMessage(id=msg_id, method=method, params=params, jsonrpc="2.0"))
    return plain(await asyncio.wait_for(asyncio.wrap_future(future), WAIT))


async def close(client: LanguageClient) -> None:
    """Shut the server down politely, else kill it, so that a failing test never hangs in client.stop()."""
    try:
        await asyncio.wait_for(client.shutdown_session(), 10)
    except Exception:
        pass
    server = client._server
    if server is not None and server.returncode is None:
        try:
            await asyncio.wait_for(server.wait(), 5)
        except TimeoutError:
            server.kill()
