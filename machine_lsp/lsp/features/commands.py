"""workspace/executeCommand: the CLI's verbs as `machine.<verb>` commands.

Every command takes one JSON object argument (or none). Tagging and store queries run in-process (they are quick
and pure); training, evaluation and validation run as jobs (see jobs.py). Paid or long runs ask first with
`window/showMessageRequest` unless the argument object says `"yes": true`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.uris import to_fs_path

from machine_lsp import __version__
from machine_lsp.core import selection
from machine_lsp.core.conflicts import claim_kind, standing
from machine_lsp.core.lines import split_lines_keep_ends
from machine_lsp.core.trained_in import trained_in
from machine_lsp.lsp import compat
from machine_lsp.lsp.confirm import confirm_run
from machine_lsp.lsp.features import (
    SHOWN,
    WORK_DONE_TOKEN,
    CommandError,
    JobUnavailable,
    LanguageFeature,
    Reported,
)
from machine_lsp.lsp.positions import to_codepoint_index
from machine_lsp.lsp.replies import (
    CancelReply,
    CompareReply,
    DataReply,
    DocumentTiming,
    InfoReply,
    JobDeclined,
    JobPlan,
    JobsListReply,
    JobSummary,
    RunEntry,
    ServerSettingsInfo,
    TaggedRecord,
    TaggedReply,
    TagPreview,
    TagReply,
    WroteReply,
    to_wire,
)

logger = logging.getLogger(__name__)

#: command id -> (job verb, progress title, ask before running)
JOB_COMMANDS: dict[str, tuple[str, str, bool]] = {
    "machine.train.smoke": ("train-smoke", "Training smoke test", False),
    "machine.train.run": ("train-run", "Training run", True),
    "machine.retrain": ("retrain", "Retrain and reload", True),
    "machine.eval.baseline": ("eval-baseline", "Baseline evaluation", True),
    "machine.eval.checkpoint": ("eval-checkpoint", "Checkpoint evaluation", True),
    "machine.eval.probe": ("eval-probe", "Style-bleed probe", True),
}
CONTROL_KEYS = {"yes", "wait", "plan"}


class _QuietReportedErrors(logging.Filter):
    """pygls logs every error reply with its traceback; these were reported once by the command itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, CommandError | Reported)


def _arguments(args: tuple[Any, ...]) -> dict[str, Any]:
    if not args:
        return {}
    if len(args) == 1 and isinstance(args[0], dict):
        return dict(args[0])
    raise CommandError(message="expected a single JSON object argument")


