"""The two servers' faces: `machine.serve.start|stop|status`, `machine.use`, `machine.tinker.serve|status|stop`.

* Serving a checkpoint is the `serve` job (`jobs/serve_jobs.py`), a child that binds the port, loads the model,
  says `ready` with its URL and serves until cancelled. One per language server: a second start answers with the
  running one. `start` answers once the server is ready (or at once with `jobReplies: "immediate"` / `wait:
  false`: then `machine/jobEvent` `ready`, or `machine.serve.status`, gives the URL). Its work-done progress covers the
  loading ("loading …") and ends once it serves ("serving … at URL"; the job runs on until stopped). `stop` cancels the job; the
  server's `shutdown` stops it with every other job. A server child that dies ends its job "failed" (the client is
  told, as of any job) and `status` says "stopped".
* `machine.use` is `machine use`: the agent config for a checkpoint (printed, or written with `write: true`),
  pointing at this server's port when one runs.
* The local Tinker server (SkyRL tx) is detached and outlives the editor, like `machine tinker serve`: `serve` is
  the `tinker-serve` job (venv on first use, start, readiness as progress; it ends with the base_url, written to
  machine.toml); `status` and `stop` are short and run off the event loop.

Nothing heavy is imported here: resolving a checkpoint, an agent's config and the Tinker server's record live in
modules that reach torch lazily, so they run in quick children (the `use`, `tinker-status`, `tinker-stop` verbs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from machine_lsp.core.verb_registry import lsp_job, palette_title
from machine_lsp.jobs import events as ev
from machine_lsp.lsp.arguments import stripped_str
from machine_lsp.lsp.features import (
    SHOWN,
    CommandError,
    CommandMethod,
    JobUnavailable,
    LanguageFeature,
    Reported,
)
from machine_lsp.lsp.features.jobs import Job, JobsFeature
from machine_lsp.lsp.replies import ServeReply, TinkerServerReply, UseReply, to_wire

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase

# The job verbs these commands run: their lines in the verb registry (core/verb_registry.py).
SERVE_VERB = lsp_job("machine.serve.start")
TINKER_VERB = lsp_job("machine.tinker.serve")
USE_VERB = lsp_job("machine.use")
TINKER_STATUS_VERB = lsp_job("machine.tinker.status")
TINKER_STOP_VERB = lsp_job("machine.tinker.stop")
STOP_WAIT_S = 15.0
QUICK_S = 60.0  # the quick verbs take about a second; `tinker-stop` up to 20 s


@dataclass
class _Served:
    """The checkpoint server this language server runs (its job, and what its `ready` event said)."""

    checkpoint: str
    port: int
    served_dir: Path
    job: Job | None = None
    url: str | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    swaps: int = (
        0  # checkpoints swapped in since it started (`machine serve promoted|latest` follows the store)
    )
    last_swap: str | None = None  # the last swap's line, done or failed

    def on_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.Ready):
            if self.ready.is_set():  # ready again: a swap (same server, same port)
                self.swaps += 1
                self.last_swap = event.message
            self.url = event.url
            self.checkpoint = event.name or self.checkpoint
            self.port = int(event.url.rsplit(":", 1)[1])  # port 0 asked for any free one: this is it
            self.ready.set()
        elif isinstance(event, ev.Log) and event.message.startswith(ev.SWAP_FAILED):
            self.last_swap = event.message

    @property
    def running(self) -> bool:
        return self.job is not None and self.job.ended is None


class ServingFeature(LanguageFeature):
    def __init__(self, server: ServerBase, jobs: JobsFeature) -> None:
        super().__init__(server)
        self.jobs = jobs
        self.current: _Served | None = None
        self._lock = asyncio.Lock()

    def commands(self) -> dict[str, CommandMethod]:
        return {
            "machine.serve.start": self.start,
            "machine.serve.stop": self.stop,
            "machine.serve.status": self.status,
            "machine.use": self.use,
            "machine.tinker.serve": self.tinker_serve,
            "machine.tinker.status": self.tinker_status,
            "machine.tinker.stop": self.tinker_stop,
        }

    def _project(self, args: dict[str, Any]) -> tuple[Path, Path]:
        from machine_lsp.core.store import find_machine_dir

        machine_dir = find_machine_dir(self.server.project_start(args.get("uri")))
        return machine_dir.parent, machine_dir

    # -- serving a checkpoint -------------------------------------------------------------------------------
    def reply(self, message: str | None = None, *, already_running: bool = False) -> ServeReply:
        from machine_lsp.serve.agents import MODEL_ID

        cur = self.current
        if cur is None or not cur.running:
            default = (
                cur.job.message if cur is not None and cur.job is not None else "nothing is being served"
            )
            return ServeReply(
                status="stopped",
                message=message or default,
                checkpoint=cur.checkpoint if cur else None,
                job_id=cur.job.id if cur and cur.job else None,
            )
        serving = cur.url is not None
        default = (
            f"serving {cur.checkpoint} at {cur.url}/v1 (model '{MODEL_ID}')"
            if serving
            else f"loading {cur.checkpoint} …"
        )
        return ServeReply(
            status="serving" if serving else "starting",
            message=message or default,
            checkpoint=cur.checkpoint,
            url=cur.url,
            openai_base=f"{cur.url}/v1" if cur.url else None,
            model=MODEL_ID,
            port=cur.port,
            job_id=cur.job.id,
            pid=cur.job.proc.pid if cur.job.proc is not None else None,
            served_dir=str(cur.served_dir),
            already_running=already_running,
            swaps=cur.swaps,
            last_swap=cur.last_swap,
        )

    async def start(self, args: dict[str, Any]) -> ServeReply:
        from machine_lsp.serve.agents import DEFAULT_PORT

        checkpoint = stripped_str(args, "checkpoint") or "latest"
        port = args.get("port", DEFAULT_PORT)
        if not isinstance(port, int) or isinstance(port, bool):
            raise CommandError(message=f"Serve Checkpoint: port must be a number, not {port!r}")
        async with self._lock:  # two starts at once: the second finds the first running
            cur = self.current
            already = cur is not None and cur.running
            if not already:
                cur = await self._launch(checkpoint, port, args)
        assert cur is not None
        if self.jobs.waits(args):
            try:
                await _first(cur.ready.wait(), cur.job.done.wait())
            except asyncio.CancelledError:
                if not already:  # the request that started it was cancelled while it loaded
                    await self.jobs.cancel(cur.job.id, reason="cancelled while loading")
                raise
        if cur.job.status == "failed":  # the job's end was shown already (window/showMessage)
            raise Reported(message=cur.job.message, data={**to_wire(self.reply()), **SHOWN})
        if not already:
            return self.reply()
        other = (
            ""
            if checkpoint == cur.checkpoint or checkpoint == "latest"
            else f"; stop it to serve {checkpoint}"
        )
        return self.reply(f"already {self.reply().message}{other}", already_running=True)

    async def _launch(self, checkpoint: str, port: int, args: dict[str, Any]) -> _Served:
        from machine_lsp.serve.ports import port_problem

        project, machine_dir = self._project(args)
        problem = await asyncio.get_running_loop().run_in_executor(None, port_problem, port)
        if problem is not None:
            raise CommandError(message=f"Serve Checkpoint: {problem}")
        cur = _Served(checkpoint=checkpoint, port=port, served_dir=machine_dir / "served")
        job_args = {"checkpoint": checkpoint, "port": port}
        for key in ("max_tokens", "temperature", "max_batch", "no_log", "backend", "gguf_type"):
            if args.get(key) is not None:
                job_args[key] = args[key]
        try:  # the job resolves the checkpoint (an unknown one fails it within a second, before any model loads)
            cur.job = await self.jobs.run(
                SERVE_VERB,
                job_args,
                title=f"Serve {checkpoint}",
                cwd=project,
                wait=False,
                on_event=cur.on_event,
            )
        except JobUnavailable as exc:
            raise CommandError(message=f"Serve Checkpoint: {exc}") from None
        self.current = cur
        return cur

    async def stop(self, args: dict[str, Any]) -> ServeReply:
        cur = self.current
        if cur is None or not cur.running:  # no job_id: nothing was stopped now
            return ServeReply(status="stopped", message="nothing is being served")
        await self.jobs.cancel(cur.job.id, reason=f"stopped by {palette_title('machine.serve.stop')}")
        await self.jobs.ended(cur.job.id, STOP_WAIT_S)
        return self.reply(f"stopped serving {cur.checkpoint}")

    async def status(self, args: dict[str, Any]) -> ServeReply:
        return self.reply()

    async def use(self, args: dict[str, Any]) -> UseReply:
        from machine_lsp.serve import agents

        cur = self.current if self.current is not None and self.current.running else None
        checkpoint = stripped_str(args, "checkpoint") or (cur.checkpoint if cur else "latest")
        port = args.get("port")
        try:
            agent = agents.agent_name(args.get("agent"))
            port = agents.check_port((cur.port if cur else agents.DEFAULT_PORT) if port is None else port)
        except agents.UseError as exc:
            raise CommandError(message=f"Use Checkpoint: {exc}") from None
        served = cur.checkpoint if cur is not None and cur.port == port else None
        job_args = {
            "agent": agent,
            "checkpoint": checkpoint,
            "port": port,
            "write": args.get("write") is True,
        }
        result = await self._quick(USE_VERB, {**job_args, "served": served}, args, "Use Checkpoint")
        return msgspec.convert(result, UseReply)

    async def _quick(self, verb: str, job_args: dict[str, Any], args: dict[str, Any], title: str) -> Any:
        """A quick verb in a child (its modules reach torch lazily: never imported here); its `done` result."""
        from machine_lsp.jobs.client import AsyncJobProcess, job_command

        project, _machine_dir = self._project(args)
        proc = await AsyncJobProcess.start(job_command(verb, job_args, cwd=project), cwd=project)
        try:
            async for _line in proc:
                pass
            outcome = await asyncio.wait_for(proc.wait(), QUICK_S)
        except BaseException:
            proc.kill()
            raise
        if isinstance(outcome.final, ev.Done):
            return outcome.final.result
        if isinstance(outcome.final, ev.Error):
            raise CommandError(message=f"{title}: {outcome.final.message}")
        tail = " | ".join(list(outcome.stderr_tail)[-3:])
        raise CommandError(
            message=f"{title}: the helper process ended with code {outcome.returncode}: {tail}"
        )

    # -- the local Tinker server ----------------------------------------------------------------------------
    def _tinker_job(self) -> Job | None:
        return next((j for j in self.jobs.jobs.values() if j.verb == TINKER_VERB and j.ended is None), None)

    async def tinker_serve(self, args: dict[str, Any]) -> TinkerServerReply:
        project, _machine_dir = self._project(args)
        if (job := self._tinker_job()) is not None:
            return _tinker_starting(job, already_running=True)
        running = await self._tinker_quick(TINKER_STATUS_VERB, args, "Tinker status")
        if running.status != "stopped":
            running.message = f"a Tinker server already runs for this project at {running.base_url}"
            running.already_running = True
            return running
        job_args = {"model": stripped_str(args, "model"), "port": args.get("port")}
        job = await self.jobs.run_for_command(
            TINKER_VERB, job_args, title="Local Tinker server", cwd=project, wait=self.jobs.waits(args)
        )
        if job.ended is None:
            return TinkerServerReply(
                status="starting", message="starting the local Tinker server …", job_id=job.id
            )
        if job.status != "done":
            return TinkerServerReply(status="stopped", message=job.message, job_id=job.id)
        r = job.result or {}
        return TinkerServerReply(
            status="running",
            message=job.message,
            base_url=r.get("base_url"),
            pid=r.get("pid"),
            model=r.get("model"),
            log=r.get("log"),
            started_at=r.get("started_at"),
            config=r.get("config"),
            job_id=job.id,
        )

    async def tinker_status(self, args: dict[str, Any]) -> TinkerServerReply:
        job = self._tinker_job()
        reply = await self._tinker_quick(TINKER_STATUS_VERB, args, "Tinker status")
        return _tinker_starting(job) if reply.status == "stopped" and job is not None else reply

    async def tinker_stop(self, args: dict[str, Any]) -> TinkerServerReply:
        if (
            job := self._tinker_job()
        ) is not None:  # still starting: its cancel stops the half-started server
            await self.jobs.cancel(job.id, reason=f"stopped by {palette_title('machine.tinker.stop')}")
            await self.jobs.ended(job.id, QUICK_S)
        return await self._tinker_quick(TINKER_STOP_VERB, args, "Stop Tinker server")

    async def _tinker_quick(self, verb: str, args: dict[str, Any], title: str) -> TinkerServerReply:
        return msgspec.convert(await self._quick(verb, {}, args, title), TinkerServerReply)


def _tinker_starting(job: Job, *, already_running: bool = False) -> TinkerServerReply:
    return TinkerServerReply(
        status="starting",
        message="the local Tinker server is starting",
        job_id=job.id,
        already_running=already_running,
    )


async def _first(*waits: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
