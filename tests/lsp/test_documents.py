"""The server's building blocks that need no client: the line document, globs, progress messages."""

from __future__ import annotations

import random

import pytest
from lsprotocol import types
from pygls.workspace import TextDocument
from pygls.workspace.position_codec import PositionCodec

from machine_lsp.jobs import events as ev
from machine_lsp.lsp.documents import FULL_EDIT, LineDocument
from machine_lsp.lsp.features.jobs import format_duration, progress_message
from machine_lsp.lsp.settings import Settings

ALPHABET = ["a", "b", "{", '"', "\n", "😀", "漢", "é", " ", "\r\n"]


def _random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def _client_position(codec: PositionCodec, lines: list[str], line: int, codepoint: int) -> types.Position:
    if line >= len(lines):
        return types.Position(line=len(lines), character=0)
    text = lines[line].rstrip("\r\n")
    return types.Position(line=line, character=codec.client_num_units(text[: min(codepoint, len(text))]))


@pytest.mark.parametrize("encoding", [types.PositionEncodingKind.Utf16, types.PositionEncodingKind.Utf8])
def test_line_document_matches_pygls_text_document(encoding):
    """Random incremental edits (emoji, CJK, CRLF, joined and split lines) give the same text as pygls's own."""
    rng = random.Random(7)
    codec = PositionCodec(encoding)
    for _ in range(40):
        text = _random_text(rng, rng.randint(0, 60))
        ours = LineDocument("file:///x.jsonl", text, position_codec=codec)
        theirs = TextDocument("file:///x.jsonl", text, position_codec=codec)
        for _ in range(15):
            lines = list(theirs.lines)
            a_line = rng.randint(0, len(lines))
            b_line = rng.randint(a_line, len(lines))
            a_col = rng.randint(0, 8)
            b_col = rng.randint(0, 8) if b_line > a_line else rng.randint(a_col, a_col + 8)
            start = _client_position(codec, lines, a_line, a_col)
            end = _client_position(codec, lines, b_line, b_col)
            if (end.line, end.character) < (start.line, start.character):
                end = start
            change = types.TextDocumentContentChangePartial(
                range=types.Range(start=start, end=end), text=_random_text(rng, rng.randint(0, 6))
            )
            ours.apply_change(change)
            theirs.apply_change(change)
            assert ours.source == theirs.source
            assert ours.lines == list(theirs.lines)
            assert ours.chars == len(theirs.source)
        assert FULL_EDIT not in ours.take_edits()


def test_line_document_records_touched_lines():
    doc = LineDocument("file:///x.jsonl", "a\nb\nc\n")
    doc.apply_change(
        types.TextDocumentContentChangePartial(
            range=types.Range(
                start=types.Position(line=1, character=0), end=types.Position(line=1, character=1)
            ),
            text="B\nB2",
        )
    )
    assert doc.source == "a\nB\nB2\nc\n"
    (edit,) = doc.take_edits()
    assert (edit.start, edit.old_end, edit.new_count) == (1, 2, 2)
    doc.apply_change(types.TextDocumentContentChangeWholeDocument(text="z\n"))
    assert doc.take_edits() == [FULL_EDIT] and doc.lines == ["z\n"]


def test_globs():
    s = Settings()
    assert s.kind_of("/home/u/proj/data/train.jsonl") == "train"
    assert s.kind_of("/home/u/proj/data/eval.jsonl") == "eval"
    assert s.kind_of("/tmp/test_eval_dir/train.jsonl") == "train"  # folders do not match file globs
    assert s.kind_of("/home/u/notes.md") is None
    s = s.updated({"machine": {"trainGlobs": ["data/**/*.{jsonl,ndjson}"], "evalGlobs": []}})
    assert s.kind_of("/p/data/x/y.ndjson") == "train" and s.kind_of("/p/other/y.jsonl") is None
    assert s.updated({"debounceMs": "fast"}).debounce_ms == s.debounce_ms  # bad values are ignored


def test_progress_messages():
    step = ev.Step(step=12, total=60, loss=0.4213, lr=5e-4, tokens=197, seconds_per_step=3.1, eta_seconds=150)
    assert progress_message(step) == ("step 12/60 · loss 0.42 · 3.1 s/step · eta 2m30s", 20)
    progress = ev.Progress(done=5000, total=100000, message="validated 5000/100000 rows")
    assert progress_message(progress) == ("validated 5000/100000 rows", 5)
    assert [format_duration(x) for x in (5, 120, 150, 700, 3700)] == ["5s", "2m", "2m30s", "11m", "1h01m"]
