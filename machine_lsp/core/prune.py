"""`machine jobs prune`: which run directories may go, and which must stay (pure decisions, then the removal).

The rule (docs/ARCHITECTURE.md, "Run directories"):

* Selected: with ``failed``, runs whose status is ``failed`` or ``lost`` (the manifest says running but its process
  is gone); with ``older_than_days``, finished runs (done, failed, cancelled, lost) created more than that many days
  ago. Cancelled runs are only selected by age: their last checkpoint is what ``--resume`` continues from.
* Never removed, whatever the flags:
  - a running job's directory (its process is alive: the one liveness rule, ``runs.job_alive``);
  - a directory whose manifest cannot be read (it may be a run being created; nothing says it is finished);
  - a run whose checkpoints are still named: another manifest resumed from one of them (``resumed_from``,
    ``args.resume`` by address, run id or id prefix), an eval run or an eval result (``eval_results/*.json``,
    ``checkpoint``) refers to one, or it is the checkpoint ``latest`` names (the newest training run's last one).
    References from runs that are themselves being pruned still count: the rule stays simple and errs on keeping.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec

from machine_lsp.core import runs

EVAL_RESULTS_DIR = "eval_results"
FINISHED = ("done", "failed", "cancelled", "lost")
RUN_REF = "run:"


class PruneDecision(msgspec.Struct):
    run_id: str
    path: str
    status: str
    action: Literal["remove", "keep"]
    reason: str


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _manifest_references(manifest: runs.RunManifest) -> set[str]:
    """What a manifest names that could be another run's checkpoint: its resume and checkpoint arguments."""
    found = set(_strings(manifest.args))
    resume = manifest.args.get("resume")
    if isinstance(resume, str) and "://" not in resume:
        found.add(
            RUN_REF + resume
        )  # `--resume RUN`: a run id, or its unique prefix or suffix (runs.find_run)
    if manifest.resumed_from:
        found.add(manifest.resumed_from)
    if manifest.result:
        found.update(s for s in _strings(manifest.result) if "://" in s)
    return found


def eval_result_references(project_dirs: Iterable[Path]) -> set[str]:
    """The `checkpoint` of every eval result file in the projects' eval_results/ (unreadable files are skipped)."""
    found: set[str] = set()
    for project in project_dirs:
        results = project / EVAL_RESULTS_DIR
        if not results.is_dir() or results.is_symlink():
            continue
        for path in results.glob("*.json"):
            try:
                data = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("checkpoint"), str):
                found.add(data["checkpoint"])
    return found


def _referenced_by(manifest: runs.RunManifest, references: set[str]) -> str | None:
    """The reference that names one of this run's checkpoints (or the run itself), if any."""
    names = {c.address for c in manifest.checkpoints} | {c.state for c in manifest.checkpoints if c.state}
    if manifest.last_checkpoint:
        names.add(manifest.last_checkpoint)
    prefix = f"local://{manifest.id}/"
    for ref in references:
        if ref in names or ref.startswith(prefix):
            return ref
        run = ref.removeprefix(RUN_REF) if ref.startswith(RUN_REF) else None
        if run and (manifest.id.startswith(run) or manifest.id.endswith(run)):
            return f"--resume {run}"
    return None


def _age_days(manifest: runs.RunManifest, now: _dt.datetime) -> float | None:
    try:
        created = _dt.datetime.fromisoformat(manifest.created_at)
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=_dt.UTC)
    return (now - created).total_seconds() / 86400


def plan_prune(
    runs_dir: Path,
    *,
    failed: bool,
    older_than_days: float | None,
    project_dirs: Iterable[Path] = (),
    now: _dt.datetime | None = None,
) -> list[PruneDecision]:
    """A decision for every run directory the flags select (and for every one kept despite them)."""
    now = now or _dt.datetime.now(_dt.UTC)
    items = runs.list_runs(runs_dir)
    manifests = [(d, m) for d, m in items if m is not None]
    projects = set(project_dirs) | {Path(m.cwd) for _, m in manifests if m.cwd}
    evals = eval_result_references(projects)
    try:
        latest = runs.latest_checkpoint(runs_dir)
    except LookupError:
        latest = None
    decisions: list[PruneDecision] = []
    for run_dir, manifest in items:
        if manifest is None:
            if failed or older_than_days is not None:
                decisions.append(
                    PruneDecision(run_dir.name, str(run_dir), "unreadable", "keep", "manifest unreadable")
                )
            continue
        status = runs.effective_status(manifest)
        age = _age_days(manifest, now)
        selected_by = None
        if failed and status in ("failed", "lost"):
            selected_by = status
        elif older_than_days is not None and status in FINISHED and age is not None and age > older_than_days:
            selected_by = f"{status}, {age:.0f} days old"
        if selected_by is None:
            continue
        keep = _keep_reason(manifest, status, manifests, evals, latest)
        decisions.append(
            PruneDecision(
                manifest.id,
                str(run_dir),
                status,
                "keep" if keep else "remove",
                keep or selected_by,
            )
        )
    return decisions


def _keep_reason(
    manifest: runs.RunManifest,
    status: str,
    manifests: list[tuple[Path, runs.RunManifest]],
    evals: set[str],
    latest: str | None,
) -> str | None:
    if status == "running":
        return "running"
    if latest and manifest.last_checkpoint == latest:
        return f"its checkpoint is what `latest` names ({latest})"
    for _, other in manifests:
        if other.id == manifest.id:
            continue
        ref = _referenced_by(manifest, _manifest_references(other))
        if ref and ref.startswith("--resume"):
            return f"run {other.id} resumed from it ({ref})"
        if ref:
            return f"run {other.id} uses its checkpoint {ref}"
    ref = _referenced_by(manifest, evals)
    if ref:
        return f"an eval result names its checkpoint {ref}"
    return None


def remove_runs(runs_dir: Path, decisions: Iterable[PruneDecision]) -> list[PruneDecision]:
    """Remove the directories marked ``remove`` (each checked once more: inside runs_dir, real, not running)."""
    removed = []
    for decision in decisions:
        if decision.action != "remove":
            continue
        run_dir = runs.run_dir(runs_dir, decision.run_id)
        if run_dir.is_symlink() or not run_dir.is_dir():
            continue
        try:
            if runs.job_alive(runs.read_manifest(run_dir)):  # it was started again meanwhile
                continue
        except (OSError, msgspec.MsgspecError):
            continue
        shutil.rmtree(run_dir)
        removed.append(decision)
    return removed
