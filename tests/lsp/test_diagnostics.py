"""Diagnostics as you type, end to end over stdio, for VS Code (pull, utf-16), Neovim 0.9 (push) and 0.11 (pull, utf-8)."""

from __future__ import annotations

import asyncio
import json

from lsp_helpers import change, diagnostics, is_pull, open_doc, row
from lsprotocol import types


async def test_findings_on_open_and_after_edits(client):
    good = row("What is 2+2?", "answer: 4")
    text = (
        "\n".join(
            [
                good,
                '{"messages": [{"role": "User", "content": "hi"}, {"role": "assistant", "content": "yo"}]}',
                "{not json",
            ]
        )
        + "\n"
    )
    uri = open_doc(client, client.root / "train.jsonl", text)
    found = await diagnostics(client, uri)
    by_line = {d.range.start.line: d for d in found}
    assert set(by_line) == {1, 2}, found
    assert by_line[2].severity == types.DiagnosticSeverity.Error
    assert all(d.source == "machine" and d.code for d in found)
    # Fix line 3 (index 2): replace it with a good row; the json error goes away, the role error stays.
    change(client, uri, 2, 2, 0, len("{not json"), row("Hi", "Hello"))
    found = await diagnostics(client, uri)
    assert {d.range.start.line for d in found} == {1}, found
    # Duplicate row: insert a copy of line 0 as a new line 3 -> a dataset-level finding on line 3.
    change(client, uri, 3, 3, 0, 0, good + "\n")
    found = await diagnostics(client, uri)
    assert any(d.code == "duplicate-row" and d.range.start.line == 3 for d in found), found


async def test_positions_with_emoji_and_cjk(client):
    """A finding after astral-plane and CJK characters lands on the same code point in every encoding."""
    prefix = (
        '{"messages": [{"role": "user", "content": "😀😀 漢字"}, {"role": "assistant", "content": "ok"}], '
    )
    text = prefix + '"x": }\n'
    uri = open_doc(client, client.root / "train.jsonl", text)
    found = await diagnostics(client, uri)
    assert len(found) == 1, found
    start = found[0].range.start.character
    encoding = "utf-8" if client.spec == "neovim@v0.11" else "utf-16"
    bad = text.index("}", len(prefix))  # where the JSON breaks, in code points
    expected = (
        len(text[:bad].encode("utf-8")) if encoding == "utf-8" else len(text[:bad].encode("utf-16-le")) // 2
    )
    assert start == expected, (found[0], encoding)


async def test_push_or_pull_never_both(client):
    uri = open_doc(client, client.root / "data.jsonl", "{broken\n")
    found = await diagnostics(client, uri)
    assert found
    result = client.capabilities
    info = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="machine.server.info")
    )
    assert info["diagnostics"] == ("pull" if is_pull(client) else "push")
    if is_pull(client):
        assert uri not in client.diagnostics  # nothing pushed to a pull client
    assert result is not None


async def test_non_matching_files_and_session_logs_are_left_alone(client):
    """Only chat JSONL files get diagnostics. A checked file opened afterwards bounds the wait for push clients."""
    notes = open_doc(client, client.root / "notes.txt", "{not json\n")
    header = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/"}
    session = open_doc(client, client.root / "session.jsonl", json.dumps(header) + "\n{not json\n")
    marker = open_doc(client, client.root / "marker.jsonl", "{broken\n")
    assert await diagnostics(client, marker)
    if is_pull(client):
        assert await diagnostics(client, notes) == []
        assert await diagnostics(client, session) == []
    else:
        assert notes not in client.diagnostics and session not in client.diagnostics


async def test_train_eval_leakage_follows_edits_of_the_other_file(client):
    eval_row = json.dumps(
        {"messages": [{"role": "user", "content": "What is 2+2?"}], "expected": "answer: 4"}
    )
    eval_uri = open_doc(client, client.root / "eval.jsonl", eval_row + "\n")
    assert await diagnostics(client, eval_uri) == []
    train_uri = open_doc(client, client.root / "train.jsonl", row("What is 2+2?", "answer: 4") + "\n")
    found = await diagnostics(client, train_uri)
    assert [d.code for d in found] == ["train-eval-leak"], found
    # Change the eval prompt: the train file's leak goes away without touching the train file.
    client.diagnostics.pop(train_uri, None)  # push clients: wait for the next publish of the train file
    start = eval_row.index("2+2")
    change(client, eval_uri, 2, 0, start, start + 3, "3+3")
    for _ in range(100):  # pull clients re-pull (bounded); push clients get one new publish
        if await diagnostics(client, train_uri) == []:
            break
        await asyncio.sleep(0.05)
    assert await diagnostics(client, train_uri) == []


