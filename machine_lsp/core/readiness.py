"""Tokenizer readiness: does every valid row render with the model's chat renderer, within a token budget?

Optional and slow-ish (a tokenizer, tinker-cookbook, and so torch get imported), so it runs only when asked for
(`machine train validate --model/--renderer/--max-length`). Everything heavy is imported inside functions through
`machine_lsp.engines.render`, the one rendering path the engines train with, so `machine_lsp.core` stays light.

Checks per row that passed shape validation:
- training rows render through the cookbook's `conversation_to_datum` (`render-failed` otherwise);
- rows longer than `max_length` tokens (`too-long`: the cookbook would truncate them);
- rows with no trained tokens, before or after that truncation (`no-trained-tokens`);
- eval rows: the generation prompt renders and fits in `max_length`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from machine_lsp.core.schema import Message
from machine_lsp.core.validate import Finding, Kind, Report

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
DATASET_CODES = frozenset({"train-eval-leak", "duplicate-row"})


class ReadinessError(Exception):
    """The check cannot run at all: tokenizer not available offline, unknown renderer. Callers exit 2."""


class _Conversation(msgspec.Struct):
    messages: list[Message]
    expected: str | None = None


class Readiness(msgspec.Struct):
    model: str
    renderer: str
    findings: list[Finding]
    stats: dict[str, Any]


_decoder = msgspec.json.Decoder(_Conversation)


def _lines(data: bytes) -> list[bytes]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def check_readiness(
    data: bytes,
    report: Report,
    model: str | None = None,
    renderer: str | None = None,
    max_length: int | None = None,
    kind: Kind = "auto",
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Readiness:
    """Render every row of `data` that `report` found no error in; findings and token counts."""
    from machine_lsp.engines import render
    from machine_lsp.engines.base import EngineError

    model = model or DEFAULT_MODEL
    try:
        tokenizer, chat_renderer = render.load_tokenizer_and_renderer(model, renderer)
        renderer_name = renderer or render.renderer_name_for(model, tokenizer)
        train_on = render.train_on_what(render.DEFAULT_TRAIN_ON)
    except EngineError as exc:
        raise ReadinessError(str(exc)) from None
    except Exception as exc:  # a broken install (ImportError) or a tokenizer file that does not load
        raise ReadinessError(
            f"cannot load the tokenizer for {model!r}: {type(exc).__name__}: {exc}"
        ) from None

    from tinker_cookbook.supervised.data import conversation_to_datum

    # Rows with shape errors are not rendered; dataset-level errors (leakage) say nothing about the row's shape.
    bad_lines = {f.line for f in report.findings if f.severity == "error" and f.code not in DATASET_CODES}
    lines = _lines(data)
    findings: list[Finding] = []
    train_rows = eval_rows = total = trained_total = longest = prompt_total = 0
    longest_line = 0

    def add(line_no: int, width: int, severity: Literal["error", "warning"], code: str, message: str) -> None:
        findings.append(Finding(line_no, 1, line_no, width + 1, severity, code, message))

    for index, raw in enumerate(lines):
        line_no = index + 1
        if progress is not None and index % 1000 == 0:
            progress(index, len(lines))
        if line_no in bad_lines or not raw.strip():
            continue
        try:
            row = _decoder.decode(raw)
        except msgspec.DecodeError:
            continue  # not a row the shape checks accepted (e.g. a warning-only line): nothing to render
        width = len(raw.decode("utf-8", "replace"))
        is_eval = kind == "eval" or (kind == "auto" and row.expected is not None)
        try:
            if is_eval:
                tokens = len(render.prompt_tokens(row.messages, chat_renderer))
                eval_rows += 1
                prompt_total += tokens
            else:
                datum = conversation_to_datum(
                    render.cookbook_messages(row.messages),
                    chat_renderer,
                    max_length=None,
                    train_on_what=train_on,
                )
                _, _, weights = render.datum_tokens(datum)
                tokens = len(weights)
                trained = sum(1 for w in weights if w > 0)
                kept = sum(1 for w in weights[:max_length] if w > 0) if max_length else trained
                train_rows += 1
                total += tokens
                trained_total += trained
                if trained == 0:
                    add(line_no, width, "error", "no-trained-tokens", "the row has no tokens to train on")
                elif kept == 0:
                    add(
                        line_no,
                        width,
                        "error",
                        "no-trained-tokens",
                        f"no tokens left to train on after truncation to {max_length} tokens",
                    )
        except Exception as exc:  # the cookbook raises many kinds (ValueError, KeyError, pydantic errors)
            reason = " ".join(str(exc).split())[:300]
            add(
                line_no,
                width,
                "error",
                "render-failed",
                f"renderer {renderer_name} cannot render the row: {reason}",
            )
            continue
        if tokens > longest:
            longest, longest_line = tokens, line_no
        if max_length is not None and tokens > max_length:
            what = "prompt" if is_eval else "row"
            add(
                line_no,
                width,
                "error",
                "too-long",
                f"the {what} is {tokens} tokens, over --max-length {max_length}; it would be truncated",
            )
    if progress is not None:
        progress(len(lines), len(lines))
    stats: dict[str, Any] = {
        "model": model,
        "renderer": renderer_name,
        "rendered_train_rows": train_rows,
        "rendered_eval_rows": eval_rows,
        "tokens": total,
        "trained_tokens": trained_total,
        "eval_prompt_tokens": prompt_total,
        "max_tokens": longest,
        "max_tokens_line": longest_line,
    }
    if max_length is not None:
        stats["max_length"] = max_length
    findings.sort(key=lambda f: (f.line, f.code))
    return Readiness(model=model, renderer=renderer_name, findings=findings, stats=stats)
