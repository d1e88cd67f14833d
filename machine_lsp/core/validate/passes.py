"""File passes: every line of a text or a file's bytes, a batch at a time, into one Report."""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from machine_lsp.core.lines import split_lines
from machine_lsp.core.validate.dataset import _dataset_findings_of
from machine_lsp.core.validate.fast import (
    _fast_check,
    _fast_eval_ok,
    _fast_prompt_key,
    _plain_check,
    _plain_row_decoder,
    _PlainMessage,
    _PlainRow,
    has_user,
)
from machine_lsp.core.validate.findings import (
    _BOM_FINDING,
    _CLEAN,
    Finding,
    Fix,
    Kind,
    LineResult,
    Report,
    TextEdit,
    _blank,
    _shift_bom,
)
from machine_lsp.core.validate.inputs import _decode_line, check_binary
from machine_lsp.core.validate.preference import (
    PREFERENCE_KINDS,
    check_preference_line,
)
from machine_lsp.core.validate.rules import _slow_check


def check_line(text: str, line_no: int, kind: Kind = "auto") -> LineResult:
    """Findings of one line (no line break in `text`). Pure: the result depends only on the arguments."""
    if line_no == 1 and text.startswith("\ufeff"):
        inner = check_line(text[1:], 1, kind)
        findings = [_shift_bom(f) for f in inner.findings] + [_BOM_FINDING]
        return msgspec.structs.replace(inner, findings=findings, width=inner.width + 1)
    if not text or text.isspace():
        return _blank(text, line_no)
    if kind in PREFERENCE_KINDS:
        return check_preference_line(text, line_no, kind)
    fast = _plain_check(text, kind, True) or _fast_check(text, kind)
    if fast is not None:
        return fast
    return _slow_check(text, line_no, kind)


def check_lines(
    lines: Sequence[str],
    kind: Kind = "auto",
    start_line: int = 1,
    *,
    fallback: Callable[[str, int, Kind], LineResult] | None = None,
) -> list[LineResult]:
    """check_line for many lines at once: `[check_line(text, start_line + i, kind) for i, text in ...]`, field for
    field, at close to the speed of validate_text. Clean plain rows (most rows) are accepted by the file pass's
    batched decode, driven from C; every other line goes to `fallback(text, line_no, kind)` (default check_line),
    so a caller with its own per-line rule (the language server numbers every cached line 1) can pass it.
    tests/core/test_validate_fuzz.py checks the equivalence."""
    slow = check_line if fallback is None else fallback
    out: list[LineResult] = []
    total = len(lines)
    for start in range(0, total, _BATCH):
        batch = lines if total <= _BATCH else lines[start : start + _BATCH]
        rows, messages, other, clean_eval = _accept_batch(batch, kind)
        if clean_eval:
            force_eval = kind == "eval"
            kinds: Any = ["eval" if force_eval or row.expected is not None else "train" for row in rows]
        else:
            kinds = itertools.repeat("train")
        results = list(
            map(
                LineResult,
                itertools.repeat(_CLEAN),
                map(hash, batch),
                _batch_prompt_keys(messages, clean_eval),
                map(len, batch),
                kinds,
                map(len, messages),
            )
        )
        first = start_line + start
        for index in other:
            results[index] = slow(batch[index], first + index, kind)
        out += results
    return out


class _Pass:
    """One pass over a file's lines: findings, stats and what the dataset-level checks need."""

    def __init__(self, file: str, byte_count: int, lines: Sequence[str] | Sequence[bytes], bom: bool) -> None:
        self.file = file
        self.byte_count = byte_count
        self.lines = lines  # str, or UTF-8 bytes (decoded only where a position is needed)
        self.bom = bom
        self.findings: list[Finding] = []
        self.not_rows: set[int] = set()  # indices of lines that are not JSON objects (never duplicates)
        self.prompts: list[tuple[int, str]] = []  # (line index, prompt key), when wanted
        self.train_rows = 0
        self.eval_rows = 0
        self.messages = 0
        self.seconds = 0.0

    def prompt_keys(self) -> set[str]:
        return {key for _, key in self.prompts}

    def width_of(self, index: int) -> int:
        line = self.lines[index]
        return len(line.decode("utf-8", "surrogateescape")) if type(line) is bytes else len(line)

    def duplicates(self) -> list[tuple[int, int]]:
        """(index, index of the first identical line) for rows that repeat an earlier row exactly."""
        lines = self.lines
        if len(set(lines)) == len(lines):  # one pass in C; the common case has no duplicates at all
            return []
        first_of: dict[Any, int] = {}
        found: list[tuple[int, int]] = []
        for index, line in enumerate(lines):
            if index in self.not_rows:
                continue
            first = first_of.setdefault(line, index)
            if first != index:
                found.append((index, first))
        return found


# Lines per batch of the file loop: large enough that per-batch costs vanish, small enough that the decoded rows of
# one batch stay in cache and their memory is reused by the next (decoding a whole file at once is ~2x slower).
_BATCH = 200


