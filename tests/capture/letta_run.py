"""Run the real Letta Code (0.32.18, local backend; scripts/agents/letta-code.sh) against a ModelEndpoint.

Extends the shared AgentRun (tests/capture/agents.py): a temporary HOME/XDG world, `timeout`, stdin from /dev/null.
Set-up as FACTS.md found it works: `letta backend local`, then `letta connect openai-compatible --base-url ...`;
each `letta -p "..."` then starts a conversation whose transcript is Pi's v3 format under
`~/.letta/lc-local-backend/conversations/<base64 id>/messages.jsonl`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from capture_agents import AgentRun


class LettaRun(AgentRun):
    def _configure_letta_code(self) -> None:
        for argv in (
            ["backend", "local"],
            [
                "connect",
                "openai-compatible",
                "--base-url",
                f"{self.endpoint.base_url}/v1",
                "--api-key",
                "dummy",
            ],
        ):
            done = subprocess.run(
                ["timeout", "-k", "5", "90", str(self.executable), *argv],
                cwd=self.project,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if done.returncode != 0:
                raise AssertionError(
                    f"letta {' '.join(argv[:2])} exited {done.returncode}: {done.stderr[-2000:]}"
                )

    def _env_letta_code(self) -> dict[str, str]:
        return {"DO_NOT_TRACK": "1"}

    def argv(self, prompt: str, resume: bool, allowed_tools: tuple[str, ...] = ()) -> list[str]:
        return [str(self.executable), "-p", prompt, "--backend", "local"]

    def logs(self) -> list[Path]:
        found = (self.home / ".letta" / "lc-local-backend" / "conversations").glob("*/messages.jsonl")
        return sorted(found, key=lambda path: path.stat().st_mtime_ns)
