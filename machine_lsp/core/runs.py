"""Run directories: ``.machine/runs/<id>/`` with manifest.json, events.jsonl, stderr.log (pure; msgspec only).

A manifest is rewritten atomically (temp file + rename) on every change so a reader never sees half a file.
Status moves running -> done | failed | cancelled. A run whose manifest says running but whose process is gone
(killed with SIGKILL, machine rebooted) is reported as ``lost`` by :func:`effective_status`. One liveness rule,
:func:`job_alive`, serves `jobs list` and `jobs cancel`: the manifest records the job process's start time
(``pid_start``, from /proc/<pid>/stat) and a pid counts as the job only while that start time still matches, so a
pid reused by another process is never taken for the job (nor signalled).

Run ids and result names go through one name check, :func:`check_name`; :func:`find_run` and :func:`run_dir` only
ever return a directory directly inside the runs dir, and the runs dir (and `.machine`) must be real directories,
never symlinks. URLs with credentials are redacted in every manifest written (core.redact).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import re
import secrets
import signal
import time
from pathlib import Path
from typing import Any, Literal

import msgspec

from machine_lsp.core.redact import redact_urls_bytes
from machine_lsp.core.safe_files import check_real_dir, write_file_safely
from machine_lsp.core.store import MACHINE_DIR, make_machine_dir

RunStatus = Literal["running", "done", "failed", "cancelled"]
MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
STDERR = "stderr.log"
LOSS_PNG = "loss.png"


class DataSnapshot(msgspec.Struct, omit_defaults=True):
    """A data file a run used: where it came from, the copy in the run dir, its checksum and row count."""

    role: str  # "train", "eval", "probe"
    source: str  # original path, or "store" for the store's good rows
    path: str  # the snapshot inside the run dir (or the original when not copied)
    sha256: str
    rows: int
    # one key per training row (core.trained_in.row_key): which tagged rows the run trained on
    row_keys: list[str] = msgspec.field(default_factory=list)


class CheckpointRecord(msgspec.Struct):
    name: str
    address: str
    step: int
    created_at: str
    final: bool = False
    state: str | None = None  # Tinker training-state path (tinker://<run>/weights/<name>) used to resume
    ttl_seconds: int | None = (
        None  # the service deletes it this long after created_at (Tinker's intermediate ones)
    )
    expires_at: str | None = None


class RunManifest(msgspec.Struct):
    id: str
    job: str
    status: RunStatus
    created_at: str
    updated_at: str
    cwd: str
    pid: int
    pid_start: int | None = None  # the job process's start time (clock ticks after boot, /proc/<pid>/stat)
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    engine: str | None = None
    model: str | None = None
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    data: list[DataSnapshot] = msgspec.field(default_factory=list)
    checkpoints: list[CheckpointRecord] = msgspec.field(default_factory=list)
    last_checkpoint: str | None = None
    steps_done: int = 0
    resumed_from: str | None = None
    gate: dict[str, Any] | None = (
        None  # the eval gate's verdict on the final checkpoint (core.gate.GateResult)
    )
    # the loss and how its data was built: name, beta (dpo, kto), KTO's weights, counts (pairs from rewrites and
    # from good/bad tags, ties skipped, desirable/undesirable examples), sft's loss_weighting (token or row);
    # None for runs before objectives
    objective: dict[str, Any] | None = None
    # the anchor rows a scoped SFT run added (jobs.anchor_jobs): scope, ratio, counts by source, their snapshot
    anchors: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    error_kind: str | None = None
    finished_at: str | None = None


_enc = msgspec.json.Encoder()


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def iso_after(iso: str, seconds: int) -> str:
    """The `now_iso()`-style time `seconds` after `iso`."""
    moment = _dt.datetime.fromisoformat(iso.replace("Z", "+00:00")) + _dt.timedelta(seconds=seconds)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def new_run_id(job: str) -> str:
    """Sortable, unique, filesystem-safe: ``20261130-101500-train-run-3fa2``."""
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{job}-{secrets.token_hex(2)}"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_json_atomic(path: Path, obj: Any) -> None:
    data = redact_urls_bytes(msgspec.json.format(_enc.encode(obj), indent=2) + b"\n")
    write_file_safely(path, data, root=path.parent)


def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    manifest.updated_at = now_iso()
    write_json_atomic(run_dir / MANIFEST, manifest)


def read_manifest(run_dir: Path) -> RunManifest:
    """Raises FileNotFoundError or msgspec.ValidationError/DecodeError."""
    return msgspec.json.decode((run_dir / MANIFEST).read_bytes(), type=RunManifest)


def check_runs_dir(runs_dir: Path) -> None:
    """Raise (an OSError) when the runs dir or the `.machine` above it is a symlink or not a directory."""
    check_real_dir(runs_dir.parent)
    check_real_dir(runs_dir)


def plan_run(runs_dir: Path, job: str, *, cwd: Path, args: dict[str, Any]) -> tuple[Path, RunManifest]:
    """A run's id, directory and first manifest, without creating anything yet (see `materialize_run`).

    A job decides its run directory lazily: validation and a refused pre-flight never leave one behind.
    """
    check_runs_dir(runs_dir)
    for _ in range(10):
        run_id = new_run_id(job)
        if not (runs_dir / run_id).exists():
            break
    else:  # pragma: no cover - ten collisions of 16 random bits within one second
        raise RuntimeError("could not allocate a run id")
    stamp = now_iso()
    manifest = RunManifest(
        id=run_id,
        job=job,
        status="running",
        created_at=stamp,
        updated_at=stamp,
        cwd=str(cwd),
        pid=os.getpid(),
        pid_start=process_start_ticks(os.getpid()),
        args=args,
    )
    return runs_dir / run_id, manifest


def materialize_run(run_dir: Path, manifest: RunManifest) -> None:
    """Create a planned run directory (never an existing one) and write its manifest."""
    runs_dir = run_dir.parent
    check_runs_dir(runs_dir)
    if runs_dir.parent.name == MACHINE_DIR:
        make_machine_dir(runs_dir.parent)  # a first run may come before the first tag: the store is made here
    runs_dir.mkdir(parents=True, exist_ok=True)
    check_runs_dir(runs_dir)
    run_dir.mkdir()
    write_manifest(run_dir, manifest)


def create_run_dir(runs_dir: Path, job: str, *, cwd: Path, args: dict[str, Any]) -> tuple[Path, RunManifest]:
    """Plan and create a run directory at once (`train_sft.py` runs record themselves this way)."""
    for _ in range(10):
        run_dir, manifest = plan_run(runs_dir, job, cwd=cwd, args=args)
        try:
            materialize_run(run_dir, manifest)
        except FileExistsError:
            continue
        return run_dir, manifest
    raise RuntimeError("could not allocate a run id")  # pragma: no cover


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not running.
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (OSError, IndexError):
        return True


def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks after boot (/proc/<pid>/stat field 22); None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[19])  # field 22 counts from 1 and the first two (pid, comm) are cut off above
    except (OSError, IndexError, ValueError):
        return None


def process_started_monotonic() -> float:
    """This process's start as a `time.monotonic()` value (now, where /proc cannot tell): time bounds promised
    from a job's start count the interpreter's start-up too."""
    ticks = process_start_ticks(os.getpid())
    if ticks is None:
        return time.monotonic()
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    if not 0 <= age < 24 * 3600:  # a clock that does not agree with /proc: do not guess
        return time.monotonic()
    return time.monotonic() - age


def is_job_process(pid: int, run_id: str | None = None) -> bool:
    """True when ``pid`` is alive and is a machine-lsp job process (by its command line)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ")
    except OSError:
        return True  # no /proc (macOS): trust the liveness check
    return b"machine_lsp.jobs" in cmdline


