"""`machine train sft|smoke|run|eval ...` and `machine jobs`: scaffolds, jobs with progress bars, eval compare.

Long verbs run as the same child process the language server starts (`python -m machine_lsp.jobs VERB`), and
this module renders its JSON-lines events with rich progress bars, so the CLI and the editor share one code path.
Runs on Tinker cost money: without a terminal on stdin they need `--yes`; with one, they ask first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from machine_lsp.core import runs
from machine_lsp.jobs import events as ev
from machine_lsp.scaffold.config import ConfigError, MachineConfig, apply_overrides, load_project_config

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130
CANCEL_GRACE_S = 15.0


def _out() -> Console:
    return Console(soft_wrap=True)


def _err() -> Console:
    return Console(stderr=True, soft_wrap=True)


class Usage(Exception):
    pass


# ------------------------------------------------------------------------------------------------- registration


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=["local", "tinker"], help="override the engine in machine.toml")
    p.add_argument("--model", metavar="M", help="override the base model")
    p.add_argument("--config", metavar="FILE", help="config file (default: ./machine.toml if present)")


def _job_args(p: argparse.ArgumentParser) -> None:
    _engine_args(p)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask before a paid (Tinker) run")
    p.add_argument("--json", action="store_true", help="print the raw job events instead of progress bars")


def register(sub: argparse._SubParsersAction, train_sub: argparse._SubParsersAction) -> None:
    sft = train_sub.add_parser("sft", help="scaffold train_sft.py + machine.toml in the current directory")
    sft.add_argument(
        "file", nargs="?", metavar="FILE", help="training JSONL (default: the store's good rows)"
    )
    sft.add_argument("--engine", choices=["local", "tinker"], default="local")
    sft.add_argument("--model", metavar="M", help="base model (default: the engine's)")
    sft.add_argument("--epochs", type=int, metavar="N")
    sft.add_argument("--steps", type=int, metavar="N", help="cap on optimizer steps")
    sft.add_argument("--lr", type=float, metavar="X", help="learning rate")
    sft.add_argument("--rank", type=int, metavar="R", help="LoRA rank")
    sft.add_argument("--batch-size", type=int, metavar="B")
    sft.add_argument("--save-every", type=int, metavar="N", help="checkpoint every N steps (0: final only)")
    sft.add_argument("--eval-data", metavar="FILE", help="held-out eval JSONL for [eval] data")
    sft.add_argument("--force", action="store_true", help="overwrite train_sft.py / machine.toml")
    sft.set_defaults(func=_sft)

    smoke = train_sub.add_parser(
        "smoke", help="2 real training steps on the configured engine, then one sample"
    )
    smoke.add_argument(
        "--data", metavar="FILE", help="training JSONL (default: machine.toml, else the store)"
    )
    _job_args(smoke)
    smoke.set_defaults(func=_smoke)

    run = train_sub.add_parser("run", help="the configured SFT as a job: progress, checkpoints, loss.png")
    run.add_argument("--resume", metavar="RUN", help="continue a run (id, id prefix, or checkpoint address)")
    run.add_argument("--data", metavar="FILE", help="training JSONL (default: machine.toml, else the store)")
    run.add_argument("--steps", type=int, metavar="N", help="override the step cap")
    run.add_argument("--epochs", type=int, metavar="N")
    run.add_argument("--lr", type=float, metavar="X")
    run.add_argument("--batch-size", type=int, metavar="B")
    run.add_argument("--save-every", type=int, metavar="N")
    _job_args(run)
    run.set_defaults(func=_run)

    ev_parser = train_sub.add_parser(
        "eval", help="held-out evaluation: init, baseline, checkpoint, compare, probe"
    )
    ev_sub = ev_parser.add_subparsers(dest="eval_command", metavar="VERB")
    ev_parser.set_defaults(func=lambda args: _help(ev_parser))

    init = ev_sub.add_parser("init", help="write eval.py (and machine.toml if missing)")
    init.add_argument("--force", action="store_true", help="overwrite eval.py")
    init.set_defaults(func=_eval_init)

    base = ev_sub.add_parser("baseline", help="evaluate the base model -> eval_results/baseline.json")
    base.add_argument("--data", metavar="FILE", help="held-out JSONL (default: [eval] data)")
    base.add_argument("--probe", action="store_true", help="also run the style-bleed probe")
    _eval_common(base)
    base.set_defaults(func=_eval_baseline)

    ck = ev_sub.add_parser("checkpoint", help="evaluate a checkpoint -> eval_results/<name>.json")
    ck.add_argument(
        "path",
        metavar="PATH",
        help="local://RUN/NAME, tinker://RUN/sampler_weights/NAME, a dir, or `latest` (newest training run)",
    )
    ck.add_argument("--data", metavar="FILE", help="held-out JSONL (default: [eval] data)")
    ck.add_argument("--probe", action="store_true", help="also run the style-bleed probe")
    _eval_common(ck)
    ck.set_defaults(func=_eval_checkpoint)

    cmp_ = ev_sub.add_parser("compare", help="compare two eval results (B against A) + chart")
    cmp_.add_argument("a", metavar="A.json")
    cmp_.add_argument("b", metavar="B.json")
    cmp_.add_argument("--rows", type=int, default=20, metavar="N", help="changed rows to list (default 20)")
    cmp_.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp_.add_argument("--no-chart", action="store_true", help="do not write the PNG chart")
    cmp_.set_defaults(func=_eval_compare)

    probe = ev_sub.add_parser("probe", help="style-bleed probe of a checkpoint (or the base model)")
    probe.add_argument(
        "path", nargs="?", metavar="PATH", help="checkpoint address or `latest`; omit for the base model"
    )
    probe.add_argument("--questions", metavar="FILE", help="extra probe questions (one per line, or JSONL)")
    _eval_common(probe)
    probe.set_defaults(func=_eval_probe)

    jobs = sub.add_parser("jobs", help="list runs in .machine/runs, or cancel one")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", metavar="VERB")
    jobs.add_argument("--json", action="store_true", help="print the manifests as JSON")
    jobs.set_defaults(func=_jobs_list)
    jl = jobs_sub.add_parser("list", help="list runs with their status")
    jl.add_argument("--json", action="store_true", help="print the manifests as JSON")
    jl.set_defaults(func=_jobs_list)
    jc = jobs_sub.add_parser("cancel", help="stop a running job (SIGTERM; it records its last checkpoint)")
    jc.add_argument("run", metavar="ID", help="run id (or a unique prefix/suffix)")
    jc.set_defaults(func=_jobs_cancel)


def _eval_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-tokens", type=int, metavar="N", help="tokens per answer (default: [eval] max_tokens)"
    )
    p.add_argument("--format-pattern", metavar="RE", help="the trained answer format (regex)")
    p.add_argument("--grader", choices=["exact", "contains", "regex"], help="override each row's match kind")
    p.add_argument("--out", metavar="FILE", help="result file (default: eval_results/<name>.json)")
    _job_args(p)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _wrap(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except (Usage, ConfigError) as exc:
            _err().print(f"[red]machine:[/] {escape(str(exc))}")
            return EXIT_USAGE

    return run


# ------------------------------------------------------------------------------------------------- scaffolds


@_wrap
def _sft(args: argparse.Namespace) -> int:
    from machine_lsp.scaffold.writer import ScaffoldExists, write_train_scaffold

    cwd = Path.cwd()
    data = None
    if args.file:
        path = Path(args.file)
        full = path if path.is_absolute() else cwd / path
        if not full.is_file():
            raise Usage(f"{args.file}: no such file" if not full.exists() else f"{args.file}: not a file")
        data = str(path) if not path.is_absolute() else str(full)
    eval_data = None
    if args.eval_data:
        if not (cwd / args.eval_data).is_file():
            raise Usage(f"{args.eval_data}: no such file")
        eval_data = args.eval_data
    train = {
        "engine": args.engine,
        "model": args.model,
        "data": data,
        "epochs": args.epochs,
        "steps": args.steps,
        "learning_rate": args.lr,
        "rank": args.rank,
        "batch_size": args.batch_size,
        "save_every": args.save_every,
    }
    config = apply_overrides(MachineConfig(), train, {"data": eval_data})
    command = (
        "machine train sft " + " ".join(sys.argv[3:])
        if sys.argv[1:3] == ["train", "sft"]
        else "machine train sft"
    )
    try:
        written = write_train_scaffold(cwd, config, command=command.strip(), force=args.force)
    except ScaffoldExists as exc:
        raise Usage(str(exc)) from None
    out = _out()
    for path in written:
        out.print(f"wrote [bold]{escape(path.name)}[/]")
    source = data or "the store's good rows"
    out.print(
        f"engine {config.train.engine}, model {config.train.resolved_model()}, data {source}\n"
        f"next: [bold]python train_sft.py --dry-run[/], [bold]machine train smoke[/], [bold]machine train run[/]"
    )
    return EXIT_OK


@_wrap
def _eval_init(args: argparse.Namespace) -> int:
    from machine_lsp.scaffold.config import CONFIG_FILE, render_toml
    from machine_lsp.scaffold.writer import ScaffoldExists, write_eval_scaffold

    cwd = Path.cwd()
    try:
        written = write_eval_scaffold(cwd, command="machine train eval init", force=args.force)
    except ScaffoldExists as exc:
        raise Usage(str(exc)) from None
    if not (cwd / CONFIG_FILE).exists():
        (cwd / CONFIG_FILE).write_text(render_toml(MachineConfig()), encoding="utf-8")
        written.append(cwd / CONFIG_FILE)
    for path in written:
        _out().print(f"wrote [bold]{escape(path.name)}[/]")
    _out().print(
        "next: [bold]machine train eval baseline --data EVAL.jsonl[/] (or python eval.py --data EVAL.jsonl)"
    )
    return EXIT_OK


# ------------------------------------------------------------------------------------------------- jobs


def _resolved_engine(args: argparse.Namespace, checkpoint: str | None = None) -> str:
    if getattr(args, "engine", None):
        return args.engine
    if checkpoint and checkpoint.startswith("tinker://"):
        return "tinker"
    if checkpoint and checkpoint.startswith("local://"):
        return "local"
    config, _ = load_project_config(Path.cwd(), getattr(args, "config", None))
    return config.train.engine


def _confirm_cost(args: argparse.Namespace, engine: str, verb: str, payload: dict[str, Any]) -> None:
    """Tinker runs cost money: say what will run and about how many tokens, and ask (or demand --yes)."""
    if engine != "tinker" or args.yes:
        return
    from machine_lsp.scaffold.estimate import estimate_job

    what = verb.replace("-", " ", 1)
    estimate = estimate_job(verb, Path.cwd(), {k: v for k, v in payload.items() if v is not None})
    detail = f" ({estimate.describe()})" if estimate else ""
    if not sys.stdin.isatty():
        raise Usage(
            f"{what} runs on Tinker and costs money{detail}: pass --yes to confirm (stdin is not a terminal)"
        )
    answer = input(f"{what} runs on Tinker and costs money{detail}. Continue? [y/N] ").strip().lower()
    if answer not in {"y", "yes"}:
        raise Usage("cancelled: nothing was started")


def job_command(verb: str, payload: dict[str, Any]) -> list[str]:
    body = json.dumps({k: v for k, v in payload.items() if v is not None})
    return [sys.executable, "-m", "machine_lsp.jobs", verb, "--args-json", body]


class _Renderer:
    """Turns job events into rich progress bars and lines."""

    def __init__(self, console: Console) -> None:
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
        self.task: TaskID | None = None
        self.kind: str | None = None

    def _bar(self, kind: str, description: str, total: int | None) -> TaskID:
        if self.task is None or self.kind != kind:
            if self.task is not None:
                self.progress.stop_task(self.task)
            self.task = self.progress.add_task(description, total=total, info="")
            self.kind = kind
        return self.task

    def handle(self, event: ev.Event) -> None:
        p = self.progress
        if isinstance(event, ev.Start):
            p.console.print(f"[dim]{event.job} · run {event.run_id}[/]")
        elif isinstance(event, ev.Step):
            task = self._bar("step", "train", event.total)
            eta = f" · eta {event.eta_seconds:.0f}s" if event.eta_seconds is not None else ""
            info = f"loss {event.loss:.4f} · lr {event.lr:.2g} · {event.tokens} tok · {event.seconds_per_step:.2f} s/step{eta}"
            p.update(task, completed=event.step, total=event.total, info=info)
            if event.total is not None and event.total <= 50:
                p.console.print(f"[dim]step {event.step}/{event.total} loss {event.loss:.4f}[/]")
        elif isinstance(event, ev.Progress):
            if event.total is None:
                p.console.print(f"[dim]{escape(event.message)}[/]")
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
    env = dict(os.environ)
    env.setdefault("TINKER_TELEMETRY", "0")
    proc = subprocess.Popen(
        job_command(verb, payload),
        cwd=cwd or Path.cwd(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # Ctrl-C is forwarded as one SIGTERM, not delivered twice
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr_tail: deque[str] = deque(maxlen=30)
    err_stream = proc.stderr

    def drain() -> None:
        for line in iter(err_stream.readline, b""):
            stderr_tail.append(line.decode("utf-8", "replace").rstrip())

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    console = _out()
    renderer = _Renderer(console)
    final: ev.Event | None = None
    cancelled = False
    try:
        with contextlib.ExitStack() as stack:
            if not raw:
                stack.enter_context(renderer.progress)
            for line in iter(proc.stdout.readline, b""):
                if raw:
                    sys.stdout.write(line.decode("utf-8", "replace"))
                    sys.stdout.flush()
                try:
                    event = ev.decode_event(line)
                except ev.EventDecodeError:
                    continue
                if isinstance(event, ev.Done | ev.Error):
                    final = event
                if not raw:
                    renderer.handle(event)
    except KeyboardInterrupt:
        cancelled = True
        _err().print("[yellow]cancelling… (the job records its last checkpoint)[/]")
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        for line in iter(proc.stdout.readline, b""):
            with contextlib.suppress(ev.EventDecodeError):
                event = ev.decode_event(line)
                if isinstance(event, ev.Done | ev.Error):
                    final = event
    try:
        code = proc.wait(timeout=CANCEL_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    drainer.join(timeout=2)
    if raw:
        return _exit_code(code, final, cancelled)
    if isinstance(final, ev.Done):
        console.print(f"[green]✓[/] {escape(final.message)}")
    elif isinstance(final, ev.Error):
        style = "yellow" if final.kind == "cancelled" else "red"
        _err().print(f"[{style}]✗ {escape(final.message)}[/]")
    else:
        _err().print(f"[red]✗ the job exited with status {code} without a result[/]")
        for line in list(stderr_tail)[-15:]:
            _err().print(f"[dim]{escape(line)}[/]")
    return _exit_code(code, final, cancelled)


def _exit_code(code: int, final: ev.Event | None, cancelled: bool) -> int:
    if isinstance(final, ev.Done):
        return EXIT_OK
    if isinstance(final, ev.Error):
        return {"usage": EXIT_USAGE, "cancelled": EXIT_CANCELLED}.get(final.kind, EXIT_FAILED)
    return EXIT_CANCELLED if cancelled else (code if code > 0 else EXIT_FAILED)


def _train_payload(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "config": args.config,
        "engine": args.engine,
        "model": args.model,
        "data": getattr(args, "data", None),
        "steps": getattr(args, "steps", None),
        "epochs": getattr(args, "epochs", None),
        "learning_rate": getattr(args, "lr", None),
        "batch_size": getattr(args, "batch_size", None),
        "save_every": getattr(args, "save_every", None),
        "resume": getattr(args, "resume", None),
    }


@_wrap
def _smoke(args: argparse.Namespace) -> int:
    payload = _train_payload(args)
    _confirm_cost(args, _resolved_engine(args), "train-smoke", payload)
    return run_job("train-smoke", payload, raw=args.json)


@_wrap
def _run(args: argparse.Namespace) -> int:
    payload = _train_payload(args)
    _confirm_cost(args, _resolved_engine(args), "train-run", payload)
    return run_job("train-run", payload, raw=args.json)


def _eval_payload(args: argparse.Namespace, checkpoint: str | None) -> dict[str, Any]:
    return {
        "config": args.config,
        "engine": args.engine,
        "model": args.model,
        "data": getattr(args, "data", None),
        "checkpoint": checkpoint,
        "probe": getattr(args, "probe", False),
        "probe_questions": getattr(args, "questions", None),
        "max_tokens": args.max_tokens,
        "format_pattern": args.format_pattern,
        "grader": args.grader,
        "out": args.out,
    }


def _check_file(path: str | None, what: str) -> None:
    if path and not Path(path).is_file():
        raise Usage(f"{path}: no such {what} file")


@_wrap
def _eval_baseline(args: argparse.Namespace) -> int:
    _check_file(args.data, "eval data")
    payload = _eval_payload(args, None)
    _confirm_cost(args, _resolved_engine(args), "eval-baseline", payload)
    return run_job("eval-baseline", payload, raw=args.json)


@_wrap
def _eval_checkpoint(args: argparse.Namespace) -> int:
    _check_file(args.data, "eval data")
    payload = _eval_payload(args, args.path)
    _confirm_cost(args, _resolved_engine(args, args.path), "eval-checkpoint", payload)
    return run_job("eval-checkpoint", payload, raw=args.json)


@_wrap
def _eval_probe(args: argparse.Namespace) -> int:
    _check_file(args.questions, "probe questions")
    payload = _eval_payload(args, args.path)
    _confirm_cost(args, _resolved_engine(args, args.path), "eval-probe", payload)
    return run_job("eval-probe", payload, raw=args.json)


# ------------------------------------------------------------------------------------------------- compare


@_wrap
def _eval_compare(args: argparse.Namespace) -> int:
    import msgspec

    from machine_lsp.core import evals

    try:
        a = evals.load_result(Path(args.a))
        b = evals.load_result(Path(args.b))
        c = evals.compare(a, b)
    except evals.EvalError as exc:
        raise Usage(str(exc)) from None
    chart: Path | None = None
    if not args.no_chart:
        from machine_lsp.jobs.charts import compare_chart

        chart = Path(args.b).parent / f"compare-{Path(args.a).stem}-vs-{Path(args.b).stem}.png"
        compare_chart(c, chart)
    if args.json:
        payload = msgspec.to_builtins(c)
        payload["chart"] = str(chart) if chart else None
        print(json.dumps(payload, indent=2))
        return EXIT_OK
    out = _out()
    if not c.same_data:
        out.print("[yellow]warning: the two results were not run on the same data file (checksums differ)[/]")
    table = Table(title=f"{escape(c.a_name)} → {escape(c.b_name)}  ({c.n} paired rows)")
    table.add_column("")
    table.add_column(escape(c.a_name), justify="right")
    table.add_column(escape(c.b_name), justify="right")
    table.add_column("Δ", justify="right")
    table.add_row(
        "accuracy",
        f"{c.a_accuracy:.1%} ({c.a_correct})",
        f"{c.b_accuracy:.1%} ({c.b_correct})",
        f"{c.delta:+.1%}",
    )
    table.add_row(
        "format rate",
        f"{c.a_format_rate:.1%}",
        f"{c.b_format_rate:.1%}",
        f"{c.b_format_rate - c.a_format_rate:+.1%}",
    )
    if c.a_bleed_rate is not None or c.b_bleed_rate is not None:
        fa = f"{c.a_bleed_rate:.1%}" if c.a_bleed_rate is not None else "–"
        fb = f"{c.b_bleed_rate:.1%}" if c.b_bleed_rate is not None else "–"
        table.add_row("bleed rate", fa, fb, "")
    out.print(table)
    out.print(
        f"gained {c.gained} (wrong → right), lost {c.lost} (right → wrong), both right {c.both_correct}, "
        f"both wrong {c.both_wrong}; exact McNemar p = {c.mcnemar_p:.4g}"
    )
    if c.only_in_a or c.only_in_b:
        out.print(f"[yellow]unpaired rows: {len(c.only_in_a)} only in A, {len(c.only_in_b)} only in B[/]")
    if c.changed:
        rows = Table(title=f"changed rows ({len(c.changed)})")
        for col in ("id", "prompt", "expected", escape(c.a_name), escape(c.b_name)):
            rows.add_column(col, overflow="fold")
        for r in c.changed[: args.rows]:
            mark_a = "✓" if r.a_correct else "✗"
            mark_b = "✓" if r.b_correct else "✗"
            rows.add_row(
                escape(r.id),
                escape(r.prompt[:60]),
                escape(r.expected),
                f"{mark_a} {escape(r.a_output[:40])}",
                f"{mark_b} {escape(r.b_output[:40])}",
            )
        out.print(rows)
    if chart:
        out.print(f"chart: {escape(str(chart))}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------------- jobs list/cancel


def _runs_dir() -> Path:
    from machine_lsp.core.store import Store

    return Store.open(Path.cwd()).runs_dir


def _jobs_list(args: argparse.Namespace) -> int:
    try:
        items = runs.list_runs(_runs_dir())
    except OSError as exc:  # the runs dir is a symlink or not a directory: never followed
        _err().print(f"[red]machine:[/] store: {escape(str(_runs_dir()))} {escape(exc.strerror or str(exc))}")
        return 3
    if getattr(args, "json", False):
        import msgspec

        data = []
        for run_dir, manifest in items:
            entry = (
                msgspec.to_builtins(manifest) if manifest else {"id": run_dir.name, "status": "unreadable"}
            )
            if manifest:
                entry["effective_status"] = runs.effective_status(manifest)
            data.append(entry)
        print(json.dumps(data, indent=2))
        return EXIT_OK
    out = _out()
    if not items:
        out.print(f"no runs yet in {escape(str(_runs_dir()))}")
        return EXIT_OK
    table = Table(title=f"runs in {escape(str(_runs_dir()))}")
    for col in ("id", "job", "status", "engine", "steps", "last checkpoint / result"):
        table.add_column(col, overflow="fold")
    colors = {"done": "green", "running": "blue", "failed": "red", "cancelled": "yellow", "lost": "red"}
    for run_dir, m in items:
        if m is None:
            table.add_row(escape(run_dir.name), "?", "[red]unreadable[/]", "", "", "")
            continue
        status = runs.effective_status(m)
        detail = m.last_checkpoint or ""
        if m.error:
            detail = m.error
        elif m.result and "result_path" in m.result:
            detail = str(m.result["result_path"])
        table.add_row(
            escape(m.id),
            escape(m.job),
            f"[{colors.get(status, 'white')}]{status}[/]",
            m.engine or "",
            str(m.steps_done) if m.steps_done else "",
            escape(detail[:80]),
        )
    out.print(table)
    return EXIT_OK


def _jobs_cancel(args: argparse.Namespace) -> int:
    runs_dir = _runs_dir()
    try:
        run_dir = runs.find_run(runs_dir, args.run)
        manifest = runs.read_manifest(run_dir)
    except (LookupError, OSError, ValueError) as exc:
        _err().print(f"[red]machine:[/] {escape(str(exc))}")
        return EXIT_USAGE
    if manifest.status != "running":
        _out().print(f"{manifest.id} is not running (status {manifest.status})")
        return EXIT_OK
    if not runs.job_alive(manifest):  # the same liveness rule as `jobs list` (core.runs.effective_status)
        _out().print(
            f"{manifest.id}: its process {manifest.pid} is gone (status {runs.effective_status(manifest)})"
        )
        return EXIT_FAILED
    os.kill(manifest.pid, signal.SIGTERM)
    deadline = time.monotonic() + CANCEL_GRACE_S
    while time.monotonic() < deadline:
        time.sleep(0.2)
        with contextlib.suppress(Exception):
            manifest = runs.read_manifest(run_dir)
        if manifest.status != "running":
            break
    if manifest.status == "running":
        _err().print(
            f"[yellow]{manifest.id} did not stop within {CANCEL_GRACE_S:.0f} s (pid {manifest.pid})[/]"
        )
        return EXIT_FAILED
    last = f"; last checkpoint {manifest.last_checkpoint}" if manifest.last_checkpoint else ""
    _out().print(f"{manifest.id}: {manifest.status}{last}")
    return EXIT_OK
