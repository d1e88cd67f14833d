"""Scoped training (pure): which anchor prompts a store SFT run adds, and how many.

An anchor is a prompt unlike the tagged ones, answered by the base model itself (greedy, adapter off) and trained
on with the tagged rows, so the run learns "this kind of request gets the new answer" rather than "every request
does" (FACTS.md: 48 arithmetic rows alone bled `answer: N` into 8/10 off-distribution probes; with 16 base-model
answers to other questions mixed in, bleed 0/10 with format 24/24). Two sources:

* the built-in pool below: short requests of five kinds (facts, numbers, language, writing, explanations), taken
  in turn after a shuffle by the run's seed;
* the project's own untagged agent turns (core.sessions), with their system prompt and `tools`: the base model's
  answer to the same request, tool calls included, so tool-call behaviour is kept.

When the tagged rows carry a system prompt or `tools` (an agent's turns), every second pool request is asked inside
one of those contexts (`in_tagged_contexts`): a style taught in an agent's context bled there (2/10 probes in Pi's
context) while bare probes saw none, so the anchors cover that context too. Where the context declares `tools`,
that slot asks a workspace request (`TOOL_REQUESTS`) instead, so the base model's tool calls there are kept.

The pool is disjoint from the gate's bleed probe (`evals.BUILTIN_PROBES`, plus `[eval] probe_questions`) and from
its tool probe (`tool_probes.TOOL_PROBES`), rewordings included (`near_duplicates`): otherwise the gate would score
the run on its own training data. Agent turns that resemble a probe are skipped for the same reason.

How many: `ceil(anchor_ratio * tagged rows)`, at most `len(ANCHOR_POOL)`; agent turns take up to half of them
(newest first), the pool the rest; plus `ceil(anchor_ratio * tagged rows with tools)` workspace requests asked in
the contexts that offer tools (`tool_anchor_count`). The count depends only on the rows (how many, how many declare
`tools`) and the ratio, so the plan printed before a run (scaffold.estimate) and the job agree without reading any
agent log.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from machine_lsp.core.schema import Message, text_of

ANCHOR_POOL_BY_KIND: dict[str, tuple[str, ...]] = {
    "facts": (
        "Who painted the Mona Lisa?",
        "What is the fastest land animal?",
        "What is the tallest mountain in the world?",
        "Who was the first person to walk on the Moon?",
        "What is the hardest natural substance?",
        "What do caterpillars turn into?",
        "Which instrument has 88 keys?",
        "What is the largest organ of the human body?",
    ),
    "numbers": (
        "How many legs does a spider have?",
        "How many days are there in a week?",
        "What is the boiling point of water in Celsius?",
        "What is the freezing point of water in Fahrenheit?",
        "How many minutes are in an hour?",
    ),
    "language": (
        "What is the plural of mouse?",
        "Give me a synonym for happy.",
        "What is a noun?",
        "Translate 'good night' into French.",
        "How do you say 'dog' in German?",
    ),
    "writing": (
        "Suggest a name for a pet goldfish.",
        "Write a short sentence about the sea.",
        "Describe a cat in one sentence.",
        "Give me a tip for sleeping better.",
        "List three kinds of vegetables.",
    ),
    "explanations": (
        "Why do leaves change color in autumn?",
        "What does a thermometer measure?",
        "Which gas do plants take in from the air?",
        "What is the main ingredient of guacamole?",
        "Explain what a rainbow is.",
    ),
}
ANCHOR_POOL: tuple[str, ...] = tuple(q for group in ANCHOR_POOL_BY_KIND.values() for q in group)
# Workspace requests an agent meets with a tool call (read, list, search, run, look up): asked only inside a tagged
# context that declares `tools`, where the base model's own answer (a call, or not) is what the run must keep.
# Measured (bench/tool_retention.py, a base that calls tools): style rows tagged where tools were offered, scoped
# with pool requests only, kept the base's tool call on 7/10 of the gate's tool probes (0/10 unscoped); with these
# (`tool_anchor_count`), 9/10.
TOOL_REQUESTS: tuple[str, ...] = (
    "Print the first lines of pyproject.toml.",
    "Search the code for the word deprecated.",
    "Show me the last commit message.",
    "Which Python version is installed here?",
    "Count the lines in main.go.",
    "How much disk space is left?",
    "Open the file .gitignore.",
    "What is in the folder named fixtures?",
    "Check the forecast for Rome.",
    "Find the files that end in .yaml.",
)
ANCHOR_MAX_TOKENS = 64  # a pool answer (the example's style rows used 64; a cut-off sentence is dropped)
TOOL_ANCHOR_MAX_TOKENS = 96  # an agent turn's answer may be a tool call: room for its JSON
SOURCES = ("pool", "agent_turns")
IN_CONTEXT_ORIGIN = "built-in pool, in a tagged row's context"
TOOL_REQUEST_ORIGIN = "built-in tool request, in a tagged row's context"

_STOPWORDS = frozenset(
    "a an and are as by do does for from how in into is it known mainly many me name of on one the there to what "
    "which who why you".split()
)


class AnchorPrompt(msgspec.Struct, kw_only=True):
    """A prompt to be answered by the base model: `messages` end with the user's request."""

    source: str  # "pool" | "agent_turns"
    messages: list[Message]
    tools: list[Any] | None = None
    origin: str = ""  # where it came from: the pool, or the agent log's path:line


