"""Scoped training, the sampling half: answer the anchor prompts (core.anchors) with the base model, add the rows.

Runs inside `train-run` after the gate's rows are held out and before the run is sized: a store SFT run with
`[train] scope = "auto"` gets `anchor_count(rows, anchor_ratio)` anchors. Prompts come from the project's untagged
agent turns (core.sessions: their system prompt, conversation up to the last user message, and `tools`) and the
built-in pool; the base model (the trainer's weights with the adapter off, else the engine's base sampler) answers
each greedily. An answer to a tools prompt is parsed by the renderer, so a tool call becomes the anchor's
`tool_calls`; an answer cut by the token limit loses its trailing sentence (a cut tool call is dropped). The rows
go to `data/anchors.jsonl` in the run dir, and the manifest's `anchors` records the counts by source and the ratio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core import anchors, evals, runs
from machine_lsp.core.schema import Message, TrainingRow, encode, encode_training_row, text_of
from machine_lsp.jobs.greedy_cache import AnswerCache
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.scaffold.config import MachineConfig

Labelled = list[tuple[str, TrainingRow]]
BATCH = 8  # prompts sampled together (one progress event per batch)
MAX_AGENT_SESSIONS = 20  # the newest sessions read for untagged turns (each log is read whole)


class AnchorRecord(msgspec.Struct, kw_only=True):
    """What the manifest's `anchors` holds."""

    scope: str
    ratio: float
    tagged_rows: int
    planned: int = 0
    added: int = 0
    counts: dict[str, int] = msgspec.field(default_factory=dict)  # by source: pool, agent_turns
    pool_in_context: int = 0  # pool (or tool) requests asked inside a tagged row's system prompt and tools
    with_tools: int = 0  # anchors whose prompt declares `tools`
    tool_calls: int = 0  # ... and whose base-model answer calls one
    dropped: int = 0  # answers cut by the token limit with nothing left to keep
    path: str | None = None
    sha256: str | None = None
    note: str | None = None


def add_anchors(
    ctx: JobContext,
    config: MachineConfig,
    run: tuple[Any, Any, str],
    labelled: Labelled,
    answers: AnswerCache,
) -> Labelled:
    """The rows to train on: `labelled` plus the anchors (none when scope is off or the data is a file); the base
    model's answers come from (and go to) the greedy-answer cache."""
    engine, trainer, model = run
    cfg = config.train
    record = AnchorRecord(scope=cfg.scope, ratio=cfg.anchor_ratio, tagged_rows=len(labelled))
    if cfg.scope == "off":
        record.note = "scope = off: no anchors"
    elif cfg.data is not None:
        record.note = "training on a file: anchors are added to store runs only"
    else:
        tool_rows = sum(1 for _where, row in labelled if row.extra.get("tools"))
        record.planned = anchors.anchor_count(len(labelled), cfg.anchor_ratio)
        record.planned += anchors.tool_anchor_count(tool_rows, cfg.anchor_ratio)
    if not record.planned:
        ctx.update(anchors=msgspec.to_builtins(record))
        return labelled
    prompts = _prompts(ctx, config, labelled)
    ctx.progress(0, len(prompts), f"anchors: the base model answers {len(prompts)} prompts", force=True)
    rows = _answer(ctx, answers.base(engine, _base_sampler(engine, trainer, model), model), prompts, record)
    record.added = len(rows)
    record.counts = {s: sum(1 for p, _ in rows if p.source == s) for s in anchors.SOURCES}
    in_context = (anchors.IN_CONTEXT_ORIGIN, anchors.TOOL_REQUEST_ORIGIN)
    record.pool_in_context = sum(1 for p, _ in rows if p.origin in in_context)
    record.path, record.sha256 = _snapshot(ctx, [row for _, row in rows])
    ctx.update(anchors=msgspec.to_builtins(record))
    ctx.log(
        f"anchors: {record.added} base-model answers added to {len(labelled)} tagged rows "
        f"({record.counts['pool']} built-in prompts, {record.counts['agent_turns']} agent turns, "
        f"{record.tool_calls} of them tool calls; ratio {cfg.anchor_ratio:g})"
    )
    anchored = [(f"anchor {n} ({p.origin})", row) for n, (p, row) in enumerate(rows, start=1)]
    return labelled + anchored


