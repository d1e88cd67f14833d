"""The eval gate at the end of `train-run`: hold rows out before training, evaluate after, promote or refuse.

Before training (`hold_out`): the held-out rows are `[eval] data` (refused when it shares a row with the training
data), else a deterministic split of the training rows by session (core.gate.holdout_split; the trained rows and
the held-out ones are snapshotted in the run dir as data/train.jsonl and data/heldout.jsonl). Too few rows: the
gate is skipped and says why. After the final checkpoint (`run_gate`): the candidate and the reference (the
promoted checkpoint, else the base model) answer the held-out rows, the bleed probe and the tool probe; the
verdict (core.gate.decide) goes into the manifest as `gate`, and a passing checkpoint is recorded as promoted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core import evals, gate, promotions, runs
from machine_lsp.core.eval_split import eval_key, row_eval_key
from machine_lsp.core.schema import TrainingRow, encode, encode_training_row, text_of
from machine_lsp.core.tool_probes import probe_conversations
from machine_lsp.core.trained_in import row_key
from machine_lsp.jobs.data import resolve
from machine_lsp.jobs.greedy_cache import AnswerCache
from machine_lsp.jobs.phase_clock import PhaseClock
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.scaffold.config import MachineConfig

MAX_ANSWER_TOKENS = 128  # a held-out answer is sampled up to its own length (estimated), within this bound
# A probe only asks how an answer starts (a `<tool_call>` block, the trained format's prefix): a few tokens tell.
TOOL_PROBE_TOKENS = 16
BLEED_PROBE_TOKENS = 16


class HeldOut(msgspec.Struct, kw_only=True):
    cases: list[evals.EvalCase] = msgspec.field(default_factory=list)
    tools: list[Any] = msgspec.field(default_factory=list)  # each case's OpenAI `tools` (or None)
    source: str = ""
    skip: str | None = None  # why the gate will not run
    split: dict[str, Any] | None = None
    # the tagged rows' distinct system prompts and `tools`: the bleed probe is asked inside each of them too
    contexts: list[evals.ProbeContext] = msgspec.field(default_factory=list)


Labelled = list[tuple[str, TrainingRow]]


def hold_out(
    ctx: JobContext, config: MachineConfig, labelled: Labelled, snapshot: runs.DataSnapshot
) -> tuple[Labelled, runs.DataSnapshot, HeldOut]:
    """The rows to train on, their snapshot, and the held-out set (or why there is none)."""
    rows, snapshot, held = _hold_out(ctx, config, labelled, snapshot)
    held.contexts = evals.distinct_contexts(
        evals.row_context(row.messages, row.extra.get("tools")) for _where, row in labelled
    )
    return rows, snapshot, held


def _hold_out(
    ctx: JobContext, config: MachineConfig, labelled: Labelled, snapshot: runs.DataSnapshot
) -> tuple[Labelled, runs.DataSnapshot, HeldOut]:
    if not config.gate.enabled:
        return labelled, snapshot, HeldOut(skip="the gate is off ([gate] enabled = false)")
    if config.eval.data:
        given = _given_eval_set(ctx, config.eval.data, labelled)
        given.skip = gate.too_few_held_out(
            len(given.cases), config.gate.min_eval_rows, Path(config.eval.data).name
        )
        return labelled, snapshot, given
    split = gate.holdout_split(
        _session_keys(ctx, labelled, snapshot),
        min_rows=config.gate.min_eval_rows,
        fraction=config.gate.eval_fraction,
    )
    if isinstance(split, str):
        return labelled, snapshot, HeldOut(skip=split)
    train = [labelled[i] for i in split.train]
    held = [labelled[i] for i in split.held_out]
    cases = [
        evals.EvalCase(
            id=f"heldout-{n}", messages=list(row.messages[:-1]), expected=text_of(row.messages[-1])
        )
        for n, (_where, row) in enumerate(held, start=1)
    ]
    snapshot = _snapshot(ctx, train, held, snapshot)
    info = msgspec.to_builtins(split) | {"held_out_rows": [where for where, _row in held]}
    ctx.log(
        f"gate: {len(held)} of {len(labelled)} rows held out by {split.by}"
        + (f" ({split.note})" if split.note else "")
        + f"; training on {len(train)}"
    )
    tools = [row.extra.get("tools") for _where, row in held]
    source = (
        "held-out tagged rows"
        if snapshot.source == "store"
        else f"rows held out of {Path(snapshot.source).name}"
    )
    return train, snapshot, HeldOut(cases=cases, tools=tools, source=source, split=info)


def _given_eval_set(ctx: JobContext, data: str, labelled: Labelled) -> HeldOut:
    path = resolve(ctx.cwd, data)
    try:
        cases = evals.load_cases(path)
    except evals.EvalError as exc:
        raise JobError(str(exc)) from None
    trained = {row_eval_key(row): w for w, row in labelled}
    for case in cases:
        where = trained.get(eval_key(case.messages, case.expected))
        if where is not None:
            raise JobError(
                f"{path.name}: eval row {case.id!r} is also a training row ({where}); a held-out set must "
                "not share rows with training"
            )
    return HeldOut(cases=cases, tools=[None] * len(cases), source=str(path))


def _session_keys(ctx: JobContext, labelled: Labelled, snapshot: runs.DataSnapshot) -> list[str]:
    """Each row's session: the tagged turn's session id, else its log; rows of a file are their own sessions."""
    if snapshot.source != "store":
        return [where for where, _row in labelled]
    from machine_lsp.core.store import Store

    by_conversation: dict[bytes, str] = {}
    for record in Store.open(ctx.cwd).records():
        source = record.source
        by_conversation.setdefault(encode(record.messages), source.session_id or source.uri or record.id)
    return [by_conversation.get(encode(row.messages), where) for where, row in labelled]


def _snapshot(
    ctx: JobContext, train: Labelled, held: Labelled, original: runs.DataSnapshot
) -> runs.DataSnapshot:
    data_dir = ctx.run_dir / "data"
    data_dir.mkdir(exist_ok=True)
    payloads = {}
    for name, rows in (("train.jsonl", train), ("heldout.jsonl", held)):
        payloads[name] = b"".join(encode_training_row(row) + b"\n" for _where, row in rows)
        (data_dir / name).write_bytes(payloads[name])
    ctx.add_data(
        runs.DataSnapshot(
            role="eval",
            source=f"{original.source} (held out)",
            path=str(data_dir / "heldout.jsonl"),
            sha256=runs.sha256_bytes(payloads["heldout.jsonl"]),
            rows=len(held),
        )
    )
    return runs.DataSnapshot(
        role="train",
        source=original.source,
        path=str(data_dir / "train.jsonl"),
        sha256=runs.sha256_bytes(payloads["train.jsonl"]),
        rows=len(train),
        row_keys=[row_key(row.messages) for _where, row in train],  # the held-out rows did not train
    )


# -- after training ---------------------------------------------------------------------------------------------


def run_gate(
    ctx: JobContext,
    config: MachineConfig,
    engine: Any,
    trainer: Any,
    model: str,
    held: HeldOut,
    clock: PhaseClock | None = None,
    answers: AnswerCache | None = None,
) -> gate.GateResult:
    """Evaluate the final checkpoint against the reference, record the verdict (and a promotion); each stage's
    seconds go to `clock`, and the answers of unchanged models come from (and go to) the greedy-answer cache."""
    from machine_lsp.core.store import Store

    clock = clock or PhaseClock()
    machine_dir = Store.open(ctx.cwd).root
    answers = answers or AnswerCache(machine_dir)
    candidate = ctx.manifest.last_checkpoint
    if held.skip is not None or candidate is None:
        result = gate.skipped(held.skip or "the run saved no checkpoint")
    else:
        try:
            result = _evaluate(ctx, config, (engine, trainer, model), held, answers, clock)
        except JobError as exc:  # the checkpoint is trained and saved: a failed evaluation must not undo that
            result = gate.skipped(f"the evaluation failed: {exc}")
    if result.promoted and candidate is not None:
        try:
            with clock.phase("promotion"):
                promotions.promote(machine_dir, candidate, by="gate", reason=result.reason, run_id=ctx.run_id)
        except promotions.PromotionError as exc:
            result = gate.GateResult(promoted=False, reason=f"not promoted: {exc}", metrics=result.metrics)
    ctx.update(gate=msgspec.to_builtins(result))
    ctx.save_manifest()
    ctx.log(f"gate: {result.reason}", "info" if result.promoted or result.skipped else "warning")
    return result


def _evaluate(
    ctx: JobContext,
    config: MachineConfig,
    run: tuple[Any, Any, str],
    held: HeldOut,
    answers: AnswerCache,
    clock: PhaseClock,
) -> gate.GateResult:
    _engine, trainer, _model = run
    metrics = gate.GateMetrics(reference="base", eval_rows=len(held.cases), eval_source=held.source)
    with clock.phase("gate: reference model"):
        reference = _reference_sampler(run, answers, metrics)
    candidate = answers.candidate(trainer.sampler(), ctx.manifest.last_checkpoint)
    samplers = (("reference", reference), ("candidate", candidate))
    ref_rows, cand_rows = (
        _held_out_rows(ctx, config, held, label, sampler, clock) for label, sampler in samplers
    )
    metrics.gained, metrics.lost = gate.paired_counts(
        [r.correct for r in ref_rows], [r.correct for r in cand_rows]
    )
    metrics.reference_correct = sum(r.correct for r in ref_rows)
    metrics.candidate_correct = sum(r.correct for r in cand_rows)
    metrics.reference_format_rate = sum(r.format_ok for r in ref_rows) / len(ref_rows)
    metrics.candidate_format_rate = sum(r.format_ok for r in cand_rows) / len(cand_rows)
    metrics.contexts = len(held.contexts)
    metrics.context_probes = len(evals.context_probes(evals.probe_prompts(), held.contexts))
    for label, sampler in samplers:
        with clock.phase(f"gate: bleed probe, {label}"):
            rate, in_context = _bleed(ctx, config, sampler, label, held.contexts)
        setattr(metrics, f"{label}_bleed_rate", rate)
        setattr(metrics, f"{label}_context_bleed_rate", in_context)
    _tool_probe(ctx, reference, candidate, metrics, clock)
    bounds = gate.GateBounds(
        alpha=config.gate.alpha,
        max_bleed=config.gate.max_bleed,
        min_tool_retention=config.gate.min_tool_retention,
    )
    return gate.decide(metrics, bounds)


def _held_out_rows(
    ctx: JobContext, config: MachineConfig, held: HeldOut, label: str, sampler: Any, clock: PhaseClock
) -> list[Any]:
    """One side's graded answers to the held-out rows."""
    max_tokens = _answer_tokens(held.cases, config.eval.max_tokens)
    ctx.progress(0, None, f"gate: {label} answers {len(held.cases)} held-out rows", force=True)
    with clock.phase(f"gate: held-out rows, {label}"):
        outputs = _answers(
            sampler, [(c.messages, t) for c, t in zip(held.cases, held.tools, strict=True)], max_tokens
        )
    try:
        return evals.score_rows(
            held.cases, outputs, format_pattern=config.eval.format_pattern, grader=config.eval.grader
        )
    except evals.EvalError as exc:
        raise JobError(str(exc)) from None


