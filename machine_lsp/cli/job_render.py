"""Running a job child from the CLI: its JSON-lines events as rich progress bars, and the CLI exit code.

The child is the same process the language server starts (`python -m machine_lsp.jobs VERB`), driven through
the one job client (machine_lsp.jobs.client), so the CLI and the editor share one code path.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from machine_lsp.cli.job_support import (
    CANCEL_GRACE_S,
    console_err,
    console_out,
)
from machine_lsp.core.exit_codes import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_USAGE
from machine_lsp.jobs import events as ev
from machine_lsp.jobs.client import JobOutcome, JobProcess, job_command

RECORD_WAIT_S = 10.0


class _Renderer:
    """Turns job events into a spinner, rich progress bars and lines.

    A spinner shows from the moment the child is spawned (imports and loading a model can take many seconds with
    no event) until the first bar (a step or a counted progress event); uncounted progress messages update its
    text. When the job ends, however it ends, the spinner goes and so does any bar that never moved (no stale 0/N).
    """

    def __init__(self, console: Console, verb: str) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("[bold blue]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.status = console.status(f"starting {verb}…", spinner="dots")
        self.bars_shown = False
        self.task: TaskID | None = None
        self.kind: str | None = None
        self.run_id: str | None = None
        self.run_dir: str | None = None

    def start(self) -> None:
        self.status.start()
        # Draw the first frame now, not at the refresh thread's first tick: on a loaded machine the child's first
        # event can come before that tick, and the spinner would never have said what is starting.
        self.status.update(spinner="dots")  # (only a new spinner makes rich redraw at once)

    def finish(self) -> None:
        self.status.stop()
        for task in list(self.progress.tasks):
            if task.completed == 0:  # a bar that never moved says nothing true about the job any more
                self.progress.remove_task(task.id)
        if self.bars_shown:
            self.progress.stop()

    def _bar(self, kind: str, description: str, total: int | None) -> TaskID:
        if not self.bars_shown:
            self.status.stop()
            self.progress.start()
            self.bars_shown = True
        if self.task is None or self.kind != kind:
            if self.task is not None:
                self.progress.stop_task(self.task)
            self.task = self.progress.add_task(description, total=total, info="")
            self.kind = kind
        return self.task

    def _note(self, text: str) -> None:
        """An uncounted progress message: the spinner's text before the bars, a dim line after them."""
        if self.bars_shown:
            self.console.print(f"[dim]{escape(text)}[/]")
        else:
            self.status.update(f"{escape(text)}…" if not text.endswith("…") else escape(text))

    def handle(self, event: ev.Event) -> None:
        p = self.progress
        if isinstance(event, ev.Start):
            self.run_id, self.run_dir = event.run_id, event.run_dir
            self._note(f"{event.job}: starting (imports, data, model)")
        elif isinstance(event, ev.Step):
            task = self._bar("step", "train", event.total)
            eta = f" · eta {event.eta_seconds:.0f}s" if event.eta_seconds is not None else ""
            info = f"loss {event.loss:.4f} · lr {event.lr:.2g} · {event.tokens} tok · {event.seconds_per_step:.2f} s/step{eta}"
            p.update(task, completed=event.step, total=event.total, info=info)
            if event.total is not None and event.total <= 50:
                p.console.print(f"[dim]step {event.step}/{event.total} loss {event.loss:.4f}[/]")
        elif isinstance(event, ev.Progress):
            if event.total is None:
                self._note(event.message)
                return
            label = event.message.split(":", 1)[0] if ":" in event.message else "progress"
            task = self._bar(f"progress:{label}", label[:24], event.total)
            p.update(task, completed=event.done, total=event.total, info=escape(event.message))
        elif isinstance(event, ev.Checkpoint):
            p.console.print(f"checkpoint [bold]{escape(event.name)}[/] → {escape(event.address)}")
        elif isinstance(event, ev.Eval):
            extra = f", format {event.format_rate:.0%}" if event.format_rate is not None else ""
            extra += f", bleed {event.bleed_rate:.0%}" if event.bleed_rate is not None else ""
            p.console.print(
                f"[bold]{escape(event.name)}[/]: {event.correct}/{event.n} correct ({event.accuracy:.0%}){extra}"
                f" → {escape(event.result_path)}"
            )
        elif isinstance(event, ev.Log):
            style = {"warning": "yellow", "error": "red"}.get(event.level, "dim")
            p.console.print(f"[{style}]{escape(event.message)}[/]")