def _prompts(ctx: JobContext, config: MachineConfig, labelled: Labelled) -> list[anchors.AnchorPrompt]:
    cfg = config.train
    probes = _probe_questions(ctx, config)
    turns = _agent_turn_prompts(ctx, labelled, probes)
    n_turns, n_pool = anchors.split_sources(anchors.anchor_count(len(labelled), cfg.anchor_ratio), len(turns))
    contexts = evals.distinct_contexts(
        evals.row_context(row.messages, row.extra.get("tools")) for _where, row in labelled
    )
    requests = anchors.tool_requests(cfg.seed, probes)
    placed = anchors.in_tagged_contexts(anchors.pool_prompts(cfg.seed, n_pool, probes), contexts, requests)
    # on top: workspace requests where tools were offered (the in-context slots above took the first ones)
    used = sum(1 for p in placed if p.origin == anchors.TOOL_REQUEST_ORIGIN)
    tool_rows = sum(1 for _where, row in labelled if row.extra.get("tools"))
    more = requests[used : used + anchors.tool_anchor_count(tool_rows, cfg.anchor_ratio)]
    return turns[:n_turns] + placed + anchors.tool_context_prompts(more, contexts)


def _probe_questions(ctx: JobContext, config: MachineConfig) -> list[str]:
    """What the gate probes with (bleed questions, the user's extra ones, the tool probes): kept out of anchors."""
    from machine_lsp.core.tool_probes import TOOL_PROBES
    from machine_lsp.jobs.data import resolve

    extra: list[str] = []
    if config.eval.probe_questions:
        try:
            extra = evals.load_probe_questions(resolve(ctx.cwd, config.eval.probe_questions))
        except (OSError, evals.EvalError) as exc:
            ctx.log(
                f"anchors: probe questions not read ({exc}); only the built-in probe is kept out", "warning"
            )
    return evals.probe_prompts(extra) + [question for _tools, question in TOOL_PROBES]


def _agent_turn_prompts(ctx: JobContext, labelled: Labelled, probes: list[str]) -> list[anchors.AnchorPrompt]:
    """The project's untagged agent turns as prompts, newest session first (a log that cannot be read is skipped)."""
    from machine_lsp.core import sessions
    from machine_lsp.core.store import Store
    from machine_lsp.core.transcripts import TranscriptError, load_session

    store = Store.open(ctx.cwd)
    tagged = {(r.source.uri, r.source.line) for r in store.records()}
    trained = {encode(_prompt_only(row.messages)) for _where, row in labelled}
    seen: set[bytes] = set()
    found: list[anchors.AnchorPrompt] = []
    for session in sessions.find_sessions(ctx.cwd, count_turns=0)[:MAX_AGENT_SESSIONS]:
        try:
            turns = load_session(session, trace=True)
        except (TranscriptError, OSError):
            continue
        for turn in reversed(turns):
            prompt = anchors.turn_prompt(turn.messages[: turn.answer_index])
            if prompt is None or (turn.source.uri, turn.source.line) in tagged:
                continue
            key = encode(prompt)
            if key in seen or key in trained or anchors.near_duplicates([text_of(prompt[-1])], probes):
                continue
            seen.add(key)
            where = f"{Path(session.path).name}:{turn.line}"
            found.append(
                anchors.AnchorPrompt(
                    source="agent_turns", messages=prompt, tools=turn.extra.get("tools"), origin=where
                )
            )
    return found


def _prompt_only(messages: list[Message]) -> list[Message]:
    return anchors.turn_prompt(messages) or list(messages)


