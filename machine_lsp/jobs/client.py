"""One client for job children: spawn `python -m machine_lsp.jobs VERB --args-json ...`, read its events, cancel it.

Two faces over one implementation. `JobProcess` blocks (the CLI renders events as they come); `AsyncJobProcess`
is for asyncio (the language server must never block). Both keep the same state in `_JobState`: the terminal event
(`done` or `error`), whether a cancel was asked for, and the tail of the child's stderr; both end in the same
`JobOutcome`. The child runs in its own session, so a Ctrl-C in a terminal reaches it once (as the SIGTERM that
`cancel` sends), never twice.

Light on purpose: stdlib and `jobs.events` (msgspec) only, so the server process can import it.

Using it from asyncio (what the language server's jobs feature does):

    job = await AsyncJobProcess.start(job_command(verb, args, cwd=cwd), cwd=cwd)
    async for line in job:               # JobLine: raw bytes + decoded event, or the decode error
        ...
    outcome = await job.wait()           # JobOutcome: status done/failed/cancelled, final event, stderr tail
    await job.cancel(grace_s=5)          # from another task: SIGTERM, then SIGKILL after the grace period
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from machine_lsp.jobs import events as ev

TERM_GRACE_S = 15.0
STDERR_TAIL_LINES = 30
# Events can carry whole eval results; asyncio's default 64 KiB line limit is too small for them.
MAX_EVENT_LINE = 64 * 1024 * 1024

JobStatus = Literal["done", "failed", "cancelled"]


def job_command(verb: str, args: Mapping[str, Any], *, cwd: Path | None = None) -> list[str]:
    """The child's command line. Arguments that are None are left out (the verb's defaults apply)."""
    body = json.dumps({k: v for k, v in args.items() if v is not None})
    command = [sys.executable, "-m", "machine_lsp.jobs", verb, "--args-json", body]
    if cwd is not None:
        command += ["--cwd", str(cwd)]
    return command


def job_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ours, unbuffered, with Tinker's telemetry off unless the user set it."""
    env = dict(os.environ if base is None else base)
    env.setdefault("TINKER_TELEMETRY", "0")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True)
class JobLine:
    """One line of the child's stdout: the event, or why it is not one."""

    raw: bytes
    event: ev.Event | None
    error: ev.EventDecodeError | None = None


@dataclass(frozen=True)
class JobOutcome:
    returncode: int
    final: ev.Done | ev.Error | None  # None: the child died without saying how it ended
    cancel_requested: bool
    stderr_tail: tuple[str, ...]

    @property
    def status(self) -> JobStatus:
        if self.cancel_requested or (isinstance(self.final, ev.Error) and self.final.kind == "cancelled"):
            return "cancelled"
        if isinstance(self.final, ev.Done) and self.returncode == 0:
            return "done"
        return "failed"


@dataclass
class _JobState:
    """What both faces track while a child runs."""

    final: ev.Done | ev.Error | None = None
    cancel_requested: bool = False
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))

    def take(self, raw: bytes) -> JobLine | None:
        """Decode one stdout line (None for a blank one), remembering the terminal event."""
        if not raw.strip():
            return None
        try:
            event = ev.decode_event(raw)
        except ev.EventDecodeError as exc:
            return JobLine(raw, None, exc)
        if isinstance(event, ev.Done | ev.Error):
            self.final = event
        return JobLine(raw, event)

    def add_stderr(self, raw: bytes) -> None:
        self.stderr_tail.append(raw.decode("utf-8", "replace").rstrip())

    def outcome(self, returncode: int) -> JobOutcome:
        return JobOutcome(returncode, self.final, self.cancel_requested, tuple(self.stderr_tail))


class JobProcess:
    """A job child driven from blocking code (the CLI). Iterate it for its lines, then `wait()`."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.state = _JobState()
        assert proc.stderr is not None
        self._drainer = threading.Thread(target=self._drain, args=(proc.stderr,), daemon=True)
        self._drainer.start()

    @classmethod
    def start(cls, command: list[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> JobProcess:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=job_env(env),
            start_new_session=True,
        )
        return cls(proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _drain(self, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            self.state.add_stderr(raw)

    def __iter__(self) -> Iterator[JobLine]:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = self.state.take(raw)
            if line is not None:
                yield line

    def cancel(self) -> None:
        """Ask the child to stop (SIGTERM): it records its last checkpoint and ends with a `cancelled` error."""
        self.state.cancel_requested = True
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def wait(self, grace_s: float = TERM_GRACE_S) -> JobOutcome:
        """Wait for the child (killing it after `grace_s`) and for its stderr, then say how it ended."""
        try:
            code = self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._drainer.join(timeout=2)
        return self.state.outcome(code)


class AsyncJobProcess:
    """A job child driven from asyncio (the language server). Iterate it for its lines, then `await wait()`."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.state = _JobState()
        self._drainer = asyncio.ensure_future(self._drain())

    @classmethod
    async def start(
        cls, command: list[str], *, cwd: Path, env: Mapping[str, str] | None = None
    ) -> AsyncJobProcess:
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=str(cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=job_env(env),
            limit=MAX_EVENT_LINE,
            start_new_session=True,
        )
        return cls(proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def _drain(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self.state.add_stderr(raw)

    async def __aiter__(self) -> AsyncIterator[JobLine]:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = self.state.take(raw)
            if line is not None:
                yield line

    async def cancel(self, grace_s: float = TERM_GRACE_S) -> None:
        """SIGTERM, then SIGKILL if the child has not ended within `grace_s`."""
        self.state.cancel_requested = True
        if self.proc.returncode is not None:
            return
        try:
            self.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(self.proc.wait(), grace_s)
        except TimeoutError:
            self.kill()

    def kill(self) -> None:
        """Stop the child at once (server shutdown, a supervisor that is itself cancelled)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    async def wait(self) -> JobOutcome:
        """Wait for the child to end and its stderr to be read, then say how it ended."""
        code = await self.proc.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._drainer), 5)
        return self.state.outcome(code)
