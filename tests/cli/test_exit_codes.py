"""Exit codes live in one module (core.exit_codes) and usage errors are one exception (core.exit_codes.UsageError):
every verb, the CLI's entry and the job runner mean the same by each number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from machine_lsp.cli.main import main
from machine_lsp.core import exit_codes

PACKAGE = Path(__file__).resolve().parents[2] / "machine_lsp"


def test_no_module_defines_its_own_exit_codes() -> None:
    defining = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"^EXIT_\w+(, EXIT_\w+)* *=", path.read_text(encoding="utf-8"), re.M)
    ]
    assert defining == ["core/exit_codes.py"]
    assert (exit_codes.EXIT_OK, exit_codes.EXIT_FAILED, exit_codes.EXIT_USAGE) == (0, 1, 2)


def test_a_usage_error_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", "sft", "missing.jsonl"]) == exit_codes.EXIT_USAGE
    err = capsys.readouterr().err
    assert (
        "missing.jsonl: no such file" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    )
    assert main([]) == exit_codes.EXIT_USAGE
