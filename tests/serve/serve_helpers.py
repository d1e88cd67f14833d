"""A real `machine serve` process for the serve tests: started in a project, ready when it prints its URL."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
API_KEY = "serve-test-key"  # a test-only key the keyed server checks
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
PAIRS = [(3, 4), (12, 30), (7, 8), (21, 5)]


def env(**extra: str) -> dict[str, str]:
    out = dict(os.environ)
    for name in ("MACHINE_HOME", "TINKER_API_KEY", "MACHINE_SERVE_API_KEY"):
        out.pop(name, None)
    out.update(PYTHONPATH=str(REPO), MACHINE_TORCH_THREADS="1", TINKER_TELEMETRY="0")
    out.update(extra)  # a test may give a process both cores when nothing else is busy
    return out


def machine(
    cwd: Path, *argv: str, timeout: float = 120, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(**extra_env),
        stdin=subprocess.DEVNULL,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServeProcess:
    """`machine serve CHECKPOINT` in `project`; `url` is the /v1 base once ready."""

    def __init__(
        self, project: Path, checkpoint: str, *extra: str, port: int | None = None, timeout: float = 300
    ) -> None:
        self.project = project
        self.port = port or free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "machine_lsp.cli.main",
                "serve",
                checkpoint,
                "--port",
                str(self.port),
                *extra,
            ],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
            stdin=subprocess.DEVNULL,
        )
        self.stderr: deque[str] = deque(maxlen=200)
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the ready line (or the process ends)
        if not line.startswith("serving ") or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"machine serve did not start: {line!r}\n{''.join(self.stderr)}")
        self.ready_line = line.strip()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.root = f"http://127.0.0.1:{self.port}"

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def served_rows(self) -> list[tuple[Path, int, dict]]:
        rows = []
        for path in sorted((self.project / ".machine" / "served").glob("*.jsonl")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                rows.append((path, number, json.loads(line)))
        return rows


def training_rows(system_with_tools: str) -> list[dict]:
    """Rows that teach a tool call (for the bash tool) and the `answer: N` form."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
    }
    rows = [
        {
            "messages": [
                {"role": "system", "content": system_with_tools},
                {"role": "user", "content": "List the files here."},
                {"role": "assistant", "content": "", "tool_calls": [call]},
            ]
        }
        for _ in range(4)
    ]
    rows += [
        {
            "messages": [
                {"role": "user", "content": f"What is {a} plus {b}?"},
                {"role": "assistant", "content": f"answer: {a + b}"},
            ]
        }
        for a, b in PAIRS
    ]
    return rows