def _reference_sampler(run: tuple[Any, Any, str], answers: AnswerCache, metrics: gate.GateMetrics) -> Any:
    """The promoted checkpoint's sampler, else the base model's (the trainer's own weights, adapter off); both
    behind the greedy-answer cache (a promoted checkpoint loads only for answers it has not given yet)."""
    from machine_lsp.engines.base import EngineError

    engine, trainer, model = run
    try:
        promoted = promotions.read_log(answers.machine_dir).current()
    except promotions.PromotionError as exc:
        metrics.notes.append(f"promotions record unreadable ({exc}): compared with the base model")
        promoted = None
    if promoted and promoted != "base":
        try:
            template = trainer.sampler() if hasattr(trainer, "sampler") else None
            cached = answers.checkpoint(engine, model, promoted, template) if template else None
            sampler = cached or engine.sampler_for(model, promoted)
            metrics.reference = promoted
            return sampler
        except EngineError as exc:
            metrics.notes.append(f"the promoted {promoted} cannot load ({exc}): compared with the base model")
    if hasattr(trainer, "base_sampler"):
        return answers.base(engine, trainer.base_sampler(), model)
    try:
        return engine.sampler_for(model, None)
    except EngineError as exc:
        raise JobError(f"gate: the base model cannot load: {exc}", kind="engine") from None


