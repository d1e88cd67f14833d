"""The style-bleed probe: off-distribution questions; a row *bleeds* when its answer takes the trained format.

Asked bare (a user message alone) and, for tagged rows that came with a system prompt or `tools` (an agent's turns),
inside those contexts too (`context_probes`): a style taught in an agent's context can bleed there while the bare
probe sees none (measured: a checkpoint trained on 20 turns in Pi's context bled 0/10 bare, 2/10 in Pi's context).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.core.evals.grading import EvalError, bleeds, compile_pattern
from machine_lsp.core.evals.results import ProbeResult, ProbeRow
from machine_lsp.core.lines import split_lines
from machine_lsp.core.safe_files import read_input_text
from machine_lsp.core.schema import Message, text_of, training_row_from_obj

BUILTIN_PROBES: tuple[str, ...] = (
    "What is the capital of France?",
    "Which planet is known as the Red Planet?",
    "Who wrote the play Romeo and Juliet?",
    "What is the chemical symbol for gold?",
    "What color do you get by mixing blue and yellow?",
    "What language is mainly spoken in Brazil?",
    "Name the largest ocean on Earth.",
    "What do bees make?",
    "Translate 'thank you' into Spanish.",
    "What is the opposite of 'cold'?",
    "Which animal is known as the king of the jungle?",
    "Write one sentence describing a sunny day.",
)


def probe_prompts(extra: Iterable[str] = ()) -> list[str]:
    """The built-in off-distribution questions followed by the user's (duplicates dropped, order kept)."""
    seen: set[str] = set()
    out: list[str] = []
    for q in (*BUILTIN_PROBES, *extra):
        q = q.strip()
        if q and q not in seen:
            seen.add(q)
            out.append(q)
    return out


def load_probe_questions(path: Path) -> list[str]:
    """User probe questions: a .jsonl of ``{"question": ...}`` / ``{"prompt": ...}`` / chat rows (last user message),
    or plain text with one question per line."""
    text = read_input_text(path, EvalError, "a file of probe questions")
    questions: list[str] = []
    jsonl = path.suffix == ".jsonl"
    for line_no, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        if not jsonl:
            questions.append(line.strip())
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalError(f"{path}:{line_no}: invalid JSON: {exc.msg}") from None
        if isinstance(obj, str):
            questions.append(obj)
        elif isinstance(obj, dict) and isinstance(obj.get("question") or obj.get("prompt"), str):
            questions.append(obj.get("question") or obj["prompt"])
        elif isinstance(obj, dict) and "messages" in obj:
            try:
                row = training_row_from_obj(obj)
            except msgspec.ValidationError as exc:
                raise EvalError(f"{path}:{line_no}: {exc}") from None
            users = [m for m in row.messages if m.role == "user"]
            if not users:
                raise EvalError(f"{path}:{line_no}: no user message to use as a probe question")
            questions.append(text_of(users[-1]))
        else:
            raise EvalError(
                f"{path}:{line_no}: expected a question string, {{'question': ...}} or a chat row"
            )
    if not questions:
        raise EvalError(f"{path}: no probe questions")
    return questions


def score_probe(
    questions: Sequence[str],
    outputs: Sequence[str],
    *,
    bleed_pattern: str,
    n_builtin: int | None = None,
) -> ProbeResult:
    """``n_builtin``: how many leading questions are built-in (the rest are the user's)."""
    if len(questions) != len(outputs):
        raise EvalError(f"{len(outputs)} outputs for {len(questions)} probe questions")
    rx = compile_pattern(bleed_pattern, "bleed pattern")
    n_builtin = len(questions) if n_builtin is None else n_builtin
    rows = [
        ProbeRow(
            id=f"probe-{i + 1:02d}",
            question=q,
            output=o,
            bleeds=bleeds(o, rx),
            source="builtin" if i < n_builtin else "user",
        )
        for i, (q, o) in enumerate(zip(questions, outputs, strict=True))
    ]
    bled = sum(r.bleeds for r in rows)
    return ProbeResult(
        bleed_pattern=bleed_pattern,
        n=len(rows),
        bled=bled,
        bleed_rate=bled / len(rows) if rows else 0.0,
        rows=rows,
    )


def probe_messages(question: str) -> list[Message]:
    return [Message(role="user", content=question)]


class ProbeContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a tagged row's request is asked inside: its leading system messages and its OpenAI `tools`."""

    system: tuple[Message, ...] = ()
    tools: tuple[Any, ...] | None = None


def row_context(messages: Sequence[Message], tools: Any) -> ProbeContext | None:
    """A row's context (its leading system/developer messages and `tools`); None for a bare row (no system
    prompt, no tools: the plain probe already asks like that)."""
    system: list[Message] = []
    for message in messages:
        if message.role not in ("system", "developer"):
            break
        system.append(message)
    has_tools = isinstance(tools, list) and bool(tools)
    if not system and not has_tools:
        return None
    return ProbeContext(system=tuple(system), tools=tuple(tools) if has_tools else None)


def distinct_contexts(contexts: Iterable[ProbeContext | None]) -> list[ProbeContext]:
    """The distinct contexts, in a deterministic order (by a hash of each, not by row order)."""
    by_key: dict[str, ProbeContext] = {}
    for context in contexts:
        if context is not None:
            payload = msgspec.json.encode(context)
            by_key.setdefault(hashlib.sha256(payload).hexdigest(), context)
    return [by_key[key] for key in sorted(by_key)]


def context_probes(
    questions: Sequence[str], contexts: Sequence[ProbeContext]
) -> list[tuple[list[Message], Any]]:
    """(messages, tools) of each probe question asked inside a tagged context: question i in context i mod n.
    Nothing when there is no context (bare rows only)."""
    if not contexts:
        return []
    probes = []
    for i, question in enumerate(questions):
        context = contexts[i % len(contexts)]
        tools = list(context.tools) if context.tools else None
        probes.append(([*context.system, Message(role="user", content=question)], tools))
    return probes