_PROGRESS_EVERY = 5000  # a multiple of _BATCH


_messages_of = operator.attrgetter("messages")


_expected_of = operator.attrgetter("expected")


_PLACEHOLDER = _PlainRow([_PlainMessage("assistant", "-")])  # stands for a line the batch decode rejected


def _check_lines(
    run: _Pass,
    kind: Kind,
    progress: Callable[[int, int], None] | None,
    want_prompts: bool,
) -> None:
    """Check every line of `run`, a batch at a time (see _check_batch)."""
    lines = run.lines
    total = len(lines)
    for start in range(0, total, _BATCH):
        _check_batch(
            run, lines if total <= _BATCH else lines[start : start + _BATCH], start, kind, want_prompts
        )
        done = min(start + _BATCH, total)
        if progress is not None and (done % _PROGRESS_EVERY == 0 or done == total):
            progress(done, total)
    if progress is not None and total == 0:
        progress(0, 0)


_second_last = operator.itemgetter(-2)


_role_of = operator.attrgetter("role")


_content_of = operator.attrgetter("content")


def _batch_prompt_keys(messages: list[list[_PlainMessage]], clean_eval: int) -> list[str | None]:
    """_fast_prompt_key of each row of a batch of training rows. The common shape, a user message with string
    content right before the final assistant message, is read from C; any other batch goes row by row. Keys of
    rows the batch did not accept are never used."""
    if not clean_eval:
        try:
            before_last = list(map(_second_last, messages))
            if list(map(_role_of, before_last)).count("user") == len(before_last):
                return list(map(str.strip, map(_content_of, before_last)))
        except (IndexError, TypeError):  # a one-message row (or placeholder), or content parts
            pass
    return list(map(_fast_prompt_key, messages))


def _accept_batch(
    lines: Sequence[str] | Sequence[bytes], kind: Kind
) -> tuple[list[_PlainRow], list[list[_PlainMessage]], list[int], int]:
    """The batched plain-row shortcut (see _check_batch): the decoded rows (_PLACEHOLDER where the decode failed),
    their messages, the sorted indices of the lines it does not accept, and how many accepted rows are eval rows.
    A line it accepts is one _plain_check accepts: clean, with no findings."""
    rows: list[_PlainRow] = []
    failed: list[int] = []
    decoded = map(_plain_row_decoder.decode, lines)
    while True:
        try:
            rows.extend(decoded)
            break
        except (msgspec.DecodeError, RecursionError):
            failed.append(len(rows))
            rows.append(_PLACEHOLDER)
    count = len(rows)
    messages = list(map(_messages_of, rows))
    if kind == "train" or (kind == "auto" and not any(map(_expected_of, rows))):
        # Training rows only (`expected` is a non-empty string or None; placeholders have None): each must end
        # with an assistant message that a user message comes before (plain rows train every assistant message).
        lasts = [row_messages[-1].role for row_messages in messages]
        if lasts.count("assistant") == count:
            other = failed  # the placeholder ends with an assistant message
        else:
            other = sorted(failed + [index for index, role in enumerate(lasts) if role != "assistant"])
        unprompted = [index for index, row in enumerate(messages) if not has_user(row)]
        if unprompted:
            other = sorted(set(other).union(unprompted))
        clean_eval = 0
    else:
        other = []
        clean_eval = 0
        force_eval = kind == "eval"
        for index, row in enumerate(rows):
            if row is _PLACEHOLDER:
                other.append(index)
            elif force_eval or row.expected is not None:
                if _fast_eval_ok(row):
                    clean_eval += 1
                else:
                    other.append(index)
            elif messages[index][-1].role != "assistant" or not has_user(messages[index]):
                other.append(index)
    return rows, messages, other, clean_eval


def _check_batch(
    run: _Pass, lines: Sequence[str] | Sequence[bytes], start: int, kind: Kind, want_prompts: bool
) -> None:
    """Plain rows (no tools, contents that are non-empty strings or parts with text: most rows) are accepted with
    one typed decode and a last-role check, because this loop is the hot spot of a full validation (see
    bench/validate.py). The decodes run from C, with no Python code per line: `map` decodes every line of the
    batch, and when a line fails to decode `list.extend` keeps the rows before it (CPython appends as it goes), so
    the failing line's index is the length of the list; the loop resumes after it. The `expected` values and last
    roles are then checked for the whole batch at once. Any line not accepted goes through check_line's parts; tests/core/test_validate_fuzz.py
    checks that both give the same findings."""
    rows, messages, other, clean_eval = _accept_batch(lines, kind)
    count = len(rows)
    clean = count - len(other)
    run.train_rows += clean - clean_eval
    run.eval_rows += clean_eval
    run.messages += sum(map(len, messages)) - sum(len(messages[index]) for index in other)
    if want_prompts:
        skip = set(other)
        prompts = run.prompts
        for index, row_messages in enumerate(messages):
            if index not in skip:
                key = _fast_prompt_key(row_messages)
                if key:
                    prompts.append((start + index, key))
    for index in other:
        line = lines[index]
        line_index = start + index
        _record(
            run, line_index, _check_other_line(run, line, line_index + 1, kind, want_prompts), want_prompts
        )


