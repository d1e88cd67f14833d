"""The eval jobs: `eval-baseline`, `eval-checkpoint` (optionally with the bleed probe) and `eval-probe`.

Results go to `eval_results/` in the project directory (`baseline.json`, `<checkpoint name>.json`,
`probe-<name>.json`) in the one schema of `machine_lsp.core.evals`, and into the run's manifest.
The engine follows the checkpoint's scheme (`local://` -> local, `tinker://` -> tinker) unless overridden.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Literal

import msgspec

from machine_lsp.core import evals, runs
from machine_lsp.engines.registry import engine_for_address
from machine_lsp.jobs import events as ev
from machine_lsp.jobs.common import EngineArgs, make_engine, project_config, served_model
from machine_lsp.jobs.data import resolve
from machine_lsp.jobs.runner import JobContext, JobError

RESULTS_DIR = "eval_results"
CHUNK = 16


class EvalArgs(EngineArgs, kw_only=True):
    data: str | None = None
    checkpoint: str | None = None
    name: str | None = None
    out: str | None = None
    probe: bool = False
    probe_questions: str | None = None
    format_pattern: str | None = None
    bleed_pattern: str | None = None
    max_tokens: int | None = None
    grader: Literal["exact", "contains", "regex"] | None = None


def checkpoint_name(address: str) -> str:
    """`local://run/step-60` -> `step-60`; `tinker://run/sampler_weights/final` -> `final`; a path -> its name."""
    name = address.rstrip("/").rsplit("/", 1)[-1]
    return name or "checkpoint"


def _check_result_name(name: str) -> str:
    """The one name check of core.runs: a given result name becomes eval_results/<name>.json, never a path
    outside (a name derived from a checkpoint address is its last path component already)."""
    try:
        return runs.check_name(name, "eval result name")
    except ValueError as exc:
        raise JobError(str(exc), kind="usage") from None


def _engine_for(args: EvalArgs, configured: str) -> str:
    if args.engine:
        return args.engine
    return engine_for_address(args.checkpoint) or configured


def _resolve_latest(ctx: JobContext, args: EvalArgs) -> None:
    """`latest` -> the newest training run's last checkpoint, before anything reads the address."""
    if args.checkpoint != runs.LATEST:
        return
    from machine_lsp.core.store import Store

    try:
        args.checkpoint = runs.latest_checkpoint(Store.open(ctx.cwd).runs_dir)
    except LookupError as exc:
        raise JobError(str(exc), kind="input") from None
    ctx.log(f"latest checkpoint: {args.checkpoint}")


def _setup(ctx: JobContext, args: EvalArgs) -> tuple[Any, str, str, str | None]:
    """(config, engine name, model, checkpoint)."""
    _resolve_latest(ctx, args)

    evals_over = {
        "data": args.data,
        "format_pattern": args.format_pattern,
        "bleed_pattern": args.bleed_pattern,
        "probe_questions": args.probe_questions,
        "max_tokens": args.max_tokens,
        "grader": args.grader,
    }
    cfg = project_config(ctx, args.config, {"model": args.model, "threads": args.threads}, evals_over)
    engine_name = _engine_for(args, cfg.train.engine)
    if engine_name != cfg.train.engine:
        cfg = msgspec.structs.replace(cfg, train=msgspec.structs.replace(cfg.train, engine=engine_name))
    model = cfg.train.resolved_model()
    ctx.update(engine=engine_name, model=model, config=msgspec.to_builtins(cfg))
    for pattern, what in (
        (cfg.eval.format_pattern, "format pattern"),
        (cfg.eval.bleed_pattern, "bleed pattern"),
    ):
        if pattern is not None:
            try:
                evals.compile_pattern(pattern, what)
            except evals.EvalError as exc:
                raise JobError(str(exc)) from None
    return cfg, engine_name, model, args.checkpoint


def _sampler(
    ctx: JobContext, engine_name: str, threads: int | None, model: str, checkpoint: str | None
) -> tuple[Any, str]:
    """(the sampler, the model it samples: a self-hosted Tinker server's own in place of the hosted default)."""
    from machine_lsp.engines.base import EngineError

    engine = make_engine(ctx, engine_name, threads)
    model = served_model(ctx, engine, model)
    what = checkpoint or f"base model {model}"
    ctx.emit(ev.Progress(done=0, total=None, message=f"loading {what}"))
    try:
        return engine.sampler_for(model, checkpoint), model
    except EngineError as exc:
        raise JobError(str(exc), kind="engine") from None


