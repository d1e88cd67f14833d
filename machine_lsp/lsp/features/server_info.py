"""`machine.server.info`: what this server is and how it talks to this client (version, process, heavy modules
loaded: none, diagnostics push or pull, position encoding, settings, open requests, the diagnostics' timings)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from machine_lsp import __version__
from machine_lsp.lsp import compat
from machine_lsp.lsp.features import CommandMethod, LanguageFeature
from machine_lsp.lsp.features.diagnostics import DiagnosticsFeature
from machine_lsp.lsp.replies import DocumentTiming, InfoReply, ServerSettingsInfo

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase


class ServerInfoFeature(LanguageFeature):
    def __init__(self, server: ServerBase, diagnostics: DiagnosticsFeature) -> None:
        super().__init__(server)
        self.diagnostics = diagnostics

    def commands(self) -> dict[str, CommandMethod]:
        return {"machine.server.info": self.info}

    async def info(self, args: dict[str, Any]) -> InfoReply:
        server, diagnostics = self.server, self.diagnostics
        caps = server.client_capabilities
        return InfoReply(
            version=__version__,
            pid=os.getpid(),
            python=sys.executable,
            heavy_modules=server.heavy_modules_loaded(),
            diagnostics="pull" if diagnostics.pull else "push",
            position_encoding=str(server.workspace.position_encoding),
            client_progress=bool(caps.window and caps.window.work_done_progress),
            settings=ServerSettingsInfo(**server.settings.to_client()),
            open_requests=compat.open_request_count(server),
            line_cache_chars=diagnostics.cache_chars,
            timing={
                uri: DocumentTiming(last_check_ms=st.last_check_ms, last_checked_lines=st.last_checked_lines)
                for uri, st in diagnostics.docs.items()
            },
        )