def _record(run: _Pass, index: int, result: LineResult, want_prompts: bool) -> None:
    run.findings.extend(result.findings)
    if result.row_kind == "train":
        run.train_rows += 1
    elif result.row_kind == "eval":
        run.eval_rows += 1
    if result.fingerprint is None:
        run.not_rows.add(index)
    if want_prompts and result.prompt_key:
        run.prompts.append((index, result.prompt_key))
    run.messages += result.messages


def _check_other_line(
    run: _Pass, line: str | bytes, line_no: int, kind: Kind, want_prompts: bool
) -> LineResult:
    """A line the inline fast path did not accept (preference rows never are: they have no `messages`): a lenient
    tool-call row, a blank line, a preference row, or the slow path."""
    result = None if kind in PREFERENCE_KINDS else _fast_check(line, kind, want_prompts)
    if result is not None:
        return result
    if type(line) is bytes:
        text, bad_bytes = _decode_line(line, line_no)
        run.findings.extend(bad_bytes)
    else:
        text = line
    if not text or text.isspace():
        return _blank(text, line_no)
    if kind in PREFERENCE_KINDS:
        return check_preference_line(text, line_no, kind)
    return _slow_check(text, line_no, kind)


def _content_pass(
    content: str | bytes,
    kind: Kind,
    file: str,
    progress: Callable[[int, int], None] | None = None,
    want_prompts: bool = True,
) -> _Pass:
    """Check every line of a text (an editor buffer) or of a file's bytes."""
    started = time.perf_counter()
    if isinstance(content, str):
        byte_count, lines, bom, ends_open = _text_lines(content)
    else:
        byte_count, lines, bom, ends_open = _byte_lines(content, file)
    run = _Pass(file, byte_count, lines, bom)
    _check_lines(run, kind, progress, want_prompts)
    if lines and ends_open and lines[-1].isspace():
        run.findings = [_fix_last_blank(f, run, len(lines)) for f in run.findings]
    run.seconds = time.perf_counter() - started
    return run


def _text_lines(text: str) -> tuple[int, list[str], bool, bool]:
    """The text's size in bytes, its lines, whether it began with a BOM, whether its last line is unterminated."""
    byte_count = len(text.encode("utf-8", "surrogatepass"))
    bom = text.startswith("\ufeff")
    if bom:
        text = text[1:]
    lines = split_lines(text)  # the one line rule (core.lines), as the server splits
    return byte_count, lines, bom, not text.endswith(("\n", "\r"))


def _byte_lines(data: bytes, file: str) -> tuple[int, list[bytes], bool, bool]:
    """As _text_lines, for a file's bytes (refused when they look binary)."""
    check_binary(data, file)
    byte_count = len(data)
    bom = data.startswith(b"\xef\xbb\xbf")
    if bom:
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = data.split(b"\n")
    ends_with_newline = lines[-1] == b""
    if ends_with_newline:
        lines.pop()
    return byte_count, lines, bom, not ends_with_newline


def _finish(run: _Pass, other_prompts: set[str] | None, other_name: str) -> Report:
    started = time.perf_counter()
    leaks = [index for index, key in run.prompts if key in other_prompts] if other_prompts else []
    findings = run.findings + _dataset_findings_of(run.duplicates(), leaks, run.width_of, other_name)
    if run.bom:
        findings = [_shift_bom(f) for f in findings]
        findings.append(_BOM_FINDING)
    findings.sort(key=lambda f: (f.line, f.column, f.code))
    seconds = run.seconds + time.perf_counter() - started
    errors = sum(1 for f in findings if f.severity == "error")
    stats: dict[str, Any] = {
        "lines": len(run.lines),
        "train_rows": run.train_rows,
        "eval_rows": run.eval_rows,
        "messages": run.messages,
        "errors": errors,
        "warnings": len(findings) - errors,
        "bytes": run.byte_count,
        "seconds": round(seconds, 4),
        "mb_per_s": round(run.byte_count / 1e6 / seconds, 1) if seconds > 0 else None,
    }
    rows = run.train_rows + run.eval_rows
    return Report(file=run.file, rows=rows, ok=errors == 0, findings=findings, stats=stats)


def _fix_last_blank(finding: Finding, run: _Pass, count: int) -> Finding:
    """A whitespace-only last line without a newline: remove it from the end of the previous line instead."""
    if finding.code != "blank-line" or finding.line != count or count < 2:
        return finding
    edit = TextEdit(count - 1, run.width_of(count - 2) + 1, count, finding.end_column, "")
    return msgspec.structs.replace(finding, fix=Fix("Remove the blank line", [edit]))