async def test_incremental_edit_after_emoji(client):
    """An edit whose range is given in client units after astral and CJK characters lands where it should."""
    text = row("😀 漢字 🎉", "fine") + "\n"
    uri = open_doc(client, client.root / "train.jsonl", text)
    assert await diagnostics(client, uri) == []
    line = text.rstrip("\n")
    units = (
        (lambda s: len(s.encode("utf-8")))
        if client.spec == "neovim@v0.11"
        else (lambda s: len(s.encode("utf-16-le")) // 2)
    )
    at = line.index('"role": "assistant"') + len('"role": "')  # after the emoji: `assistant` -> `Assistant`
    change(client, uri, 2, 0, units(line[:at]), units(line[: at + 1]), "A")
    found = await diagnostics(client, uri)
    assert [d.code for d in found] == ["role-unknown"], found
    assert found[0].range.start.character <= units(line[:at]) <= found[0].range.end.character


def _mixed_lines(count: int) -> list[str]:
    """Rows of every kind the open pass must treat alike: clean (most), broken, blank, unicode, duplicated, tool
    calls, an eval row in a train file, a BOM on line 1; LF and CRLF endings."""
    special = [
        "",
        "   ",
        "{not json",
        "null",
        '{"messages": [{"role": "User", "content": "漢字 😀"}, {"role": "assistant", "content": "x"}]}',
        '{"messages": [{"role": "user", "content": "q?"}], "expected": "4"}',
        '{"messages": [{"role": "assistant", "content": "only"}]}',
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": " parts "}]}, '
        '{"role": "assistant", "content": "ok"}]}',
        '{"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": "", "tool_calls": '
        '[{"id": "c1", "function": {"name": "f", "arguments": "{"}}]}, {"role": "tool", "tool_call_id": "c1", '
        '"content": "sun"}, {"role": "assistant", "content": "sunny"}]}',
        row("dup 😀", "same"),
        row("  spaced prompt 7 ", "answer: 7"),
    ]
    lines = []
    for i in range(count):
        text = (
            special[(i // 7) % len(special)]
            if i % 7 == 3
            else row(f"What is {i} + 1? 漢{i % 3}", f"answer: {i + 1}")
        )
        lines.append(text + ("\r\n" if i % 5 == 0 else "\n"))
    lines[0] = "\ufeff" + row("first row", "with a BOM") + "\n"
    return lines


def _expected(lines: list[str], kind: str, spec: str, other_prompts: set[str] | None = None) -> list[tuple]:
    """The diagnostics check_line gives line by line (plus dataset findings), in the client's units."""
    from machine_lsp.core import validate

    units = (
        (lambda s: len(s.encode("utf-8")))
        if spec == "neovim@v0.11"
        else (lambda s: len(s.encode("utf-16-le")) // 2)
    )
    texts = [line.rstrip("\r\n") for line in lines]
    results = [validate.check_line(text, index + 1, kind) for index, text in enumerate(texts)]
    out = []
    findings = [f for r in results for f in r.findings] + validate.dataset_findings(results, other_prompts)
    for f in findings:
        text = texts[f.line - 1]
        end = f.end_column - 1 if f.end_line == f.line else len(text)
        out.append(
            (
                f.line - 1,
                units(text[: f.column - 1]),
                units(text[:end]),
                f.code,
                f.message,
                1 if f.severity == "error" else 2,
                f.fix.title if f.fix else None,
            )
        )
    return sorted(out)


def _got(found: list[types.Diagnostic]) -> list[tuple]:
    return sorted(
        (
            d.range.start.line,
            d.range.start.character,
            d.range.end.character,
            d.code,
            d.message,
            int(d.severity),
            (d.data or {}).get("fix") if isinstance(d.data, dict) else getattr(d.data, "fix", None),
        )
        for d in found
    )


async def test_open_pass_equals_the_line_by_line_check(client):
    """The batched open pass (several chunks: it yields to the loop between them), the edits after it and a second
    file served from the cache report exactly what check_line reports line by line, dataset findings included."""
    eval_lines = [
        '{"messages": [{"role": "user", "content": "What is 11 + 1? 漢2"}], "expected": "answer: 12"}\n'
    ]
    eval_uri = open_doc(client, client.root / "heldout_eval.jsonl", "".join(eval_lines))
    assert await diagnostics(client, eval_uri) == []
    other = {"What is 11 + 1? 漢2"}
    lines = _mixed_lines(4500)
    uri = open_doc(client, client.root / "train.jsonl", "".join(lines))
    found = _got(await diagnostics(client, uri))
    expected = _expected(lines, "train", client.spec, other)
    assert {e[3] for e in expected} >= {
        "bom",
        "blank-line",
        "json-invalid",
        "duplicate-row",
        "train-eval-leak",
    }
    assert found == expected
    # Edits: break a line (the range in client units), then insert a copy of an earlier row (a new duplicate).
    target = 2001
    old = lines[target].rstrip("\r\n")
    lines[target] = old.replace('"assistant"', '"Assistant"') + lines[target][len(old) :]
    units = (
        (lambda s: len(s.encode("utf-8")))
        if client.spec == "neovim@v0.11"
        else (lambda s: len(s.encode("utf-16-le")) // 2)
    )
    change(client, uri, 2, target, 0, units(old), lines[target].rstrip("\r\n"))
    assert _got(await diagnostics(client, uri)) == _expected(lines, "train", client.spec, other)
    lines.insert(3000, lines[8])
    change(client, uri, 3, 3000, 0, 0, lines[3000])
    found = _got(await diagnostics(client, uri))
    assert found == _expected(lines, "train", client.spec, other)
    assert any(d[0] == 3000 and d[3] == "duplicate-row" for d in found)
    # Same line count, a row becomes a copy of another: only the re-checked line's fingerprint tells.
    old = lines[2500].rstrip("\r\n")
    lines[2500] = lines[9].rstrip("\r\n") + lines[2500][len(old) :]
    change(client, uri, 4, 2500, 0, units(old), lines[9].rstrip("\r\n"))
    found = _got(await diagnostics(client, uri))
    assert found == _expected(lines, "train", client.spec, other)
    assert any(d[0] == 2500 and d[3] == "duplicate-row" for d in found)
    # A paste of 40 lines (re-checked in a batch): copies of earlier lines (cached) and new ones, broken or not.
    pasted = [
        lines[100 + k] if k % 3 == 0 else row(f"pasted {k}", "ok" if k % 4 else "") + "\n" for k in range(40)
    ]
    lines[1500:1500] = pasted
    change(client, uri, 5, 1500, 0, 0, "".join(pasted))
    found = _got(await diagnostics(client, uri))
    assert found == _expected(lines, "train", client.spec, other)
    assert any(d[0] == 1500 and d[3] == "duplicate-row" for d in found)
    # The same rows without the duplicates in another train file: every line comes from the cache; a leak remains.
    seen: set[str] = set()
    unique = [line for line in lines if not (line.rstrip("\r\n") in seen or seen.add(line.rstrip("\r\n")))]
    copy = open_doc(client, client.root / "train-copy.jsonl", "".join(unique))
    found = _got(await diagnostics(client, copy))
    assert found == _expected(unique, "train", client.spec, other)
    assert [d[3] for d in found].count("train-eval-leak") == 1 and "duplicate-row" not in [
        d[3] for d in found
    ]


async def test_pairs_and_kto_files_get_their_own_checks_live(vscode):
    """A DPO pairs file and a KTO file are told from chat rows by their first row, and checked as such (the same
    checks as `machine train validate`), not flagged as another chat format."""
    user = [{"role": "user", "content": "What is 2 plus 2?"}]
    good = [{"role": "assistant", "content": "answer: 4"}]
    bad = [{"role": "assistant", "content": "Sure! It is 4."}]

    def pair(a: list, b: list) -> str:
        return json.dumps(
            {"comparison": {"prompt_conversation": user, "completion_A": a, "completion_B": b}, "label": "A"}
        )

    text = pair(good, bad) + "\n" + pair(good, good) + "\n"
    uri = open_doc(vscode, vscode.root / "pairs.jsonl", text)
    found = await diagnostics(vscode, uri)
    assert [(d.code, d.range.start.line) for d in found] == [("pair-same-sides", 1)], found
    assert found[0].range.start.character == pair(good, good).rindex("[{")
    kto = [
        json.dumps({"prompt": user, "completion": good, "label": True}),
        json.dumps({"prompt": user, "completion": [], "label": False}),
    ]
    uri = open_doc(vscode, vscode.root / "kto.jsonl", "\n".join(kto) + "\n")
    found = await diagnostics(vscode, uri)
    assert [(d.code, d.range.start.line) for d in found] == [("kto-empty-completion", 1)], found
