"""Run `machine capture proxy` (the real CLI, a child process) in front of a ModelEndpoint, and agents through it.

Imported as a plain module (tests/ is not a package). The proxy's store is a temporary `.machine/`; agents get a
distinctive key so a test can grep the whole store for it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from capture_agents import ROOT, AgentRun
from model_endpoint import ModelEndpoint

KEY = "sk-proxy-test-5d1e0c9a77"
START_TIMEOUT_S = 60


@dataclass
class Upstream:
    """What AgentRun needs of an endpoint: its base URL (here: the proxy's)."""

    base_url: str


class ProxyProcess:
    """`machine capture proxy --upstream <endpoint> --port 0` with MACHINE_HOME = `machine_dir`."""

    def __init__(self, upstream: str, machine_dir: Path) -> None:
        self.machine_dir = machine_dir
        env = {**os.environ, "MACHINE_HOME": str(machine_dir), "PYTHONPATH": str(ROOT)}
        code = "import sys; from machine_lsp.cli.main import main; sys.exit(main())"
        argv = [sys.executable, "-c", code, "capture", "proxy", "--upstream", upstream, "--port", "0"]
        # stderr (a line per exchange) to a file: a pipe nobody reads would fill and stall the proxy.
        self.stderr_path = machine_dir.parent / "proxy.stderr"
        with self.stderr_path.open("w") as stderr:
            self.process = subprocess.Popen(
                argv, cwd=machine_dir.parent, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
            )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT_S)
        line = self.process.stdout.readline() if ready else ""
        if not line.startswith("recording proxy at "):
            self.stop()
            raise AssertionError(f"the proxy did not start: {line!r} {self.stderr_path.read_text()[-2000:]}")
        self.url = line.split()[3]
        self.log = Path(line.rsplit("exchanges -> ", 1)[1].strip())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def rows(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def wait_rows(self, count: int, timeout: float = 60) -> list[dict]:
        """The log's rows once it holds `count` (an exchange is written just after its answer ends)."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.rows()
            if len(rows) >= count or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)


def keyed(run: AgentRun) -> AgentRun:
    """Give the agent KEY instead of the shared dummy key (configs and environment alike)."""
    for config in [*run.home.rglob("*.json"), *run.home.rglob("*.toml"), *(run.root / "xdg").rglob("*.json")]:
        text = config.read_text()
        if '"dummy"' in text:
            config.write_text(text.replace('"dummy"', json.dumps(KEY)))
    original = run.env

    def env() -> dict[str, str]:
        values = original()
        return {name: (KEY if value == "dummy" else value) for name, value in values.items()}

    run.env = env  # type: ignore[method-assign]
    return run


def endpoint_bodies(endpoint: ModelEndpoint) -> list[dict]:
    return [r.body for r in endpoint.model_requests()]
