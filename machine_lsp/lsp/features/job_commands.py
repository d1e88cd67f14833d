"""The CLI's long verbs as job commands: `machine.validate`, `machine.train.smoke|run|preferences`,
`machine.retrain`, `machine.eval.baseline|checkpoint|probe`, and `machine.jobs.list|cancel`.

Each runs as a job through the job manager it is given (features/jobs.py): its job verb, progress title and whether
it asks are its line in the verb registry (`core/verb_registry.py`). Paid or long runs ask first with
`window/showMessageRequest`, stating the plan (`lsp/plan.py`), unless the argument object says `"yes": true`; a run
sure to fail is refused with the reason before anyone is asked. `plan: true` answers the plan and runs nothing.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from machine_lsp.core.verb_registry import VERBS, lsp_verb, palette_title
from machine_lsp.lsp.arguments import optional_str, path_arg
from machine_lsp.lsp.confirm import confirm_run
from machine_lsp.lsp.features import CommandError, CommandMethod, LanguageFeature
from machine_lsp.lsp.features.jobs import Job, JobsFeature
from machine_lsp.lsp.replies import CancelReply, JobDeclined, JobPlan, JobsListReply, JobSummary, RunEntry

if TYPE_CHECKING:
    from machine_lsp.lsp.server_base import ServerBase

CONTROL_KEYS = {"yes", "wait", "plan"}
CANCEL_WAIT_S = 15


class JobCommandsFeature(LanguageFeature):
    def __init__(self, server: ServerBase, jobs: JobsFeature) -> None:
        super().__init__(server)
        self.jobs = jobs

    def commands(self) -> dict[str, CommandMethod]:
        """Every registry command with a job and a progress title (the job commands) runs as its registry line says,
        through `_job_command`, but for those with a handler of their own here."""
        own: dict[str, CommandMethod] = {
            "machine.train.preferences": self.train_preferences,
            "machine.validate": self.validate,
            "machine.jobs.list": self.jobs_list,
            "machine.jobs.cancel": self.jobs_cancel,
        }
        table: dict[str, CommandMethod] = {
            v.command: self._job_command(v.job, v.progress, v.asks)
            for v in VERBS
            if v.command and v.job and v.progress and v.command not in own
        }
        return table | own

    def _job_command(self, verb: str, title: str, ask: bool) -> CommandMethod:
        async def run(args: dict[str, Any]) -> JobSummary | JobDeclined | JobPlan:
            job_args = {k: v for k, v in args.items() if k not in CONTROL_KEYS}
            if args.get("plan") is True:
                return await self._plan(verb, job_args, args)
            if args.get("yes") is not True and (ask or job_args.get("engine") in (None, "tinker")):
                # Long runs and runs on hosted Tinker (paid) ask about the run that will happen; one sure to
                # fail is refused with the reason instead. The plan says which engine and server it will be.
                plan = await self._plan(verb, job_args, args)
                if not (ask or plan.costs_money):
                    return await self._run(verb, title, job_args, args)
                if plan.problem is not None:
                    raise CommandError(message=f"{title} not started: {plan.problem}")
                if (refusal := await confirm_run(self.server, title, plan)) is not None:
                    return JobDeclined(status="declined", message=refusal)
            return await self._run(verb, title, job_args, args)

        return run

    async def train_preferences(self, args: dict[str, Any]) -> JobSummary | JobDeclined | JobPlan:
        """`machine.train.run` with a preference objective (dpo, kto or sft+dpo), which this command requires:
        the palette's *Train with Preferences…*. The rest is the training run's (confirmation, plan, progress)."""
        from machine_lsp.engines.objectives import RUN_OBJECTIVES

        choices = [name for name in RUN_OBJECTIVES if name != "sft"]
        if args.get("objective") not in choices:
            raise CommandError(message=f"'objective' must be one of {', '.join(choices)}")
        verb = lsp_verb("machine.train.preferences")
        assert verb.job is not None and verb.progress is not None
        return await self._job_command(verb.job, verb.progress, verb.asks)(args)

    async def validate(self, args: dict[str, Any]) -> JobSummary:
        """Validate a file, or an editor's buffer: with `text` (unsaved edits, untitled files) the job reads a
        temporary copy the server writes, and reports under the buffer's name; the copy goes when the job ends."""
        text = optional_str(args, "text")
        path, label = _validated_file(args) if text is None else _buffer_copy(args, text)
        job_args: dict[str, Any] = {"path": path} | ({"label": label} if text is not None else {})
        if (eval_path := path_arg(args, "eval_uri", "eval_path")) is not None:
            job_args["eval_path"] = eval_path
        if "kind" in args:
            job_args["kind"] = args["kind"]
        try:
            verb = lsp_verb("machine.validate")
            assert verb.job is not None
            summary = await self._run(verb.job, f"{verb.progress} {label}", job_args, args)
        except BaseException:
            if text is not None:
                Path(path).unlink(missing_ok=True)
            raise
        if (
            text is not None
        ):  # a job still running (jobReplies "immediate" / wait: false) removes it at its end
            self._remove_when_done(self.jobs.jobs.get(summary.job_id), Path(path))
        return summary

    async def jobs_list(self, args: dict[str, Any]) -> JobsListReply:
        from machine_lsp.core import runs
        from machine_lsp.core.store import Store

        store = Store.open(self.server.project_start(args.get("uri")))
        on_disk = []
        for run_dir, manifest in runs.list_runs(store.runs_dir)[:50]:
            entry = RunEntry(run_dir=str(run_dir), id=run_dir.name)
            if manifest is not None:
                entry.job, entry.status = manifest.job, runs.effective_status(manifest)
                entry.created_at = manifest.created_at
            on_disk.append(entry)
        return JobsListReply(jobs=[job.summary() for job in self.jobs.jobs.values()], runs=on_disk)

    async def jobs_cancel(self, args: dict[str, Any]) -> CancelReply:
        job_id = args.get("job_id")
        if job_id is None:
            running = [j.id for j in self.jobs.jobs.values() if j.ended is None]
            if len(running) != 1:
                raise CommandError(message=f"pass job_id (running jobs: {', '.join(running) or 'none'})")
            job_id = running[0]
        if not isinstance(job_id, str) or job_id not in self.jobs.jobs:
            raise CommandError(message=f"no job {job_id!r}")
        cancelled = await self.jobs.cancel(
            job_id, reason=f"cancelled by {palette_title('machine.jobs.cancel')}"
        )
        job = await self.jobs.ended(job_id, CANCEL_WAIT_S)
        return CancelReply(cancelled=cancelled, **msgspec.structs.asdict(job.summary()))

    async def _run(self, verb: str, title: str, job_args: dict[str, Any], args: dict[str, Any]) -> JobSummary:
        from machine_lsp.core.store import find_project_root

        cwd = find_project_root(self.server.project_start(args.get("uri")))
        job = await self.jobs.run_for_command(
            verb, job_args, title=title, cwd=cwd, wait=self.jobs.waits(args)
        )
        return job.summary()

    async def _plan(self, verb: str, job_args: dict[str, Any], args: dict[str, Any]) -> JobPlan:
        """The run `verb` would start (`plan: true`), resolved as the job resolves it; nothing runs."""
        from machine_lsp.core.store import find_project_root
        from machine_lsp.lsp.plan import describe, plan_job

        project = find_project_root(self.server.project_start(args.get("uri")))
        # Reads machine.toml, the data file or the store: short work, but off the event loop all the same.
        plan = await asyncio.get_running_loop().run_in_executor(None, plan_job, verb, project, job_args)
        plan.message = describe(plan) if plan.problem is None else f"{verb} cannot run: {plan.problem}"
        return plan

    def _remove_when_done(self, job: Job | None, path: Path) -> None:
        if job is None or job.ended is not None:
            path.unlink(missing_ok=True)
            return

        async def remove() -> None:
            await job.done.wait()
            path.unlink(missing_ok=True)

        self.server.spawn(remove(), f"remove buffer copy {job.id}")


def _validated_file(args: dict[str, Any]) -> tuple[str, str]:
    path = path_arg(args, "uri", "path", required=True)
    assert path is not None
    if not os.path.isfile(path):
        raise CommandError(message=f"{path}: no such file")
    return path, Path(path).name


def _buffer_copy(args: dict[str, Any], text: str) -> tuple[str, str]:
    """A private temporary file holding an editor buffer's text for the validate job, and the buffer's name."""
    uri = args.get("uri") if isinstance(args.get("uri"), str) else None
    name = path_arg(args, "uri", "path") or uri or "buffer"
    fd, path = tempfile.mkstemp(prefix="machine-buffer-", suffix=".jsonl")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    return path, Path(name).name or name
