"""The child-process side of a job: event stream, run directory, stderr capture, cancellation.

``run(verb, args_json)`` is what ``python -m machine_lsp.jobs VERB --args-json '{...}'`` calls. It

* moves the real stdout to a private descriptor used only for events, and points fd 1 at stderr, so a stray
  ``print`` in a library can never corrupt the event stream;
* plans ``.machine/runs/<id>/`` but creates it (manifest.json status ``running``, events.jsonl with the events so
  far, fd 2 teed into ``stderr.log``) only when the verb first needs it (``ctx.run_dir``: a data snapshot, a
  trainer, a checkpoint). A job that never does (the ``validate`` job) leaves no run behind, and neither does one
  *refused* before it started work: an expected failure (:class:`JobError`) before any step, checkpoint or eval
  result (no data, 0 rows, Tinker without a key, no eval set) removes the directory it may have created;
* turns SIGTERM/SIGINT into :class:`Cancelled` raised in the main thread; the manifest ends ``cancelled`` with the
  last checkpoint recorded;
* on an expected failure (:class:`JobError`) writes the message only; on a crash writes the traceback to
  stderr.log and the manifest ends ``failed`` with the error.

Exit codes: 0 done, 1 failed, 2 bad arguments (only an ``error`` event, kind ``usage``, no run dir), 130 cancelled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core import runs
from machine_lsp.core.exit_codes import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_USAGE
from machine_lsp.core.redact import redact_urls_bytes
from machine_lsp.jobs import events as ev

log = logging.getLogger("machine_lsp.jobs")


class JobError(Exception):
    """An expected failure with a message for the user (bad data, engine unavailable, ...)."""

    def __init__(self, message: str, kind: str = "input") -> None:
        super().__init__(message)
        self.kind = kind


class Cancelled(BaseException):
    """Raised in the main thread when the job receives SIGTERM or SIGINT."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _EventSink:
    """Writes events to the private stdout descriptor and to events.jsonl, one whole line at a time.

    Until the run directory exists the events.jsonl lines are kept in memory and written when it is attached.
    """

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._file: Any = None
        self._pending: list[bytes] = []
        self._lock = threading.Lock()

    def attach(self, path: Path) -> None:
        with self._lock:
            self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the job
            self._file.write(b"".join(self._pending))
            self._pending.clear()

    def write(self, event: ev.Event) -> None:
        line = redact_urls_bytes(ev.encode_event(event))  # no URL credentials in the stream or events.jsonl
        with self._lock:
            if self._fd is not None:
                try:
                    _write_all(self._fd, line)
                except OSError:
                    # The reader went away (editor closed): keep running, events.jsonl still records everything.
                    self._fd = None
            if self._file is not None:
                self._file.write(line)
            else:
                self._pending.append(line)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _StderrTee:
    """Copies everything written to fd 2 (and fd 1, redirected there) into a log file as well."""

    def __init__(self, path: Path) -> None:
        self._log = open(path, "ab", buffering=0)  # noqa: SIM115
        self._saved = os.dup(2)
        read_fd, write_fd = os.pipe()
        self._read_fd = read_fd
        os.dup2(write_fd, 2)
        os.dup2(write_fd, 1)
        os.close(write_fd)
        self._thread = threading.Thread(target=self._pump, name="stderr-tee", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunk = redact_urls_bytes(chunk)  # no URL credentials in stderr.log or on the parent's stderr
            with contextlib.suppress(OSError):
                _write_all(self._saved, chunk)
            with contextlib.suppress(OSError, ValueError):
                self._log.write(chunk)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
            sys.stdout.flush()
        os.dup2(self._saved, 2)
        os.dup2(self._saved, 1)
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            os.close(self._read_fd)
        self._log.close()


class JobContext:
    """What a verb sees: emit events, record data snapshots and checkpoints, check for cancellation."""

    def __init__(
        self, job: str, run_dir: Path, manifest: runs.RunManifest, sink: _EventSink, cwd: Path
    ) -> None:
        self.job = job
        self.planned_run_dir = run_dir
        self.manifest = manifest
        self.cwd = cwd
        self._sink = sink
        self._last_progress = 0.0
        self._tee: _StderrTee | None = None
        self.work_started = False  # a step, checkpoint or eval result was reported: no longer a pre-flight

    @property
    def run_id(self) -> str:
        return self.manifest.id

    @property
    def run_created(self) -> bool:
        return self._tee is not None

    @property
    def run_dir(self) -> Path:
        """The run directory, created on first use (the pre-flight checks before it leave nothing behind)."""
        if self._tee is None:
            _Shield.depth += 1  # a cancel waits until the directory, its manifest and its logs are in place
            try:
                runs.materialize_run(self.planned_run_dir, self.manifest)
                self._sink.attach(self.planned_run_dir / runs.EVENTS)
                self._tee = _StderrTee(self.planned_run_dir / runs.STDERR)
            finally:
                _end_setup_shield()
        return self.planned_run_dir

    def close(self) -> None:
        if self._tee is not None:
            self._tee.close()
        self._sink.close()

    def emit(self, event: ev.Event) -> None:
        if isinstance(event, ev.Step | ev.Checkpoint | ev.Eval):
            self.work_started = True
        self._sink.write(event)

    def log(self, message: str, level: str = "info") -> None:
        getattr(log, level if level != "warning" else "warning")(message)
        self.emit(ev.Log(level=level, message=message))  # type: ignore[arg-type]

    def progress(self, done: int, total: int | None, message: str = "", *, force: bool = False) -> None:
        """Rate-limited to ~10 events/s unless forced (first/last call)."""
        now = time.monotonic()
        if force or done == total or now - self._last_progress >= 0.1:
            self._last_progress = now
            self.emit(ev.Progress(done=done, total=total, message=message))

    def save_manifest(self) -> None:
        """Written once the run directory exists; before that the manifest lives in memory."""
        if self.run_created:
            runs.write_manifest(self.planned_run_dir, self.manifest)

    def update(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self.manifest, key, value)
        self.save_manifest()

    def add_data(self, snapshot: runs.DataSnapshot) -> None:
        self.manifest.data.append(snapshot)
        self.save_manifest()

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Finish the enclosed work (a checkpoint save and its manifest record) before honouring a cancel."""
        _Shield.depth += 1
        try:
            yield
        finally:
            _Shield.depth -= 1
            if _Shield.depth == 0 and _Shield.pending is not None:
                signum, _Shield.pending = _Shield.pending, None
                raise Cancelled(signum)

    def add_checkpoint(
        self,
        name: str,
        address: str,
        step: int,
        *,
        final: bool = False,
        state: str | None = None,
        ttl_seconds: int | None = None,
    ) -> None:
        self.run_dir  # noqa: B018 - a checkpoint is work: its run is recorded from here on
        created = runs.now_iso()
        record = runs.CheckpointRecord(
            name=name,
            address=address,
            step=step,
            created_at=created,
            final=final,
            state=state,
            ttl_seconds=ttl_seconds,
            expires_at=runs.iso_after(created, ttl_seconds) if ttl_seconds else None,
        )
        self.manifest.checkpoints.append(record)
        self.manifest.last_checkpoint = address
        self.save_manifest()
        self.emit(ev.Checkpoint(name=name, address=address, step=step))


Verb = Callable[[JobContext, Any], tuple[dict[str, Any], str]]


class _Shield:
    """While active, a cancel signal is remembered instead of raised (e.g. during a checkpoint save)."""

    depth = 0
    pending: int | None = None


def _install_signal_handlers() -> None:
    def handler(signum: int, _frame: Any) -> None:
        # Only the first signal cancels; a second one during cleanup is ignored (SIGKILL remains for the impatient).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if _Shield.depth > 0:
            _Shield.pending = signum
            return
        raise Cancelled(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _end_setup_shield() -> None:
    _Shield.depth -= 1
    if _Shield.depth == 0 and _Shield.pending is not None:
        signum, _Shield.pending = _Shield.pending, None
        raise Cancelled(signum)


def _block_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def runs_dir_for(cwd: Path) -> Path:
    from machine_lsp.core.store import Store

    return Store.open(cwd).runs_dir


def run(
    job: str,
    verb: Verb,
    args_type: type[Any],
    args_json: str,
    *,
    cwd: Path | None = None,
    events_fd: int | None = None,
) -> int:
    """Run one verb as this process's job. ``events_fd`` defaults to a private duplicate of fd 1."""
    cwd = (cwd or Path.cwd()).absolute()
    _install_signal_handlers()
    sink = _open_event_sink(events_fd)
    try:
        args = msgspec.json.decode(args_json.encode(), type=args_type)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        sink.write(ev.Error(message=f"bad --args-json for {job}: {exc}", kind="usage"))
        return EXIT_USAGE
    except Cancelled:
        return EXIT_CANCELLED
    args_dict = msgspec.to_builtins(args)

    try:
        run_dir, manifest = runs.plan_run(runs_dir_for(cwd), job, cwd=cwd, args=args_dict)
    except OSError as exc:
        sink.write(ev.Error(message=f"cannot use the runs directory: {exc}", kind="input"))
        return EXIT_FAILED
    ctx = JobContext(job, run_dir, manifest, sink, cwd)
    # Until the verb runs, a cancel is remembered rather than raised (and honoured in _run_verb).
    _Shield.depth += 1
    code = EXIT_FAILED
    try:
        code = _run_verb(ctx, verb, args)
    except Cancelled:  # a signal landed between the verb's end and the handlers being blocked
        _block_signals()
        if ctx.manifest.status == "running":
            ctx.update(
                status="cancelled", error="cancelled", error_kind="cancelled", finished_at=runs.now_iso()
            )
            ctx.emit(ev.Error(message="cancelled", kind="cancelled"))
        code = EXIT_CANCELLED
    finally:
        ctx.close()
    if _refused(ctx):
        shutil.rmtree(ctx.planned_run_dir, ignore_errors=True)
    return code


#: Jobs that leave no run directory when they succeed: checking a file, serving a checkpoint or starting the
#: local Tinker server is not a run.
RUNLESS_JOBS = frozenset({"validate", "serve", "tinker-serve", "use", "tinker-status", "tinker-stop"})


def _refused(ctx: JobContext) -> bool:
    """An expected failure before any step, checkpoint or eval result: a refused pre-flight, not a run."""
    m = ctx.manifest
    return (
        ctx.run_created
        and m.status == "failed"
        and m.error_kind not in (None, "crash")
        and not ctx.work_started
        and not m.checkpoints
        and m.steps_done == 0
    )


def _open_event_sink(events_fd: int | None) -> _EventSink:
    """The event stream (a private duplicate of fd 1 unless given; stray prints go to stderr) and logging."""
    if events_fd is None:
        sys.stdout.flush()
        events_fd = os.dup(1)
        os.dup2(2, 1)  # stray prints go to stderr, never into the event stream
    sink = _EventSink(events_fd)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("httpx", "httpcore", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return sink


def _run_verb(ctx: JobContext, verb: Verb, args: Any) -> int:
    """Start, run the verb, and record how it ended (done, failed, crashed, cancelled): the exit code."""
    job, run_dir, manifest = ctx.job, ctx.planned_run_dir, ctx.manifest
    try:
        _end_setup_shield()  # a cancel that arrived during set-up is honoured here, and recorded
        ctx.emit(ev.Start(job=job, run_id=manifest.id, run_dir=str(run_dir), message=f"{job} started"))
        log.info("%s started in %s (pid %d)", job, run_dir, os.getpid())
        result, message = verb(ctx, args)
    except Cancelled as exc:
        _block_signals()
        last = manifest.last_checkpoint
        message = f"cancelled ({exc.args[0]})" + (
            f"; last checkpoint {last}" if last else "; no checkpoint saved"
        )
        log.warning(message)
        ctx.update(status="cancelled", error=message, error_kind="cancelled", finished_at=runs.now_iso())
        ctx.emit(ev.Error(message=message, kind="cancelled"))
        return EXIT_CANCELLED
    except JobError as exc:
        _block_signals()
        log.error("%s", exc)
        ctx.update(status="failed", error=str(exc), error_kind=exc.kind, finished_at=runs.now_iso())
        ctx.emit(ev.Error(message=str(exc), kind=exc.kind))
        return EXIT_FAILED
    except Exception as exc:
        _block_signals()
        stderr_log = ctx.run_dir / runs.STDERR  # a crash keeps its run, with the traceback in stderr.log
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}"
        ctx.update(status="failed", error=message, error_kind="crash", finished_at=runs.now_iso())
        ctx.emit(ev.Error(message=f"{message} (traceback in {stderr_log})", kind="crash"))
        return EXIT_FAILED
    _block_signals()
    if job not in RUNLESS_JOBS:
        # A finished job is a run on record even if it saved nothing there (an eval writes its result elsewhere).
        ctx.run_dir  # noqa: B018
    ctx.update(status="done", result=result, finished_at=runs.now_iso())
    ctx.emit(ev.Done(result=result, message=message))
    return EXIT_OK