def _sample_all(ctx: JobContext, sampler: Any, prompts: list[Any], max_tokens: int, label: str) -> list[str]:
    from machine_lsp.engines.base import EngineError

    outputs: list[str] = []
    total = len(prompts)
    # one progress event per engine batch (the local engine samples up to sample_batch_size prompts at once)
    chunk = int(getattr(getattr(sampler, "engine", None), "sample_batch_size", CHUNK) or CHUNK)
    ctx.progress(0, total, f"{label}: 0/{total}", force=True)
    for start in range(0, total, chunk):
        try:
            outputs.extend(sampler.sample(prompts[start : start + chunk], max_tokens))
        except EngineError as exc:
            raise JobError(f"sampling: {exc}", kind="engine") from None
        ctx.progress(len(outputs), total, f"{label}: {len(outputs)}/{total}", force=True)
    return outputs


def write_file(ctx: JobContext, out: Path, payload: bytes) -> str:
    from machine_lsp.core.safe_files import write_output

    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_output(out, payload)  # the `--out` rule: a random O_EXCL temp, never a planted name
    except OSError as exc:
        raise JobError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        return str(out.relative_to(ctx.cwd))
    except ValueError:
        return str(out)


def _probe(ctx: JobContext, cfg: Any, sampler: Any) -> evals.ProbeResult:
    extra: list[str] = []
    if cfg.eval.probe_questions:
        try:
            extra = evals.load_probe_questions(resolve(ctx.cwd, cfg.eval.probe_questions))
        except evals.EvalError as exc:
            raise JobError(str(exc)) from None
    questions = evals.probe_prompts(extra)
    n_builtin = len(evals.probe_prompts())
    outputs = _sample_all(
        ctx, sampler, [evals.probe_messages(q) for q in questions], cfg.eval.max_tokens, "bleed probe"
    )
    pattern = cfg.eval.bleed_pattern or evals.default_bleed_pattern(cfg.eval.format_pattern)
    return evals.score_probe(
        questions, outputs, bleed_pattern=pattern, n_builtin=min(n_builtin, len(questions))
    )


def _evaluate(ctx: JobContext, args: EvalArgs, *, name: str, default_out: str) -> tuple[dict[str, Any], str]:
    if args.name is not None:
        _check_result_name(args.name)
    started = time.perf_counter()
    cfg, engine_name, model, checkpoint = _setup(ctx, args)
    data_path, sha, cases = _eval_cases(ctx, cfg)

    sampler, model = _sampler(ctx, engine_name, cfg.train.threads, model, checkpoint)
    loaded = time.perf_counter()
    outputs = _sample_all(ctx, sampler, [c.messages for c in cases], cfg.eval.max_tokens, name)
    sampled = time.perf_counter()
    try:
        rows = evals.score_rows(
            cases, outputs, format_pattern=cfg.eval.format_pattern, grader=cfg.eval.grader
        )
    except evals.EvalError as exc:
        raise JobError(str(exc)) from None
    probe = _probe(ctx, cfg, sampler) if args.probe else None
    done = time.perf_counter()
    timings = evals.Timings.measured(started, loaded, sampled, done, len(cases))
    result = evals.build_result(
        rows,
        name=name,
        model=model,
        checkpoint=checkpoint,
        engine=engine_name,
        data_path=str(data_path),
        data_sha256=sha,
        format_pattern=cfg.eval.format_pattern,
        timings=timings,
        created_at=runs.now_iso(),
        max_tokens=cfg.eval.max_tokens,
        probe=probe,
        run_id=ctx.run_id,
    )
    rel = write_file(ctx, resolve(ctx.cwd, args.out or default_out), evals.encode_result(result))
    return _report_eval(ctx, result, probe, rel)