def run_job(verb: str, payload: dict[str, Any], *, raw: bool = False, cwd: Path | None = None) -> int:
    """Run a job child, render its events, return the CLI exit code (0 done, 1 failed, 2 usage, 130 cancelled)."""
    console = console_out()
    renderer = _Renderer(console, verb.replace("-", " ", 1))
    if not raw:
        renderer.start()  # from the first second: the child's imports alone take a while
    interrupted = False
    try:
        job = JobProcess.start(job_command(verb, payload), cwd=cwd or Path.cwd())
        try:
            _follow(job, renderer, raw)
        except KeyboardInterrupt:
            interrupted = True
            renderer.finish()
            console_err().print("[yellow]cancelling… (the job records its last checkpoint)[/]")
            job.cancel()
            for _line in job:  # read to the end: the child still reports how it ended
                pass
    finally:
        renderer.finish()
    outcome = _as_recorded(job.wait(CANCEL_GRACE_S), renderer.run_dir)
    if not raw:
        _print_outcome(console, outcome, renderer)
    return _exit_code(outcome, interrupted)


def _as_recorded(outcome: JobOutcome, run_dir: str | None) -> JobOutcome:
    """A child that died without a last event (killed by `machine jobs cancel` after its grace period) ended
    the way its manifest says, when the canceller recorded it there."""
    if outcome.final is not None or not run_dir:
        return outcome
    from machine_lsp.core import runs

    # The canceller records the end just after the kill: give it a moment (only a child that died unannounced
    # ever waits here).
    deadline = time.monotonic() + RECORD_WAIT_S
    while True:
        try:
            manifest = runs.read_manifest(Path(run_dir))
        except Exception:  # noqa: BLE001 - no readable record: the outcome stays "died without a result"
            return outcome
        if manifest.status != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if manifest.status != "cancelled":
        return outcome
    final = ev.Error(message=manifest.error or "cancelled", kind="cancelled")
    return dataclasses.replace(outcome, final=final)


def _follow(job: JobProcess, renderer: _Renderer, raw: bool) -> None:
    """Every event as a bar or line (or, with raw, every stdout line as it came)."""
    for line in job:
        if raw:
            sys.stdout.write(line.raw.decode("utf-8", "replace"))
            sys.stdout.flush()
        elif line.event is not None:
            renderer.handle(line.event)


def _print_outcome(console: Console, outcome: JobOutcome, renderer: _Renderer) -> None:
    final = outcome.final
    if renderer.run_dir and Path(renderer.run_dir).is_dir():  # only a run that was kept (see jobs.runner)
        console.print(f"[dim]run {escape(renderer.run_id or '')} · {escape(renderer.run_dir)}[/]")
    if isinstance(final, ev.Done):
        console.print(f"[green]✓[/] {escape(final.message)}")
    elif isinstance(final, ev.Error):
        style = "yellow" if final.kind == "cancelled" else "red"
        console_err().print(f"[{style}]✗ {escape(final.message)}[/]")
    else:
        console_err().print(f"[red]✗ the job exited with status {outcome.returncode} without a result[/]")
        for line in outcome.stderr_tail[-15:]:
            console_err().print(f"[dim]{escape(line)}[/]")


def _exit_code(outcome: JobOutcome, interrupted: bool) -> int:
    final, code = outcome.final, outcome.returncode
    if isinstance(final, ev.Done):
        return EXIT_OK
    if isinstance(final, ev.Error):
        return {"usage": EXIT_USAGE, "cancelled": EXIT_CANCELLED}.get(final.kind, EXIT_FAILED)
    return EXIT_CANCELLED if interrupted else (code if code > 0 else EXIT_FAILED)
