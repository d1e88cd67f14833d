"""The machine-lsp language server: a pygls 2.1 server whose features live in `machine_lsp.lsp.features`.

Start it with `machine-lsp` (stdio) or `machine-lsp --tcp 2087` for debugging. This process never imports
torch, transformers, tinker, tinker_cookbook or peft: long work runs in `python -m machine_lsp.jobs` children.
Everything that depends on pygls internals is in `compat.py`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from machine_lsp import __version__
from machine_lsp.core.sniff import session_log_format
from machine_lsp.core.verb_registry import LSP_COMMANDS
from machine_lsp.lsp import compat
from machine_lsp.lsp.command_entry import command_entry, quiet_reported_errors
from machine_lsp.lsp.features import WORK_DONE_TOKEN, LanguageFeature
from machine_lsp.lsp.server_base import SYNC_KIND, ServerBase

logger = logging.getLogger(__name__)


class MachineLanguageServer(ServerBase):
    def __init__(self) -> None:
        super().__init__()
        assert isinstance(self.protocol, compat.MachineProtocol)
        self.protocol.command_runner = self._run_command
        self.features = _features(self)
        for feature in self.features:
            feature.register()
            for command_id, method in feature.commands().items():
                if (
                    command_id not in LSP_COMMANDS
                ):  # every command a client sees is a line of the verb registry
                    raise ValueError(f"{command_id}: not in core/verb_registry.py")
                self.command(command_id)(command_entry(self, command_id, method))
        quiet_reported_errors()
        self._register_lifecycle()
        self._register_documents()

    def _register_lifecycle(self) -> None:
        @self.feature(types.INITIALIZE)
        def on_initialize(params: types.InitializeParams) -> None:
            compat.install_line_workspace(self, SYNC_KIND)
            self.apply_settings(params.initialization_options)
            for feature in self.features:
                feature.initialized()

        @self.feature(types.SHUTDOWN)
        async def on_shutdown(params: None) -> None:
            for feature in self.features:
                await feature.shutdown()
            self.turns.shutdown()

        @self.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
        def on_configuration(params: types.DidChangeConfigurationParams) -> None:
            self.apply_settings(params.settings)
            for feature in self.features:
                feature.settings_changed()

    def _register_documents(self) -> None:
        """The server owns the text-document notifications and hands each to every feature."""

        @self.feature(types.TEXT_DOCUMENT_DID_OPEN)
        def did_open(params: types.DidOpenTextDocumentParams) -> None:
            doc = self.open_document(params.text_document.uri)
            if doc is not None and session_log_format(doc.lines) is not None:
                self.spawn(self.turns.prepare(doc), f"turns of {doc.uri}")
            self._dispatch("document_open", params.text_document.uri)

        @self.feature(types.TEXT_DOCUMENT_DID_CHANGE)
        def did_change(params: types.DidChangeTextDocumentParams) -> None:
            self._dispatch("document_change", params.text_document.uri)

        @self.feature(types.TEXT_DOCUMENT_DID_CLOSE)
        def did_close(params: types.DidCloseTextDocumentParams) -> None:
            self.turns.forget(params.text_document.uri)
            self._dispatch("document_close", params.text_document.uri)

    def _dispatch(self, hook: str, uri: str) -> None:
        for feature in self.features:
            try:
                getattr(feature, hook)(uri)
            except Exception:  # one feature's bug must not stop the others seeing the document
                logger.exception("%s.%s failed for %s", type(feature).__name__, hook, uri)

    async def _run_command(self, params: types.ExecuteCommandParams) -> Any:
        handler = self.protocol.current_command_handler(params.command)  # type: ignore[attr-defined]
        if handler is None:
            raise JsonRpcInvalidParams(message=f"unknown command {params.command!r}")
        arguments = params.arguments if isinstance(params.arguments, list | tuple) else []
        reset = WORK_DONE_TOKEN.set(params.work_done_token)
        try:
            return await handler(*arguments)
        finally:
            WORK_DONE_TOKEN.reset(reset)


def _features(server: MachineLanguageServer) -> list[LanguageFeature]:
    """Every feature, each given what it uses from another (esbonio's explicit dependencies): the job manager
    (job commands, serving), the diagnostics' per-line results (code actions, server info), the turns cache."""
    from machine_lsp.lsp.features.code_actions import CodeActionsFeature
    from machine_lsp.lsp.features.diagnostics import DiagnosticsFeature
    from machine_lsp.lsp.features.eval_set import EvalSetFeature
    from machine_lsp.lsp.features.hover import HoverFeature
    from machine_lsp.lsp.features.job_commands import JobCommandsFeature
    from machine_lsp.lsp.features.jobs import JobsFeature
    from machine_lsp.lsp.features.scaffold import ScaffoldFeature
    from machine_lsp.lsp.features.server_info import ServerInfoFeature
    from machine_lsp.lsp.features.serving import ServingFeature
    from machine_lsp.lsp.features.sessions import SessionsFeature
    from machine_lsp.lsp.features.tag_edits import TagEditsFeature
    from machine_lsp.lsp.features.tagging import TaggingFeature

    diagnostics = DiagnosticsFeature(server)
    jobs = JobsFeature(server)
    return [
        diagnostics,
        CodeActionsFeature(server, diagnostics),
        HoverFeature(server, server.turns),
        jobs,
        TaggingFeature(server, server.turns),
        JobCommandsFeature(server, jobs),
        ScaffoldFeature(server),
        ServerInfoFeature(server, diagnostics),
        ServingFeature(server, jobs),
        SessionsFeature(server),
        TagEditsFeature(server),
        EvalSetFeature(server),
    ]


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
        return 0
    return compat.start_io(server)


if __name__ == "__main__":
    sys.exit(main())