def anchor_count(tagged_rows: int, ratio: float) -> int:
    """Anchors added to a run on `tagged_rows` rows (0 when the ratio is 0)."""
    if tagged_rows <= 0 or ratio <= 0:
        return 0
    return min(len(ANCHOR_POOL), math.ceil(ratio * tagged_rows))


def tool_anchor_count(tool_rows: int, ratio: float) -> int:
    """Workspace-request anchors added, on top, for `tool_rows` tagged rows asked where `tools` were offered (at most
    `len(TOOL_REQUESTS)`): with the pool's share alone, a style taught there kept the base model's tool calls on
    5-7/10 of the gate's tool probes; with these, 9/10 (bench/tool_retention.py, docs/BENCHMARKS.md)."""
    if tool_rows <= 0 or ratio <= 0:
        return 0
    return min(len(TOOL_REQUESTS), math.ceil(ratio * tool_rows))


def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS)


def near_duplicates(
    questions: Sequence[str], others: Sequence[str], threshold: float = 0.5
) -> list[tuple[str, str]]:
    """Pairs whose content words overlap by Jaccard >= threshold (rewordings, not only exact copies)."""
    clashes = []
    others_words = [(o, content_words(o)) for o in others]
    for q in questions:
        wq = content_words(q)
        for o, wo in others_words:
            if wq and wo and len(wq & wo) / len(wq | wo) >= threshold:
                clashes.append((q, o))
    return clashes


def pool_prompts(seed: int, k: int, probes: Sequence[str]) -> list[AnchorPrompt]:
    """K pool requests, each kind shuffled by the seed and taken in turn; any that resemble a probe are left out."""
    clashing = {q for q, _ in near_duplicates(ANCHOR_POOL, probes)}
    rng = random.Random(f"anchors-{seed}")
    queues = [[q for q in rng.sample(g, len(g)) if q not in clashing] for g in ANCHOR_POOL_BY_KIND.values()]
    picked: list[str] = []
    while len(picked) < k and any(queues):
        for queue in queues:
            if queue and len(picked) < k:
                picked.append(queue.pop(0))
    return [
        AnchorPrompt(source="pool", messages=[Message(role="user", content=q)], origin="built-in pool")
        for q in picked
    ]


def tool_requests(seed: int, probes: Sequence[str]) -> list[str]:
    """`TOOL_REQUESTS` shuffled by the seed, less any that resemble a probe."""
    clashing = {q for q, _ in near_duplicates(TOOL_REQUESTS, probes)}
    return [
        q
        for q in random.Random(f"tool-anchors-{seed}").sample(TOOL_REQUESTS, len(TOOL_REQUESTS))
        if q not in clashing
    ]


def in_tagged_contexts(
    prompts: list[AnchorPrompt], contexts: Sequence[Any], tool_requests: Sequence[str] = ()
) -> list[AnchorPrompt]:
    """Every second pool request asked inside a tagged row's context (`evals.ProbeContext`: its system prompt and
    `tools`, in turn), so the run also learns that other requests in the agent's context keep their own answers;
    the rest stay bare. Where that context declares `tools`, the slot takes the next of `tool_requests` instead: a
    style taught where tools are offered displaces tool calls, not only prose. Unchanged when every tagged row is
    bare."""
    if not contexts:
        return prompts
    out, requests = [], list(tool_requests)
    for i, prompt in enumerate(prompts):
        if i % 2 == 0 or prompt.source != "pool":
            out.append(prompt)
            continue
        context = contexts[(i // 2) % len(contexts)]
        messages, origin = prompt.messages, IN_CONTEXT_ORIGIN
        if context.tools and requests:
            messages, origin = [Message(role="user", content=requests.pop(0))], TOOL_REQUEST_ORIGIN
        out.append(
            msgspec.structs.replace(
                prompt,
                messages=[*context.system, *messages],
                tools=list(context.tools) if context.tools else None,
                origin=origin,
            )
        )
    return out


def tool_context_prompts(requests: Sequence[str], contexts: Sequence[Any]) -> list[AnchorPrompt]:
    """Each request asked inside the tagged contexts that declare `tools`, in turn (none when no context does)."""
    offering = [c for c in contexts if c.tools]
    if not offering:
        return []
    return [
        AnchorPrompt(
            source="pool",
            messages=[*offering[i % len(offering)].system, Message(role="user", content=request)],
            tools=list(offering[i % len(offering)].tools),
            origin=TOOL_REQUEST_ORIGIN,
        )
        for i, request in enumerate(requests)
    ]


def turn_prompt(messages: Sequence[Message]) -> list[Message] | None:
    """An agent turn's request: its messages up to its last user message (the system prompt kept); None when it
    has no user message with text."""
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if last < 0 or not text_of(messages[last]).strip():
        return None
    return list(messages[: last + 1])


def split_sources(total: int, agent_turns_available: int) -> tuple[int, int]:
    """(agent turns, pool requests) of `total` anchors: agent turns take up to half, the pool the rest."""
    turns = min(agent_turns_available, total // 2 if total > 1 else total)
    return turns, total - turns


def tidy_answer(text: str) -> str:
    """Drop a trailing sentence cut by the token limit; keep the model's own wording otherwise."""
    text = text.strip()
    if not text or text[-1] in ".!?)\"'*`":
        return text
    cut = max(text.rfind(m) for m in (". ", ".\n", "! ", "!\n", "? ", "?\n"))
    return text[: cut + 1].strip() if cut > 0 else ""
