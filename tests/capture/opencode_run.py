"""Run the real OpenCode (opencode-ai, pinned in scripts/agents/opencode.sh) against a ModelEndpoint.

Extends the shared AgentRun (tests/capture/agents.py) the way its own agents are set up: a temporary HOME/XDG world,
`timeout`, stdin from /dev/null. OpenCode keeps sessions in SQLite (`$XDG_DATA_HOME/opencode/opencode.db`).
Config (FACTS.md): a provider in `opencode.json` with a `baseURL`; on its first run OpenCode tries to npm-install
`@opencode-ai/plugin` into its config dir, which an empty node_modules/ plus a package-lock.json naming it stops.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from capture_agents import MODEL, AgentRun

PROVIDER = "local"


class OpenCodeRun(AgentRun):
    def _configure_opencode(self) -> None:
        config_dir = self.root / "xdg/config/opencode"
        config_dir.mkdir(parents=True, exist_ok=True)
        (config_dir / "node_modules").mkdir(exist_ok=True)
        lock = {
            "name": "opencode-config",
            "lockfileVersion": 3,
            "requires": True,
            "packages": {
                "": {"dependencies": {"@opencode-ai/plugin": "1.18.33"}},
                "node_modules/@opencode-ai/plugin": {"version": "1.18.33"},
            },
        }
        (config_dir / "package-lock.json").write_text(json.dumps(lock))
        (config_dir / "package.json").write_text(
            json.dumps({"dependencies": {"@opencode-ai/plugin": "1.18.33"}})
        )
        config = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "model": f"{PROVIDER}/{MODEL}",
            "small_model": f"{PROVIDER}/{MODEL}",
            "provider": {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Local",
                    "options": {"baseURL": f"{self.endpoint.base_url}/v1", "apiKey": "dummy"},
                    "models": {MODEL: {"name": MODEL}},
                }
            },
        }
        (config_dir / "opencode.json").write_text(json.dumps(config))

    def _env_opencode(self) -> dict[str, str]:
        return {
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_SHARE": "1",
        }

    def argv(self, prompt: str, resume: bool, allowed_tools: tuple[str, ...] = ()) -> list[str]:
        return [str(self.executable), "run", *(["-c"] if resume else []), prompt]

    @property
    def database(self) -> Path:
        return self.root / "xdg/data/opencode/opencode.db"

    def logs(self) -> list[Path]:
        return [self.database] if self.database.exists() else []

    def export(self, session_id: str, out: Path) -> Path:
        """`opencode export <id>`: the session as JSON, written to `out`."""
        done = subprocess.run(
            ["timeout", "-k", "5", "60", str(self.executable), "export", session_id],
            cwd=self.project,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=90,
        )
        if done.returncode != 0:
            raise AssertionError(f"opencode export exited {done.returncode}: {done.stderr[-2000:]}")
        out.write_text(done.stdout)
        return out

    def compact(self, session_id: str) -> None:
        """Compact the session as the TUI's /compact does: `opencode serve`, then POST /session/<id>/summarize."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [str(self.executable), "serve", "--port", str(port), "--hostname", "127.0.0.1"],
            cwd=self.project,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"{base}/session", timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise AssertionError("opencode serve did not come up") from None
                    time.sleep(0.3)
            body = json.dumps({"providerID": PROVIDER, "modelID": MODEL}).encode()
            request = urllib.request.Request(
                f"{base}/session/{session_id}/summarize",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            assert urllib.request.urlopen(request, timeout=120).read() == b"true"
        finally:
            server.terminate()
            server.wait(15)