def _base_sampler(engine: Any, trainer: Any, model: str) -> Any:
    """The base model: the trainer's own weights with the adapter off (no second copy), else a base sampler."""
    from machine_lsp.engines.base import EngineError

    if hasattr(trainer, "base_sampler"):
        return trainer.base_sampler()
    try:
        return engine.sampler_for(model, None)
    except EngineError as exc:
        raise JobError(f"anchors: the base model cannot load: {exc}", kind="engine") from None


def _answer(
    ctx: JobContext, sampler: Any, prompts: list[anchors.AnchorPrompt], record: AnchorRecord
) -> list[tuple[anchors.AnchorPrompt, TrainingRow]]:
    """Greedy base-model answers in batches of `BATCH` (one progress event each)."""
    from machine_lsp.engines.base import EngineError

    answers: list[Message | None] = []
    for start in range(0, len(prompts), BATCH):
        chunk = prompts[start : start + BATCH]
        try:
            answers.extend(_answer_batch(sampler, chunk))
        except EngineError as exc:
            raise JobError(f"anchors: sampling: {exc}", kind="engine") from None
        ctx.progress(len(answers), len(prompts), f"anchors: {len(answers)}/{len(prompts)} answered")
    rows = []
    for prompt, answer in zip(prompts, answers, strict=True):
        if answer is None:
            record.dropped += 1
            continue
        record.with_tools += bool(prompt.tools)
        record.tool_calls += bool(answer.tool_calls)
        extra = {"tools": prompt.tools} if prompt.tools else {}
        rows.append(
            (prompt, TrainingRow(messages=_trained_answer_only(prompt.messages, answer), extra=extra))
        )
    return rows


def _trained_answer_only(prompt: list[Message], answer: Message) -> list[Message]:
    """Earlier assistant messages of an agent's conversation are the agent's, not the base model's: weight 0."""
    if not any(m.role == "assistant" for m in prompt):
        return [*prompt, answer]
    earlier = [msgspec.structs.replace(m, weight=0) if m.role == "assistant" else m for m in prompt]
    return [*earlier, msgspec.structs.replace(answer, weight=1)]


def _answer_batch(sampler: Any, prompts: list[anchors.AnchorPrompt]) -> list[Message | None]:
    """The base model's answers as assistant messages (tool calls parsed); None where nothing is left to keep."""
    from machine_lsp.engines import render
    from machine_lsp.serve.protocol import parse_reply

    limit = max(anchors.TOOL_ANCHOR_MAX_TOKENS if p.tools else anchors.ANCHOR_MAX_TOKENS for p in prompts)
    if not hasattr(sampler, "sample_tokens"):  # a remote sampler: text only, no tools
        texts = sampler.sample([p.messages for p in prompts], limit)
        return [_text_answer(anchors.tidy_answer(t)) for t in texts]
    tokens = [render.prompt_tokens(p.messages, sampler.renderer, p.tools) for p in prompts]
    end = min(sampler.stop_ids) if getattr(sampler, "stop_ids", None) else None
    answers: list[Message | None] = []
    for out in sampler.sample_tokens(tokens, limit):
        finished = len(out) < limit
        text, calls = parse_reply(list(out), sampler.renderer, end, finished)
        if calls:
            answers.append(Message(role="assistant", content=text, tool_calls=calls))
        elif "<tool_call>" in text:  # a tool call cut by the limit: not a valid answer to train on
            answers.append(None)
        else:
            answers.append(_text_answer(text.strip() if finished else anchors.tidy_answer(text)))
    return answers


def _text_answer(text: str) -> Message | None:
    return Message(role="assistant", content=text) if text else None


def _snapshot(ctx: JobContext, rows: list[TrainingRow]) -> tuple[str, str]:
    data_dir = ctx.run_dir / "data"
    data_dir.mkdir(exist_ok=True)
    payload = b"".join(encode_training_row(row) + b"\n" for row in rows)
    path = data_dir / "anchors.jsonl"
    path.write_bytes(payload)
    sha = runs.sha256_bytes(payload)
    ctx.add_data(
        runs.DataSnapshot(
            role="anchors", source="base-model answers", path=str(path), sha256=sha, rows=len(rows)
        )
    )
    return str(path), sha