def job_alive(manifest: RunManifest) -> bool:
    """Whether the run's own process is still running - the one liveness rule for `jobs list` and `jobs cancel`.

    The pid must be alive and be the same process: its start time must equal the one recorded in the manifest
    (a reused pid has another); manifests written before start times were recorded fall back to the command line.
    """
    if not pid_alive(manifest.pid):
        return False
    if manifest.pid_start is not None:
        started = process_start_ticks(manifest.pid)
        if started is not None:
            return started == manifest.pid_start
    return is_job_process(manifest.pid)


class StopOutcome(msgspec.Struct):
    """How `stop_job` ended a run: its manifest afterwards, and whether it had to be killed."""

    manifest: RunManifest
    killed: bool = False


def stop_job(
    run_dir: Path, manifest: RunManifest, *, grace_s: float, kill_wait_s: float = 30.0
) -> StopOutcome:
    """Cancel a running job: SIGTERM, then wait up to `grace_s` for the job to record its own end (it finishes
    the step or checkpoint save in progress first); a job still running after that is killed (SIGKILL to its
    process group - jobs start in their own session) and its manifest is ended ``cancelled`` here, saying so.

    The escalation is why a cancel ends within a bound on a loaded machine, where one training step alone can
    outlast the grace period. Only a process that `job_alive` proves to be the run's own is ever signalled."""
    if not job_alive(manifest):
        return StopOutcome(manifest)
    os.kill(manifest.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        with contextlib.suppress(OSError, msgspec.MsgspecError):
            manifest = read_manifest(run_dir)
        if manifest.status != "running":
            return StopOutcome(manifest)
    if job_alive(manifest):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(manifest.pid) == manifest.pid:  # its own session (as jobs start): its helpers too
                os.killpg(manifest.pid, signal.SIGKILL)
            else:
                os.kill(manifest.pid, signal.SIGKILL)
        deadline = time.monotonic() + kill_wait_s
        while pid_alive(manifest.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(manifest.pid):
            return StopOutcome(manifest)  # not even SIGKILL took it (uninterruptible I/O): still running
    with contextlib.suppress(OSError, msgspec.MsgspecError):
        manifest = read_manifest(run_dir)  # it may have ended itself while the kill was on its way
    if manifest.status != "running":
        return StopOutcome(manifest)
    manifest.status = "cancelled"
    manifest.error = f"cancelled (killed: it did not stop within {grace_s:.0f} s of SIGTERM)"
    manifest.error_kind = "cancelled"
    manifest.finished_at = now_iso()
    write_manifest(run_dir, manifest)
    return StopOutcome(manifest, killed=True)


def effective_status(manifest: RunManifest) -> str:
    """The manifest status, or ``lost`` when it says running but its process is gone (see job_alive)."""
    if manifest.status == "running" and not job_alive(manifest):
        return "lost"
    return manifest.status


def list_runs(runs_dir: Path) -> list[tuple[Path, RunManifest | None]]:
    """Every run directory, newest first; the manifest is None when unreadable. Raises OSError when the runs dir
    is a symlink (it is never followed)."""
    check_runs_dir(runs_dir)
    if not runs_dir.is_dir():
        return []
    out: list[tuple[Path, RunManifest | None]] = []
    dirs = (p for p in runs_dir.iterdir() if p.is_dir() and not p.is_symlink())
    for run_dir in sorted(dirs, key=lambda p: p.name, reverse=True):
        try:
            out.append((run_dir, read_manifest(run_dir)))
        except (OSError, msgspec.MsgspecError):
            out.append((run_dir, None))
    return out


# A run id or result name: a single path component, no hidden files, nothing a shell or a path would bend.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


def check_name(name: str, what: str = "run id") -> str:
    """`name` when it is a safe single file name (a run id, an eval result name); ValueError saying why not.

    The one check for every name that becomes a path under `.machine/runs/` or `eval_results/`: no separators,
    no `..`, no leading dot or dash, at most 128 characters of letters, digits and `_ . + -`.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"{what} {name!r} is not a valid name: use letters, digits and _ . + - "
            "(no '/', no '..', not starting with '.' or '-', at most 128 characters)"
        )
    return name


def run_dir(runs_dir: Path, run_id: str) -> Path:
    """The directory of run `run_id` (checked with check_name) inside `runs_dir`."""
    return runs_dir / check_name(run_id)


def find_run(runs_dir: Path, ref: str) -> Path:
    """A run dir by id, unique id prefix or suffix, or a path to a run directly inside `runs_dir`.
    Raises LookupError with the reason; a ref that points outside the runs dir is refused."""
    try:
        check_runs_dir(runs_dir)
    except OSError as exc:
        raise LookupError(f"{runs_dir}: {exc.strerror or exc}; the runs dir is never followed") from None
    if "/" in ref or os.sep in ref:
        candidate = Path(ref).absolute()
        if (
            candidate.parent.resolve() != runs_dir.resolve()
            or candidate.is_symlink()
            or not candidate.is_dir()
        ):
            raise LookupError(f"{ref!r} is not a run directory inside {runs_dir}")
        ref = candidate.name
    try:
        check_name(ref)
    except ValueError as exc:
        raise LookupError(str(exc)) from None
    exact = run_dir(runs_dir, ref)
    if exact.is_dir() and not exact.is_symlink():
        return exact
    matches = [d for d, _ in list_runs(runs_dir) if d.name.startswith(ref) or d.name.endswith(ref)]
    if not matches:
        raise LookupError(f"no run matches {ref!r} in {runs_dir}")
    if len(matches) > 1:
        names = ", ".join(d.name for d in matches[:5])
        raise LookupError(f"{ref!r} matches {len(matches)} runs: {names}")
    return matches[0]


LATEST = "latest"
# Jobs whose checkpoints are trained models (the smoke run's 2 steps are a plumbing check, not a model).
TRAINING_JOBS = ("train-run", "retrain", "train_sft.py")


def latest_checkpoint(runs_dir: Path) -> str:
    """The newest training run's last checkpoint address (what `latest` names); LookupError when none."""
    try:
        found = list_runs(runs_dir)
    except OSError as exc:
        raise LookupError(f"{runs_dir}: {exc.strerror or exc}") from None
    for _run_dir, manifest in found:
        if manifest is not None and manifest.job in TRAINING_JOBS and manifest.last_checkpoint:
            return manifest.last_checkpoint
    raise LookupError(f"no training run with a checkpoint in {runs_dir}: run `machine train run` first")
