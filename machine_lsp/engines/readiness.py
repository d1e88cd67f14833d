"""Tokenizer readiness: does every valid row render with the model's chat renderer, within a token budget?

Optional and slow-ish (a tokenizer, tinker-cookbook, and so torch get imported when it runs), so it runs only when
asked for (`machine train validate --model/--renderer/--max-length`). It lives next to the engines because it
renders rows exactly as they train: through `render.to_datum`, with the configured `train_on`. Importing this
module loads nothing heavy; the tokenizer and the cookbook are loaded inside `check_readiness`.

Checks per row that passed shape validation:
- training rows render through `render.to_datum` (`render-failed` otherwise);
- rows longer than `max_length` tokens (`too-long`: the cookbook would truncate them);
- rows with no trained tokens under `train_on`, before or after that truncation (`no-trained-tokens`);
- eval rows: the generation prompt renders and fits in `max_length`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from machine_lsp.core.schema import Message
from machine_lsp.core.validate import Finding, Kind, Report
from machine_lsp.engines import render
from machine_lsp.engines.base import EngineError
from machine_lsp.engines.registry import engine_spec

DATASET_CODES = frozenset({"train-eval-leak", "duplicate-row"})


class ReadinessError(Exception):
    """The check cannot run at all: tokenizer not available offline, unknown renderer. Callers exit 2."""


class _Conversation(msgspec.Struct):
    messages: list[Message]
    expected: str | None = None
    tools: list[Any] | None = None  # OpenAI tool definitions, declared to the renderer


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


@dataclass
class _Tally:
    """Findings and token counts, row by row."""

    max_length: int | None
    findings: list[Finding] = field(default_factory=list)
    train_rows: int = 0
    eval_rows: int = 0
    tokens: int = 0
    trained: int = 0
    prompt_tokens: int = 0
    longest: int = 0
    longest_line: int = 0

    def add(self, line_no: int, width: int, code: str, message: str) -> None:
        self.findings.append(Finding(line_no, 1, line_no, width + 1, "error", code, message))

    def stats(self, model: str, renderer_name: str) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "model": model,
            "renderer": renderer_name,
            "rendered_train_rows": self.train_rows,
            "rendered_eval_rows": self.eval_rows,
            "tokens": self.tokens,
            "trained_tokens": self.trained,
            "eval_prompt_tokens": self.prompt_tokens,
            "max_tokens": self.longest,
            "max_tokens_line": self.longest_line,
        }
        if self.max_length is not None:
            stats["max_length"] = self.max_length
        return stats


@dataclass(frozen=True)
class _Renderer:
    name: str
    renderer: Any
    train_on: Any  # a cookbook TrainOnWhat


def _load(model: str, renderer: str | None, train_on: str) -> _Renderer:
    try:
        tokenizer, chat_renderer = render.load_tokenizer_and_renderer(model, renderer)
        name = renderer or render.renderer_name_for(model, tokenizer)
        what = render.train_on_what(train_on)
    except EngineError as exc:
        raise ReadinessError(str(exc)) from None
    except Exception as exc:  # a broken install (ImportError) or a tokenizer file that does not load
        raise ReadinessError(
            f"cannot load the tokenizer for {model!r}: {type(exc).__name__}: {exc}"
        ) from None
    return _Renderer(name, chat_renderer, what)


def check_readiness(
    data: bytes,
    report: Report,
    model: str | None = None,
    renderer: str | None = None,
    max_length: int | None = None,
    kind: Kind = "auto",
    *,
    train_on: str = render.DEFAULT_TRAIN_ON,
    progress: Callable[[int, int], None] | None = None,
) -> Readiness:
    """Render every row of `data` that `report` found no error in; findings and token counts."""
    model = model or engine_spec("local").default_model
    loaded = _load(model, renderer, train_on)
    # Rows with shape errors are not rendered; dataset-level errors (leakage) say nothing about the row's shape.
    bad_lines = {f.line for f in report.findings if f.severity == "error" and f.code not in DATASET_CODES}
    lines = _lines(data)
    tally = _Tally(max_length)
    for index, raw in enumerate(lines):
        if progress is not None and index % 1000 == 0:
            progress(index, len(lines))
        if index + 1 not in bad_lines and raw.strip():
            _check_row(tally, raw, index + 1, kind, loaded)
    if progress is not None:
        progress(len(lines), len(lines))
    tally.findings.sort(key=lambda f: (f.line, f.code))
    return Readiness(
        model=model, renderer=loaded.name, findings=tally.findings, stats=tally.stats(model, loaded.name)
    )


def _check_row(tally: _Tally, raw: bytes, line_no: int, kind: Kind, loaded: _Renderer) -> None:
    try:
        row = _decoder.decode(raw)
    except msgspec.DecodeError:
        return  # not a row the shape checks accepted (e.g. a warning-only line): nothing to render
    width = len(raw.decode("utf-8", "replace"))
    is_eval = kind == "eval" or (kind == "auto" and row.expected is not None)
    try:
        if is_eval:
            tokens = len(render.prompt_tokens(row.messages, loaded.renderer, row.tools))
            tally.eval_rows += 1
            tally.prompt_tokens += tokens
        else:
            tokens = _check_training_row(tally, row, line_no, width, loaded)
    except Exception as exc:  # the cookbook raises many kinds (ValueError, KeyError, pydantic errors)
        reason = " ".join(str(exc).split())[:300]
        tally.add(line_no, width, "render-failed", f"renderer {loaded.name} cannot render the row: {reason}")
        return
    if tokens > tally.longest:
        tally.longest, tally.longest_line = tokens, line_no
    max_length = tally.max_length
    if max_length is not None and tokens > max_length:
        what = "prompt" if is_eval else "row"
        tally.add(
            line_no,
            width,
            "too-long",
            f"the {what} is {tokens} tokens, over --max-length {max_length}; it would be truncated",
        )


def _check_training_row(
    tally: _Tally, row: _Conversation, line_no: int, width: int, loaded: _Renderer
) -> int:
    """Render one training row as it would train (tools declared, `weight`/`trainable` respected); its token
    count."""
    datum = render.to_datum(
        row.messages,
        loaded.renderer,
        train_on=loaded.train_on,
        reduction="none",
        allow_untrained=True,
        tools=row.tools,
    )
    _, _, weights = render.datum_tokens(datum)
    max_length = tally.max_length
    trained = sum(1 for w in weights if w > 0)
    kept = sum(1 for w in weights[:max_length] if w > 0) if max_length else trained
    tally.train_rows += 1
    tally.tokens += len(weights)
    tally.trained += trained
    if trained == 0:
        reason = (
            " (every assistant message has weight 0 or trainable false)"
            if render.has_training_flags(row.messages)
            else ""
        )
        tally.add(line_no, width, "no-trained-tokens", f"the row has no tokens to train on{reason}")
    elif kept == 0:
        tally.add(
            line_no,
            width,
            "no-trained-tokens",
            f"no tokens left to train on after truncation to {max_length} tokens",
        )
    return len(weights)