def _answer_tokens(cases: list[evals.EvalCase], floor: int) -> int:
    longest = max((len(c.expected) for c in cases), default=0)
    return max(floor, min(MAX_ANSWER_TOKENS, longest // 3 + 8))


def _answers(sampler: Any, prompts: list[tuple[list[Any], Any]], max_tokens: int) -> list[str]:
    """Greedy answers; a local sampler sees each row's `tools` as the renderer declares them."""
    from machine_lsp.engines import render
    from machine_lsp.engines.base import EngineError

    try:
        if hasattr(sampler, "sample_tokens"):
            tokens = [render.prompt_tokens(m, sampler.renderer, tools) for m, tools in prompts]
            out = sampler.sample_tokens(tokens, max_tokens)
            return [sampler.tokenizer.decode(t, skip_special_tokens=False) for t in out]
        return sampler.sample([m for m, _tools in prompts], max_tokens)
    except EngineError as exc:
        raise JobError(f"gate sampling: {exc}", kind="engine") from None


def _bleed(
    ctx: JobContext, config: MachineConfig, sampler: Any, label: str, contexts: list[evals.ProbeContext]
) -> tuple[float, float | None]:
    """The bleed rate of the bare probe, and of the same questions asked in the tagged rows' contexts (None when
    every tagged row is bare)."""
    questions = evals.probe_prompts()
    ctx.progress(0, None, f"gate: bleed probe of the {label}", force=True)
    tokens = min(config.eval.max_tokens, BLEED_PROBE_TOKENS)
    pattern = config.eval.bleed_pattern or evals.default_bleed_pattern(config.eval.format_pattern)
    bare = [(evals.probe_messages(q), None) for q in questions]
    in_context = evals.context_probes(questions, contexts)
    outputs = _answers(sampler, bare + in_context, tokens)
    rate = evals.score_probe(questions, outputs[: len(bare)], bleed_pattern=pattern).bleed_rate
    if not in_context:
        return rate, None
    return rate, evals.score_probe(questions, outputs[len(bare) :], bleed_pattern=pattern).bleed_rate


def _tool_probe(
    ctx: JobContext, reference: Any, candidate: Any, metrics: gate.GateMetrics, clock: PhaseClock
) -> None:
    probes = probe_conversations()
    if not hasattr(reference, "sample_tokens") or not hasattr(candidate, "sample_tokens"):
        metrics.notes.append("tool probe not run: this engine's sampler takes no `tools`")
        return
    ctx.progress(0, None, "gate: tool probe", force=True)
    with clock.phase("gate: tool probe, reference"):
        reference_calls = _calls_tool(reference, probes)
    # Retention counts only the probes where the reference calls a tool: the candidate is asked those alone.
    asked = [i for i, called in enumerate(reference_calls) if called]
    candidate_calls = [False] * len(probes)
    with clock.phase("gate: tool probe, candidate"):
        for i, called in zip(asked, _calls_tool(candidate, [probes[i] for i in asked]), strict=True):
            candidate_calls[i] = called
    metrics.tool_probes = len(probes)
    metrics.reference_tool_calls, metrics.tool_calls_kept = gate.tool_retention(
        reference_calls, candidate_calls
    )


def _calls_tool(sampler: Any, probes: list[tuple[list[Any], list[Any]]]) -> list[bool]:
    from machine_lsp.engines import render

    if not probes:
        return []
    tokens = [render.prompt_tokens(m, sampler.renderer, tools) for m, tools in probes]
    calls = []
    for out in sampler.sample_tokens(tokens, TOOL_PROBE_TOKENS):
        message, _end = sampler.renderer.parse_response(list(out))
        text = sampler.tokenizer.decode(out, skip_special_tokens=False)
        calls.append(bool(message.get("tool_calls")) or "<tool_call>" in text)
    return calls