class CommandsFeature(LanguageFeature):
    def register(self) -> None:
        table: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "machine.tag": self.tag,
            "machine.tagged": self.tagged,
            "machine.data": self.data,
            "machine.validate": self.validate,
            "machine.train.sft": self.train_sft,
            "machine.eval.init": self.eval_init,
            "machine.eval.compare": self.eval_compare,
            "machine.jobs.list": self.jobs_list,
            "machine.jobs.cancel": self.jobs_cancel,
            "machine.server.info": self.info,
            **self.server.serving.commands(),
        }
        for command_id, (verb, title, ask) in JOB_COMMANDS.items():
            table[command_id] = self._job_command(verb, title, ask)
        table["machine.train.preferences"] = self.train_preferences
        for command_id, method in table.items():
            self.server.command(command_id)(self._entry(command_id, method))
        json_rpc_logger = logging.getLogger("pygls.protocol.json_rpc")
        if not any(isinstance(f, _QuietReportedErrors) for f in json_rpc_logger.filters):
            json_rpc_logger.addFilter(_QuietReportedErrors())

    def _entry(
        self, command_id: str, method: Callable[[dict[str, Any]], Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        """The command handler: a user error is one line in the editor (window/showMessage) and in the reply; an
        unexpected exception is logged once (its traceback only at debug level) and shown as one line too."""
        server = self.server

        def show(message: str) -> None:
            server.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))

        async def handler(*arguments: Any) -> Any:
            try:
                return to_wire(await method(_arguments(arguments)))
            except CommandError as exc:
                exc.message = " ".join(str(exc.message).split())  # one line, whatever the cause's text held
                exc.data = SHOWN
                show(f"machine: {exc.message}")
                raise
            except JsonRpcException:
                raise
            except Exception as exc:
                message = f"{command_id} failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
                logger.error("%s", message)
                logger.debug("%s", command_id, exc_info=True)
                show(f"machine: {message}")
                raise Reported(message=message, data=SHOWN) from None

        return handler

    # -- tagging ----------------------------------------------------------------------------------------------
    async def tag(self, args: dict[str, Any]) -> TagReply | TagPreview:
        from machine_lsp.core import tagging
        from machine_lsp.core.store import Store, StoreError
        from machine_lsp.core.transcripts import TranscriptError

        verdict = args.get("verdict", "good")
        if verdict not in ("good", "bad"):
            raise CommandError(message=f"verdict must be 'good' or 'bad', not {verdict!r}")
        note = _optional_str(args, "note") or ""
        rewrite = _optional_str(args, "rewrite")
        trace = bool(args.get("trace", False))
        ask = args.get("ask")
        if ask == "note" and not note:
            raise CommandError(message="this action needs a note: pass {'note': '...'} to machine.tag")
        if ask == "rewrite" and not rewrite:
            raise CommandError(
                message="this action needs the rewritten answer: pass {'rewrite': '...'} to machine.tag"
            )
        uri = args.get("uri") or ""
        source = _optional_str(args, "from")
        try:
            if source is not None:  # a session's turn (or FILE[:LINE]); the store is still the project's
                turn, uri = await self._turn_from(source, args, trace)
            elif "range" in args:
                uri = _require_str(args, "uri")
                turn = self._selection_turn(uri, self._lines(uri), args)
            else:
                uri = _require_str(args, "uri")
                turn = await self._line_turn(uri, args, trace)
            store = Store.open(self.server.project_start(args.get("uri") if source is not None else uri))
            if args.get("preview") is True:
                return tag_preview(store, turn, verdict, note=note, rewrite=rewrite, trace=trace)
            result = tagging.tag(store, turn, verdict, note=note, rewrite=rewrite, trace=trace)
        except (TranscriptError, selection.SelectionError) as exc:
            raise CommandError(message=str(exc)) from None
        except (UnicodeError, RecursionError) as exc:
            raise CommandError(
                message=f"{uri}: cannot read this line ({type(exc).__name__}: {exc})"
            ) from None
        except (tagging.TagRefused, StoreError) as exc:
            raise CommandError(message=str(exc)) from None
        record = result.record
        where = f"{Path(to_fs_path(uri) or uri).name}:{turn.end_line}"
        if result.duplicate_of:
            message = f"Already tagged {verdict} ({where}, record {result.duplicate_of}); not added again"
            kind = types.MessageType.Warning
        else:
            counts = store.counts()
            message = f"Tagged {verdict}: {where} · store {counts.good} good / {counts.bad} bad"
            kind = types.MessageType.Info
            if result.overrides:
                outvoted = ", ".join(f"{r.id} ({claim_kind(r)})" for r in result.overrides)
                message += (
                    f"; contradicts record {outvoted} on the same turn: this tag wins (the last tag trains)"
                )
                kind = types.MessageType.Warning
            for other, keeper in result.copies:
                message += f"; record {other.id} tags the same exchange from another copy: the export trains it once, "
                message += f"from record {keeper.id} (with the system prompt)"
        self.server.window_show_message(types.ShowMessageParams(type=kind, message=message))
        return TagReply(
            id=record.id,
            verdict=record.verdict,
            duplicate_of=result.duplicate_of,
            message=message,
            store=str(store.tagged_path),
            overrides=[r.id for r in result.overrides],
        )

    async def _line_turn(self, uri: str, args: dict[str, Any], trace: bool):
        line = args.get("line")
        if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 1):
            raise CommandError(message="line must be a 1-based line number")
        return await self._turn(uri, self._lines(uri), line, trace)

    async def _turn_from(self, source: str, args: dict[str, Any], trace: bool):
        """`from`: "last" or "SESSION-ID[:TURN]" (core resolve_from, as `machine good --from`), or FILE[:LINE]."""
        from machine_lsp.core.sessions import resolve_from, split_file_line

        start = self.server.project_start(args.get("uri"))
        turn = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(resolve_from, source, start, trace=trace)
        )
        if turn is not None:
            return turn, turn.source.uri
        path, line = split_file_line(source, start)  # relative: to the project, as the CLI's cwd
        uri = (start / path.expanduser()).absolute().as_uri()
        return await self._line_turn(uri, {"line": line}, trace), uri

    def _lines(self, uri: str) -> list[str]:
        """The document's lines: the editor's buffer when open, else the file on disk (split the same way)."""
        doc = self.server.open_document(uri)
        if doc is not None:
            return doc.lines
        path = to_fs_path(uri)
        if not path or not os.path.isfile(path):
            raise CommandError(message=f"{uri}: no such file")
        try:
            return split_lines_keep_ends(Path(path).read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(message=f"{uri}: cannot read as UTF-8 text ({exc})") from None

    async def _turn(self, uri: str, lines: list[str], line: int | None, trace: bool):
        if line is not None and not selection.is_session_log(lines):
            return selection.turn_at_line(lines, uri, line, trace=trace)  # a chat row: one line, parsed here
        # A whole file: in the turns worker process (cached per version for an open document).
        doc = self.server.open_document(uri)
        if doc is not None:
            return await self.server.turns.turn(doc, line, trace)
        return await self.server.turns.turn_of_lines(list(lines), uri, line, trace)

    def _selection_turn(self, uri: str, lines: list[str], args: dict[str, Any]):
        try:
            rng = msgspec.convert(args["range"], _Range)
        except msgspec.ValidationError as exc:
            raise CommandError(message=f"range: {exc}") from None
        codec = self.server.workspace.position_codec

        def index(line0: int, character: int) -> int:
            return to_codepoint_index(codec, lines[line0], character) if 0 <= line0 < len(lines) else 0

        start = (rng.start.line, index(rng.start.line, rng.start.character))
        end = (rng.end.line, index(rng.end.line, rng.end.character))
        path = to_fs_path(uri) or uri
        return selection.selection_turn(lines, uri, path, start, end, _optional_str(args, "prompt"))

    async def tagged(self, args: dict[str, Any]) -> TaggedReply:
        from machine_lsp.core.schema import text_of
        from machine_lsp.core.store import Store

        store = Store.open(self.server.project_start(args.get("uri")))
        verdict = args.get("verdict")
        rows = []
        records = standing(store.records())  # what the store says now: edited-away records are history
        trained = trained_in(store.runs_dir, records)
        for record in records:
            if verdict and record.verdict != verdict:
                continue
            answer = next((text_of(m) for m in reversed(record.messages) if m.role == "assistant"), "")
            prompt = next((text_of(m) for m in reversed(record.messages) if m.role == "user"), "")
            rows.append(
                TaggedRecord(
                    id=record.id,
                    verdict=record.verdict,
                    note=record.note,
                    source=record.source,
                    answer=answer[:200],
                    rewritten=record.original is not None,
                    trace=record.trace,
                    created_at=record.created_at,
                    prompt=prompt[:200],
                    trained_in=trained.get(record.id, []),
                )
            )
        return TaggedReply(store=str(store.tagged_path), records=rows, warnings=list(store.warnings))

    async def data(self, args: dict[str, Any]) -> DataReply:
        from machine_lsp.core.store import Store

        store = Store.open(self.server.project_start(args.get("uri")))
        counts = store.counts()
        return DataReply(store=str(store.tagged_path), counts=counts, warnings=list(store.warnings))

    # -- jobs -------------------------------------------------------------------------------------------------
    async def validate(self, args: dict[str, Any]) -> JobSummary:
        """Validate a file, or an editor's buffer: with `text` (unsaved edits, untitled files) the job reads a
        temporary copy the server writes, and reports under the buffer's name; the copy goes when the job ends."""
        text = _optional_str(args, "text")
        if text is None:
            path = _path_arg(args, "uri", "path", required=True)
            if not os.path.isfile(path):
                raise CommandError(message=f"{path}: no such file")
            label = Path(path).name
        else:
            uri = args.get("uri") if isinstance(args.get("uri"), str) else None
            name = _path_arg(args, "uri", "path") or uri or "buffer"
            label = Path(name).name or name
            path = _buffer_copy(text)
        job_args: dict[str, Any] = {"path": path}
        if text is not None:
            job_args["label"] = label
        if (eval_path := _path_arg(args, "eval_uri", "eval_path")) is not None:
            job_args["eval_path"] = eval_path
        if "kind" in args:
            job_args["kind"] = args["kind"]
        try:
            summary = await self._run_job("validate", f"Validate {label}", job_args, args)
        except BaseException:
            if text is not None:
                Path(path).unlink(missing_ok=True)
            raise
        job = self.server.jobs.jobs.get(summary.job_id)
        if text is not None and (job is None or job.ended is not None):
            Path(path).unlink(missing_ok=True)
        elif text is not None:  # a job still running (jobReplies "immediate" / wait: false)
            self.server.spawn(_remove_when_done(job, Path(path)), f"remove buffer copy {summary.job_id}")
        return summary

    def _job_command(self, verb: str, title: str, ask: bool) -> Callable[[dict[str, Any]], Awaitable[Any]]:
        async def run(args: dict[str, Any]) -> JobSummary | JobDeclined | JobPlan:
            job_args = {k: v for k, v in args.items() if k not in CONTROL_KEYS}
            if args.get("plan") is True:
                return await self._plan(verb, job_args, args)
            if args.get("yes") is not True and (ask or job_args.get("engine") in (None, "tinker")):
                # Long runs and runs on hosted Tinker (paid) ask about the run that will happen; one sure to
                # fail is refused with the reason instead. The plan says which engine and server it will be.
                plan = await self._plan(verb, job_args, args)
                if not (ask or plan.costs_money):
                    return await self._run_job(verb, title, job_args, args)
                if plan.problem is not None:
                    raise CommandError(message=f"{title} not started: {plan.problem}")
                if (refusal := await confirm_run(self.server, title, plan)) is not None:
                    return JobDeclined(status="declined", message=refusal)
            return await self._run_job(verb, title, job_args, args)

        return run

    async def train_preferences(self, args: dict[str, Any]) -> JobSummary | JobDeclined | JobPlan:
        """`machine.train.run` with a preference objective (dpo, kto or sft+dpo), which this command requires:
        the palette's *Train with Preferences…*. The rest is the training run's (confirmation, plan, progress)."""
        from machine_lsp.engines.objectives import RUN_OBJECTIVES

        choices = [name for name in RUN_OBJECTIVES if name != "sft"]
        if args.get("objective") not in choices:
            raise CommandError(message=f"'objective' must be one of {', '.join(choices)}")
        return await self._job_command("train-run", "Preference training run", True)(args)

    async def _run_job(
        self, verb: str, title: str, job_args: dict[str, Any], args: dict[str, Any]
    ) -> JobSummary:
        from machine_lsp.core.store import find_project_root

        cwd = find_project_root(self.server.project_start(args.get("uri")))
        # A client with a short request timeout (eglot: 10 s) declares jobReplies "immediate": the reply carries
        # the job id at once; an explicit `wait` argument still decides for one call.
        wait = args.get("wait", self.server.settings.job_replies == "onEnd") is not False
        try:
            job = await self.server.jobs.run(
                verb,
                job_args,
                title=title,
                cwd=cwd,
                # The request's own token ends with its reply: a job outliving it reports on a server-created one.
                token=WORK_DONE_TOKEN.get() if wait else None,
                wait=wait,
            )
        except JobUnavailable as exc:
            raise CommandError(message=f"{title}: {exc}") from None
        summary = job.summary()
        if job.status == "failed":  # the job's end showed the message already (window/showMessage)
            raise Reported(message=job.message, data={**to_wire(summary), **SHOWN})
        return summary

    async def _plan(self, verb: str, job_args: dict[str, Any], args: dict[str, Any]) -> JobPlan:
        """The run `verb` would start (`plan: true`), resolved as the job resolves it; nothing runs."""
        from machine_lsp.core.store import find_project_root
        from machine_lsp.lsp.plan import describe, plan_job

        project = find_project_root(self.server.project_start(args.get("uri")))
        # Reads machine.toml, the data file or the store: short work, but off the event loop all the same.
        plan = await asyncio.get_running_loop().run_in_executor(None, plan_job, verb, project, job_args)
        plan.message = describe(plan) if plan.problem is None else f"{verb} cannot run: {plan.problem}"
        return plan

    # -- scaffolds (quick file writes, in-process like the CLI) ---------------------------------------------
    async def train_sft(self, args: dict[str, Any]) -> WroteReply:
        """Write train_sft.py + machine.toml into the project (`machine train sft`)."""
        from machine_lsp.core.store import find_project_root
        from machine_lsp.scaffold.config import ConfigError, MachineConfig, apply_overrides
        from machine_lsp.scaffold.writer import ScaffoldExists, write_train_scaffold

        project = find_project_root(self.server.project_start(args.get("uri")))
        data = _path_arg(args, "data_uri", "data")
        if data is not None and not (project / data).is_file():
            raise CommandError(message=f"{data}: no such file")
        train = {k: args.get(k) for k in ("engine", "model", "epochs", "steps", "learning_rate", "rank")}
        train.update(data=data, batch_size=args.get("batch_size"), save_every=args.get("save_every"))
        try:
            config = apply_overrides(MachineConfig(), train, {"data": args.get("eval_data")})
            written = write_train_scaffold(
                project, config, command="machine.train.sft", force=bool(args.get("force"))
            )
        except (ConfigError, ScaffoldExists) as exc:
            raise CommandError(message=str(exc)) from None
        # The next steps by their names in the editor (VS Code's palette titles; the README's verbs table maps them
        # to machine.train.smoke / machine.train.run for other clients).
        return self._wrote(written, f"next: Smoke Run, then Train (engine: {config.train.engine})")

    async def eval_init(self, args: dict[str, Any]) -> WroteReply:
        """Write eval.py (and machine.toml if missing) into the project (`machine train eval init`)."""
        from machine_lsp.core.store import find_project_root
        from machine_lsp.scaffold.writer import ScaffoldExists, write_default_config, write_eval_scaffold

        project = find_project_root(self.server.project_start(args.get("uri")))
        try:
            written = write_eval_scaffold(project, command="machine.eval.init", force=bool(args.get("force")))
        except ScaffoldExists as exc:
            raise CommandError(message=str(exc)) from None
        config = write_default_config(project)
        if config is not None:
            written.append(config)
        return self._wrote(
            written, "next: Baseline Eval, on an eval set (EVAL.jsonl: chat rows with an expected answer)"
        )

    def _wrote(self, written: list[Path], hint: str) -> WroteReply:
        message = "wrote " + ", ".join(p.name for p in written) + f" · {hint}"
        self.server.window_show_message(types.ShowMessageParams(type=types.MessageType.Info, message=message))
        return WroteReply(written=[str(p) for p in written], message=message)

    async def eval_compare(self, args: dict[str, Any]) -> CompareReply:
        from machine_lsp.core import evals

        a = _path_arg(args, "a_uri", "a", required=True)
        b = _path_arg(args, "b_uri", "b", required=True)
        try:
            comparison = evals.compare(evals.load_result(Path(a)), evals.load_result(Path(b)))
        except (OSError, ValueError, msgspec.MsgspecError) as exc:
            raise CommandError(message=f"cannot compare: {exc}") from None
        message = (
            f"{comparison.b_name} vs {comparison.a_name}: {comparison.a_accuracy:.0%} → {comparison.b_accuracy:.0%}"
            f" (Δ {comparison.delta:+.0%}, +{comparison.gained}/-{comparison.lost}, McNemar p={comparison.mcnemar_p:.3g})"
        )
        self.server.window_show_message(types.ShowMessageParams(type=types.MessageType.Info, message=message))
        return CompareReply(message=message, comparison=comparison)

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
        return JobsListReply(jobs=[job.summary() for job in self.server.jobs.jobs.values()], runs=on_disk)

    async def jobs_cancel(self, args: dict[str, Any]) -> CancelReply:
        job_id = args.get("job_id")
        jobs = self.server.jobs
        if job_id is None:
            running = [j.id for j in jobs.jobs.values() if j.ended is None]
            if len(running) != 1:
                raise CommandError(message=f"pass job_id (running jobs: {', '.join(running) or 'none'})")
            job_id = running[0]
        if not isinstance(job_id, str) or job_id not in jobs.jobs:
            raise CommandError(message=f"no job {job_id!r}")
        cancelled = await jobs.cancel(job_id, reason="cancelled by machine.jobs.cancel")
        job = jobs.jobs[job_id]
        try:
            await asyncio.wait_for(job.done.wait(), 15)
        except TimeoutError:
            pass
        return CancelReply(cancelled=cancelled, **msgspec.structs.asdict(job.summary()))

    async def info(self, args: dict[str, Any]) -> InfoReply:
        caps = self.server.client_capabilities
        return InfoReply(
            version=__version__,
            pid=os.getpid(),
            python=sys.executable,
            heavy_modules=self.server.heavy_modules_loaded(),
            diagnostics="pull" if self.server.diagnostics.pull else "push",
            position_encoding=str(self.server.workspace.position_encoding),
            client_progress=bool(caps.window and caps.window.work_done_progress),
            settings=ServerSettingsInfo(**self.server.settings.to_client()),
            open_requests=compat.open_request_count(self.server),
            line_cache_chars=self.server.diagnostics.cache_chars,
            timing={
                uri: DocumentTiming(last_check_ms=st.last_check_ms, last_checked_lines=st.last_checked_lines)
                for uri, st in self.server.diagnostics.docs.items()
            },
        )


def tag_preview(store: Any, turn: Any, verdict: str, **options: Any) -> TagPreview:
    """What `machine.tag` would store for `turn` (nothing is written): the record, and the duplicate it would be."""
    from machine_lsp.core import tagging
    from machine_lsp.core.schema import text_of
    from machine_lsp.core.transcripts.base import display_path
    from machine_lsp.core.turn_marks import last_prompt

    record = tagging.build_record(turn, verdict, **options)  # type: ignore[arg-type]
    duplicate = tagging.duplicate_of(store.records(), record)
    return TagPreview(
        preview=True,
        verdict=record.verdict,
        harness=turn.source.harness,
        session_id=turn.source.session_id,
        where=f"{display_path(turn.source.uri)}:{turn.end_line}",
        prompt=last_prompt(turn),
        answer=text_of(record.messages[-1]),
        duplicate_of=duplicate.id if duplicate is not None else None,
        record=record,
    )


class _Position(msgspec.Struct):
    line: int
    character: int


class _Range(msgspec.Struct):
    start: _Position
    end: _Position


def _require_str(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise CommandError(message=f"missing {key!r} (a string)")
    return value


def _optional_str(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is not None and not isinstance(value, str):
        raise CommandError(message=f"{key!r} must be a string")
    return value


def _buffer_copy(text: str) -> str:
    """A private temporary file holding an editor buffer's text, for the validate job to read."""
    fd, name = tempfile.mkstemp(prefix="machine-buffer-", suffix=".jsonl")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    return name


async def _remove_when_done(job: Any, path: Path) -> None:
    await job.done.wait()
    path.unlink(missing_ok=True)


def _path_arg(args: dict[str, Any], uri_key: str, path_key: str, *, required: bool = False) -> str | None:
    if isinstance(args.get(uri_key), str):
        path = to_fs_path(args[uri_key])
        if path:
            return path
    if isinstance(args.get(path_key), str):
        return args[path_key]
    if required:
        raise CommandError(message=f"missing {uri_key!r} (a file URI) or {path_key!r} (a path)")
    return None