def _eval_cases(ctx: JobContext, cfg: Any) -> tuple[Path, str, list[evals.EvalCase]]:
    """The held-out rows ([eval] data), recorded in the manifest with their checksum."""
    if not cfg.eval.data:
        raise JobError("no eval data: pass --data FILE (held-out rows) or set [eval] data in machine.toml")
    data_path = resolve(ctx.cwd, cfg.eval.data)
    try:
        cases = evals.load_cases(data_path)
    except evals.EvalError as exc:
        raise JobError(str(exc)) from None
    sha = runs.sha256_file(data_path)
    ctx.add_data(
        runs.DataSnapshot(
            role="eval", source=str(data_path), path=str(data_path), sha256=sha, rows=len(cases)
        )
    )
    return data_path, sha, cases


def _report_eval(
    ctx: JobContext, result: evals.EvalResult, probe: evals.ProbeResult | None, rel: str
) -> tuple[dict[str, Any], str]:
    """The `eval` event, and the job's result summary and message."""
    name = result.name
    ctx.emit(
        ev.Eval(
            name=name,
            accuracy=result.accuracy,
            correct=result.correct,
            n=result.n,
            result_path=rel,
            format_rate=result.format_rate,
            bleed_rate=probe.bleed_rate if probe else None,
        )
    )
    summary = {
        "name": name,
        "result_path": rel,
        "accuracy": result.accuracy,
        "correct": result.correct,
        "n": result.n,
        "format_rate": result.format_rate,
        "bleed_rate": probe.bleed_rate if probe else None,
        "checkpoint": result.checkpoint,
        "engine": result.engine,
        "model": result.model,
        "seconds": result.timings.total_seconds,
    }
    msg = f"{name}: {result.correct}/{result.n} correct ({result.accuracy:.0%}), format {result.format_rate:.0%}"
    if probe:
        msg += f", bleed {probe.bled}/{probe.n}"
    return summary, f"{msg} -> {rel}"


def eval_baseline(ctx: JobContext, args: EvalArgs) -> tuple[dict[str, Any], str]:
    if args.checkpoint:
        raise JobError(
            "eval-baseline evaluates the base model: use eval-checkpoint for a checkpoint", kind="usage"
        )
    name = args.name or "baseline"
    return _evaluate(ctx, args, name=name, default_out=f"{RESULTS_DIR}/{name}.json")


def eval_checkpoint(ctx: JobContext, args: EvalArgs) -> tuple[dict[str, Any], str]:
    if not args.checkpoint:
        raise JobError(
            "eval-checkpoint needs a checkpoint (local://RUN/NAME, tinker://..., or latest)", kind="usage"
        )
    _resolve_latest(ctx, args)
    name = args.name or checkpoint_name(args.checkpoint)
    return _evaluate(ctx, args, name=name, default_out=f"{RESULTS_DIR}/{name}.json")


def eval_probe(ctx: JobContext, args: EvalArgs) -> tuple[dict[str, Any], str]:
    if args.name is not None:
        _check_result_name(args.name)
    started = time.perf_counter()
    cfg, engine_name, model, checkpoint = _setup(ctx, args)
    name = args.name or (checkpoint_name(checkpoint) if checkpoint else "baseline")
    sampler, model = _sampler(ctx, engine_name, cfg.train.threads, model, checkpoint)
    loaded = time.perf_counter()
    probe = _probe(ctx, cfg, sampler)
    done = time.perf_counter()
    report = evals.ProbeReport(
        name=name,
        model=model,
        checkpoint=checkpoint,
        engine=engine_name,
        probe=probe,
        timings=evals.Timings.measured(started, loaded, done, done, probe.n),
        created_at=runs.now_iso(),
        max_tokens=cfg.eval.max_tokens,
        run_id=ctx.run_id,
    )
    out = resolve(ctx.cwd, args.out or f"{RESULTS_DIR}/probe-{name}.json")
    rel = write_file(ctx, out, evals.encode_result(report))
    bled = [r for r in probe.rows if r.bleeds]
    summary = {
        "name": name,
        "result_path": rel,
        "n": probe.n,
        "bled": probe.bled,
        "bleed_rate": probe.bleed_rate,
        "bleed_pattern": probe.bleed_pattern,
        "examples": [{"question": r.question, "output": r.output} for r in bled[:5]],
        "checkpoint": checkpoint,
        "engine": engine_name,
        "model": model,
    }
    rate = f"{probe.bleed_rate:.0%}" if not math.isnan(probe.bleed_rate) else "n/a"
    return (
        summary,
        f"bleed probe {name}: {probe.bled}/{probe.n} answers took the trained format ({rate}) -> {rel}",
    )
