"""`FILE[:LINE]` has one reading (core.sessions.split_file_line) for `machine good --from` and the editor's
`machine.tag {from}`. Before, `rows.jsonl:` was rows.jsonl to the CLI and a missing file to the editor, and an
existing file named `notes:3` was that file to the CLI and line 3 of `notes` to the editor. The real server over
stdio and the real CLI, each in a project holding the same files, must tag the same turns."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_helpers import command, row, store_rows

from machine_lsp.cli.main import main

SPECS = ("rows.jsonl:", "rows.jsonl:1", "notes:3")


def _write_files(root: Path) -> None:
    (root / "rows.jsonl").write_text(row("q1", "first row") + "\n" + row("q2", "second row") + "\n")
    (root / "notes").write_text("".join(row(f"n{i}", f"notes line {i}") + "\n" for i in range(1, 4)))
    (root / "notes:3").write_text(row("q", "the file named notes:3") + "\n")


def _answers(store_path: Path) -> list[str]:
    return [r["messages"][-1]["content"] for r in store_rows(store_path)]


async def test_the_cli_and_the_editor_read_from_the_same_way(
    vscode, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, root = vscode, vscode.root
    _write_files(root)
    for spec in SPECS:
        await command(client, "machine.tag", {"from": spec, "verdict": "good"})

    cli_root = tmp_path_factory.mktemp("cli-project")
    _write_files(cli_root)
    monkeypatch.chdir(cli_root)
    monkeypatch.setenv("MACHINE_HOME", str(cli_root / ".machine"))
    for spec in SPECS:
        assert main(["good", "--from", spec]) == 0, spec

    expected = ["second row", "first row", "the file named notes:3"]
    assert _answers(root) == expected
    assert _answers(cli_root) == expected
