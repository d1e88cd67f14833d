"""Jobs: child processes (`python -m machine_lsp.jobs VERB --args-json ...`) streaming JSON-lines events.

Every event is forwarded as `machine/jobEvent` (plus `job_id`), steps and progress become work-done progress
reports on the client's token (or a server-created one), logs become `window/logMessage`, and the outcome a final
`window/showMessage`. Cancelling (work-done cancel, `$/cancelRequest` of the command, `machine.jobs.cancel`)
sends SIGTERM, then SIGKILL after a grace period; the job ends "cancelled". `shutdown` cancels every running job
the same way (the child records "cancelled" with its last checkpoint before it exits).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types

from machine_lsp.jobs import events as ev
from machine_lsp.jobs.client import AsyncJobProcess, job_command
from machine_lsp.lsp.features import (
    SHOWN,
    WORK_DONE_TOKEN,
    CommandError,
    JobUnavailable,
    LanguageFeature,
    Reported,
)
from machine_lsp.lsp.replies import JobSummary, to_wire

logger = logging.getLogger(__name__)

JOB_EVENT = "machine/jobEvent"
TERM_GRACE_S = 5.0
# How long a job waits for the client to accept its progress token before it runs without one. A busy client
# (batch Emacs under load) can take over 5 s, and a token given up on means no progress at all for that job.
CREATE_TOKEN_WAIT_S = 60.0
_LEVELS = {
    "debug": types.MessageType.Log,
    "info": types.MessageType.Info,
    "warning": types.MessageType.Warning,
    "error": types.MessageType.Error,
}


@dataclass
class Job:
    id: str = field(default_factory=lambda: secrets.token_hex(4), kw_only=True)  # 8 hex digits, new per job
    verb: str
    title: str
    args: dict[str, Any]
    cwd: Path
    token: types.ProgressToken | None = None
    status: str = "starting"  # starting, running, done, failed, cancelled
    message: str = ""
    result: dict[str, Any] | None = None
    run_id: str | None = None
    run_dir: str | None = None
    started: float = field(default_factory=time.time)
    ended: float | None = None
    last: dict[str, Any] | None = None
    proc: AsyncJobProcess | None = None
    cancel_requested: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)
    on_event: Callable[[ev.Event], None] | None = None  # a feature that follows this job (serving)

    def summary(self) -> JobSummary:
        return JobSummary(
            job_id=self.id,
            verb=self.verb,
            status=self.status,  # type: ignore[arg-type]
            message=self.message,
            run_id=self.run_id,
            run_dir=self.run_dir,
            result=self.result,
            pid=self.proc.pid if self.proc is not None else None,
            started=self.started,
            ended=self.ended,
            last_event=self.last,
        )


def verb_unavailable(verb: str) -> str | None:
    """Why `verb` cannot run here, or None. Looks at the jobs registry without importing any verb module."""
    try:
        from machine_lsp.jobs.verbs import VERBS
    except ImportError:
        return "the job runner is not available yet"
    spec = VERBS.get(verb)
    if spec is None:
        return f"job {verb!r} is not available yet"
    try:
        found = importlib.util.find_spec(spec.module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        return f"job {verb!r} is not available yet ({spec.module} is not installed)"
    return None


def progress_message(event: ev.Event) -> tuple[str, int | None]:
    """The work-done message and percentage for a step or progress event."""
    if isinstance(event, ev.Step):
        parts = [f"step {event.step}/{event.total}" if event.total else f"step {event.step}"]
        parts.append(f"loss {event.loss:.2f}")
        parts.append(f"{event.seconds_per_step:.1f} s/step")
        if event.eta_seconds is not None:
            parts.append(f"eta {format_duration(event.eta_seconds)}")
        pct = int(event.step * 100 / event.total) if event.total else None
        return " · ".join(parts), pct
    if isinstance(event, ev.Progress):
        pct = int(event.done * 100 / event.total) if event.total else None
        return event.message or (f"{event.done}/{event.total}" if event.total else str(event.done)), pct
    return "", None


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m" if seconds >= 600 or rest == 0 else f"{minutes}m{rest:02d}s"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m"


class JobsFeature(LanguageFeature):
    def __init__(self, server) -> None:
        super().__init__(server)
        self.jobs: dict[str, Job] = {}
        self.closing = False  # after `shutdown`: no new jobs, no more messages

    def register(self) -> None:
        @self.server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)
        def on_cancel(params: types.WorkDoneProgressCancelParams) -> None:
            self.cancel_token(params.token)

    # -- public API -----------------------------------------------------------------------------------------
    async def run(
        self,
        verb: str,
        args: dict[str, Any],
        *,
        title: str,
        cwd: Path,
        token: types.ProgressToken | None = None,
        wait: bool = True,
        on_event: Callable[[ev.Event], None] | None = None,
    ) -> Job:
        """Start a job; with wait=True await its end (cancelling the awaiting task cancels the job).
        `on_event` sees each of the job's events (after they are forwarded)."""
        if self.closing:
            raise JobUnavailable("the server is shutting down")
        if (reason := verb_unavailable(verb)) is not None:
            raise JobUnavailable(reason)
        if args.get("name") is not None:  # an eval result name becomes a file name: core.runs.check_name
            from machine_lsp.core.runs import check_name

            try:
                check_name(args["name"], "eval result name")
            except ValueError as exc:
                raise JobUnavailable(str(exc)) from None
        job = Job(verb=verb, title=title, args=args, cwd=cwd, token=token, on_event=on_event)
        self.jobs[job.id] = job
        task = self.server.spawn(self._supervise(job), f"job {job.id}")
        if not wait:
            return job
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await self.cancel(job.id, reason="request cancelled")
            try:
                await asyncio.wait_for(asyncio.shield(task), TERM_GRACE_S * 2)
            except (TimeoutError, asyncio.CancelledError):
                pass
            raise
        return job

    def waits(self, args: dict[str, Any]) -> bool:
        """Whether a command's reply waits for its job's end. A client with a short request timeout (eglot: 10 s)
        declares jobReplies "immediate": the reply carries the job id at once; `wait` still decides for one call."""
        return args.get("wait", self.server.settings.job_replies == "onEnd") is not False

    async def run_for_command(
        self, verb: str, args: dict[str, Any], *, title: str, cwd: Path, wait: bool
    ) -> Job:
        """`run` for a command: reports on the request's own progress token when the reply waits (that token ends
        with the reply: a job outliving it reports on a server-created one); a job that cannot start is a user
        error, and one that failed is an error reply (its end was shown already, with window/showMessage)."""
        token = WORK_DONE_TOKEN.get() if wait else None
        try:
            job = await self.run(verb, args, title=title, cwd=cwd, token=token, wait=wait)
        except JobUnavailable as exc:
            raise CommandError(message=f"{title}: {exc}") from None
        if job.status == "failed":
            raise Reported(message=job.message, data={**to_wire(job.summary()), **SHOWN})
        return job

    async def ended(self, job_id: str, timeout: float) -> Job:
        """The job, once it has ended or `timeout` seconds have passed."""
        job = self.jobs[job_id]
        try:
            await asyncio.wait_for(job.done.wait(), timeout)
        except TimeoutError:
            pass
        return job

    def cancel_token(self, token: types.ProgressToken) -> None:
        for job in self.jobs.values():
            if job.token == token and job.ended is None:
                self.server.spawn(self.cancel(job.id, reason="cancelled from the editor"), f"cancel {job.id}")

    async def cancel(self, job_id: str, reason: str = "cancelled") -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.ended is not None:
            return False
        job.cancel_requested = True
        job.message = reason
        if job.proc is not None:
            await job.proc.cancel(TERM_GRACE_S)  # SIGTERM, SIGKILL only after the grace period
        return True

    async def shutdown(self) -> None:
        """Cancel every running job as `machine.jobs.cancel` does (SIGTERM, wait, SIGKILL only after the grace
        period) and let its supervisor finish; called on `shutdown`. No new jobs start afterwards."""
        self.closing = True
        running = [job for job in self.jobs.values() if job.ended is None]
        if not running:
            return
        await asyncio.gather(
            *(self.cancel(job.id, reason="cancelled: the server is shutting down") for job in running)
        )
        await asyncio.wait([asyncio.ensure_future(job.done.wait()) for job in running], timeout=TERM_GRACE_S)

    # -- the supervisor -------------------------------------------------------------------------------------
    async def _supervise(self, job: Job) -> None:
        """Run the job's child through the one job client (`jobs.client`, as the CLI does) and forward its events."""
        server = self.server
        try:
            await self._begin_progress(job)
            job.proc = await AsyncJobProcess.start(job_command(job.verb, job.args, cwd=job.cwd), cwd=job.cwd)
            job.status = "running"
            if job.cancel_requested:  # cancelled while starting
                await self.cancel(job.id, job.message)
            async for line in job.proc:
                if line.event is None:
                    server.window_log_message(
                        types.LogMessageParams(type=types.MessageType.Log, message=f"[{job.id}] {line.error}")
                    )
                    continue
                self._on_event(job, line.event)
                if job.on_event is not None:
                    job.on_event(line.event)
            outcome = await job.proc.wait()
            self._finish(job, outcome.final, outcome.returncode, outcome.stderr_tail)
        except Exception as exc:  # the server stays up whatever the child does
            logger.exception("job %s failed", job.id)
            job.status = "failed"
            job.message = f"{job.title} failed: {exc}"
            self._final(job)
        except asyncio.CancelledError:
            if job.proc is not None:
                job.proc.kill()
            job.status = "cancelled"
            self._final(job)
            raise

    async def _begin_progress(self, job: Job) -> None:
        if job.token is None:
            caps = self.server.client_capabilities
            if not (caps.window and caps.window.work_done_progress):
                return
            token = f"machine-job-{job.id}"
            try:
                await asyncio.wait_for(
                    self.server.work_done_progress.create_async(token), CREATE_TOKEN_WAIT_S
                )
            except Exception:
                logger.warning("client refused work-done progress token %s", token)
                return
            job.token = token
        self.server.work_done_progress.begin(
            job.token,
            types.WorkDoneProgressBegin(title=job.title, cancellable=True, message="starting", percentage=0),
        )

    def _on_event(self, job: Job, event: ev.Event) -> None:
        server = self.server
        if self.closing:
            return
        payload = ev.event_to_dict(event)
        payload["job_id"] = job.id
        job.last = payload
        server.protocol.notify(JOB_EVENT, payload)
        if isinstance(event, ev.Start):
            job.run_id, job.run_dir = event.run_id, event.run_dir
            if event.message:
                self._report(job, event.message, None)
        elif isinstance(event, ev.Step | ev.Progress):
            message, pct = progress_message(event)
            self._report(job, message, pct)
        elif isinstance(event, ev.Log):
            server.window_log_message(
                types.LogMessageParams(
                    type=_LEVELS.get(event.level, types.MessageType.Log), message=event.message
                )
            )
        elif isinstance(event, ev.Checkpoint):
            self._report(job, f"checkpoint {event.name}: {event.address}", None)
            server.window_log_message(
                types.LogMessageParams(type=types.MessageType.Info, message=f"checkpoint {event.address}")
            )
        elif isinstance(event, ev.Eval):
            self._report(job, f"eval {event.name}: {event.correct}/{event.n} ({event.accuracy:.0%})", None)
        elif isinstance(event, ev.Ready):
            # Serving is no progress: the spinner ends with where it serves (the job runs on until stopped).
            self._end_progress(job, event.message or f"ready at {event.url}")

    def _end_progress(self, job: Job, message: str) -> None:
        token, job.token = job.token, None
        if token is not None:
            try:
                self.server.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
            except Exception:
                logger.exception("could not end progress")

    def _report(self, job: Job, message: str, percentage: int | None) -> None:
        if job.token is not None:
            self.server.work_done_progress.report(
                job.token,
                types.WorkDoneProgressReport(message=message, percentage=percentage, cancellable=True),
            )

    def _finish(
        self, job: Job, terminal: ev.Event | None, code: int, stderr_tail: tuple[str, ...] = ()
    ) -> None:
        if isinstance(terminal, ev.Done) and code == 0:
            # Finished before a late cancel reached it: it is done, and every face (progress end, status bar,
            # run panel) says so; calling it cancelled would contradict the result it reported.
            job.status = "done"
            job.result = terminal.result
            job.message = terminal.message or f"{job.title} done"
        elif job.cancel_requested or (isinstance(terminal, ev.Error) and terminal.kind == "cancelled"):
            job.status = "cancelled"
            job.message = f"{job.title} cancelled"
        elif isinstance(terminal, ev.Error):
            job.status = "failed"
            job.message = f"{job.title} failed: {terminal.message}"
        else:
            job.status = "failed"
            tail = " | ".join(list(stderr_tail)[-3:])
            job.message = f"{job.title} crashed (exit {code})" + (f": {tail}" if tail else "")
        self._final(job)

    def _final(self, job: Job) -> None:
        job.ended = time.time()
        server = self.server
        if self.closing:
            job.done.set()
            return
        self._end_progress(job, job.message)
        kind = {
            "done": types.MessageType.Info,
            "cancelled": types.MessageType.Warning,
        }.get(job.status, types.MessageType.Error)
        server.protocol.notify(
            JOB_EVENT, {"event": "end", "job_id": job.id, "status": job.status, "message": job.message}
        )
        server.window_show_message(types.ShowMessageParams(type=kind, message=job.message))
        job.done.set()
