"""The machine-lsp language server: a pygls 2.1 server whose features live in `machine_lsp.lsp.features`.

Start it with `machine-lsp` (stdio) or `machine-lsp --tcp 2087` for debugging. This process never imports
torch, transformers, tinker, tinker_cookbook or peft: long work runs in `python -m machine_lsp.jobs` children.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from machine_lsp import __version__
from machine_lsp.lsp.documents import install_line_documents
from machine_lsp.lsp.features import WORK_DONE_TOKEN, LanguageFeature
from machine_lsp.lsp.settings import Settings

HEAVY_MODULES = ("torch", "transformers", "tinker", "tinker_cookbook", "peft")

logger = logging.getLogger(__name__)


class MachineProtocol(LanguageServerProtocol):
    """pygls 2.1.1 runs `workspace/executeCommand` handlers as a sub-task of a generator, so `$/cancelRequest`
    never reaches them. As an `async def`, the command *is* the request's task: cancelling the request cancels
    the command (and the job it awaits)."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        """pygls drops a request whose params do not match the method's type without replying; the client
        would wait forever. Answer it with InvalidParams (the reader then logs and carries on)."""
        try:
            return super().structure_message(data)
        except JsonRpcException:
            if isinstance(data, dict) and "id" in data and "method" in data:
                error = JsonRpcInvalidParams(message=f"invalid params for {data['method']}")
                self._send_response(data["id"], None, error.to_response_error())
            raise

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    async def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams) -> Any:
        handler = self.fm.commands.get(params.command)
        if handler is None:
            raise JsonRpcInvalidParams(message=f"unknown command {params.command!r}")
        arguments = params.arguments if isinstance(params.arguments, list | tuple) else []
        reset = WORK_DONE_TOKEN.set(params.work_done_token)
        try:
            return await handler(*arguments)
        finally:
            WORK_DONE_TOKEN.reset(reset)


class MachineLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "machine-lsp",
            __version__,
            protocol_cls=MachineProtocol,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
        )
        self.settings = Settings()
        self.features: list[LanguageFeature] = []
        # Imported here so that each feature module can import this one for typing.
        from machine_lsp.lsp.features.code_actions import CodeActionsFeature
        from machine_lsp.lsp.features.commands import CommandsFeature
        from machine_lsp.lsp.features.diagnostics import DiagnosticsFeature
        from machine_lsp.lsp.features.hover import HoverFeature
        from machine_lsp.lsp.features.jobs import JobsFeature

        self.diagnostics = DiagnosticsFeature(self)
        self.jobs = JobsFeature(self)
        self.commands = CommandsFeature(self)
        for feature in (
            self.diagnostics,
            CodeActionsFeature(self),
            HoverFeature(self),
            self.jobs,
            self.commands,
        ):
            self.add_feature(feature)
        self._register_lifecycle()

    def add_feature(self, feature: LanguageFeature) -> None:
        feature.register()
        self.features.append(feature)

    def _register_lifecycle(self) -> None:
        @self.feature(types.INITIALIZE)
        def on_initialize(params: types.InitializeParams) -> None:
            self.settings = self.settings.updated(params.initialization_options)
            install_line_documents(self.workspace)
            for feature in self.features:
                feature.initialized()

        @self.feature(types.SHUTDOWN)
        async def on_shutdown(params: None) -> None:
            await self.jobs.shutdown()

        @self.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
        def on_configuration(params: types.DidChangeConfigurationParams) -> None:
            self.settings = self.settings.updated(params.settings)
            self.diagnostics.settings_changed()

    # -- helpers shared by features ------------------------------------------------------------------------------
    def project_start(self, uri: str | None = None) -> Path:
        """Where to look for the project's `.machine/`: the workspace root, else the file's folder, else cwd."""
        root = self.workspace.root_path if self.protocol._workspace is not None else None
        if root:
            return Path(root)
        if uri and (path := to_fs_path(uri)):
            return Path(path).parent
        return Path.cwd()

    def open_document(self, uri: str):
        """The editor's document for `uri`, or None when the client has not opened it."""
        return self.workspace.text_documents.get(uri)

    def heavy_modules_loaded(self) -> list[str]:
        return [name for name in HEAVY_MODULES if name in sys.modules]


def create_server() -> MachineLanguageServer:
    return MachineLanguageServer()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="machine-lsp", description="The machine-lsp language server (stdio)."
    )
    parser.add_argument(
        "--tcp", type=int, metavar="PORT", help="listen on TCP PORT instead of stdio (debugging)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--version", action="version", version=f"machine-lsp {__version__}")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="machine-lsp %(levelname)s %(message)s"
    )
    server = create_server()
    if args.tcp is not None:
        server.start_tcp(args.host, args.tcp)
    else:
        server.start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
