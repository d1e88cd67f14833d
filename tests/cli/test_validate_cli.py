"""`machine train validate`: JSON shape, human output, exit codes, the store mode and the token checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from machine_lsp.cli.main import main
from machine_lsp.core.schema import Message, Source, TagRecord
from machine_lsp.core.store import Store

GOOD = json.dumps(
    {"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]}
)
OTHER = json.dumps(
    {"messages": [{"role": "user", "content": "What is 3+3?"}, {"role": "assistant", "content": "6"}]}
)
BAD_ROLE = GOOD.replace('"assistant"', '"Assistant"')
EVAL_LEAK = json.dumps({"messages": [{"role": "user", "content": "What is 3+3?"}], "expected": "6"})
EVAL_NEW = json.dumps({"messages": [{"role": "user", "content": "What is 5+5?"}], "expected": "10"})


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["train", "validate", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_clean_file_exits_0_with_the_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "train.jsonl", GOOD, OTHER)
    code, report = run_json(capsys, str(path))
    assert code == 0
    assert set(report) == {"file", "rows", "ok", "findings", "stats"}
    assert (report["file"], report["rows"], report["ok"], report["findings"]) == (str(path), 2, True, [])
    assert report["stats"]["train_rows"] == 2 and report["stats"]["bytes"] == path.stat().st_size


def test_errors_exit_1_and_findings_have_exactly_the_documented_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "train.jsonl", GOOD, BAD_ROLE, "", "null")
    code, report = run_json(capsys, str(path))
    assert code == 1 and report["ok"] is False
    keys = {"line", "column", "end_line", "end_column", "severity", "code", "message", "fix"}
    assert all(set(f) == keys for f in report["findings"])
    assert [(f["line"], f["code"], f["severity"]) for f in report["findings"]] == [
        (2, "role-unknown", "error"),
        (3, "blank-line", "warning"),
        (4, "not-object", "error"),
    ]
    role = report["findings"][0]
    assert BAD_ROLE[role["column"] - 1 : role["end_column"] - 1] == '"Assistant"'


def test_warnings_alone_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "train.jsonl", GOOD, GOOD)
    code, report = run_json(capsys, str(path))
    assert code == 0 and report["ok"] is True
    assert [f["code"] for f in report["findings"]] == ["duplicate-row"]


def test_eval_file_is_reported_nested_with_leakage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = write(tmp_path / "train.jsonl", GOOD, OTHER)
    evals = write(tmp_path / "eval.jsonl", EVAL_NEW, EVAL_LEAK)
    code, report = run_json(capsys, str(train), "--eval", str(evals))
    assert code == 1 and report["ok"] is False
    assert [(f["line"], f["code"]) for f in report["findings"]] == [(2, "train-eval-leak")]
    assert report["eval"]["file"] == str(evals) and report["eval"]["rows"] == 2
    assert [(f["line"], f["code"]) for f in report["eval"]["findings"]] == [(2, "train-eval-leak")]


def test_human_output_lists_findings_as_file_line_col(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "train.jsonl", GOOD, BAD_ROLE)
    assert main(["train", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    column = BAD_ROLE.index('"Assistant"') + 1
    assert f"{path}:2:{column}: error role-unknown unknown role" in out
    assert "validation" in out and "errors" in out


@pytest.mark.parametrize("name", ["missing", "directory", "binary"])
def test_unreadable_input_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    target = {"missing": tmp_path / "nope.jsonl", "directory": tmp_path, "binary": tmp_path / "x.bin"}[name]
    if name == "binary":
        target.write_bytes(b"\x00\x01\x02garbage")
    assert main(["train", "validate", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("machine: ") and str(target) in captured.err


def test_bad_usage_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "train.jsonl", GOOD)
    assert main(["train", "validate", str(path), "--max-length", "0"]) == 2
    assert main(["train", "validate", "--eval", str(path)]) == 2
    with pytest.raises(SystemExit) as exc:  # argparse's own errors exit 2 as well
        main(["train", "validate", str(path), "--max-length", "many"])
    assert exc.value.code == 2


def test_store_mode_validates_good_rows_as_sft(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    store = Store.open()
    messages = [Message(role="user", content="2+2?"), Message(role="assistant", content="4")]
    for verdict, ident in (("good", "a"), ("bad", "b")):
        store.append(
            TagRecord(
                id=ident,
                verdict=verdict,
                messages=messages if verdict == "good" else messages[:1],
                source=Source(kind="cli", uri="file:///x.jsonl"),
                created_at="2026-11-30T00:00:00Z",
                tool_version="test",
            )
        )
    code, report = run_json(capsys)
    assert code == 0
    assert report["rows"] == 1 and report["findings"] == [] and report["file"].startswith("<store")


def test_console_script_exits_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path / "train.jsonl", "[" * 50_000 + "]" * 50_000, GOOD)
    done = subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", "train", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert "json-too-deep" in done.stdout


def test_token_checks_with_the_embedded_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long_answer = json.dumps(
        {
            "messages": [
                {"role": "user", "content": "Count."},
                {"role": "assistant", "content": " ".join(["one"] * 40)},
            ]
        }
    )
    long_prompt = json.dumps(
        {
            "messages": [
                {"role": "user", "content": " ".join(["why"] * 40)},
                {"role": "assistant", "content": "ok"},
            ]
        }
    )
    train = write(tmp_path / "train.jsonl", GOOD, long_answer, BAD_ROLE, long_prompt)
    evals = write(tmp_path / "eval.jsonl", EVAL_NEW)
    code, report = run_json(capsys, str(train), "--eval", str(evals), "--max-length", "30")
    assert code == 1
    tokens = report["stats"]["tokens"]
    assert tokens["renderer"] == "qwen3_instruct"
    assert tokens["rendered_train_rows"] == 3  # the row with a role error is not rendered
    assert 0 < tokens["trained_tokens"] < tokens["tokens"]
    assert tokens["max_tokens"] > 30
    assert [(f["line"], f["code"]) for f in report["findings"]] == [
        (2, "too-long"),
        (3, "role-unknown"),
        (4, "no-trained-tokens"),  # the 40-word prompt fills the 30 tokens: the answer is cut away
        (4, "too-long"),
    ]
    eval_tokens = report["eval"]["stats"]["tokens"]
    assert eval_tokens["rendered_eval_rows"] == 1 and eval_tokens["eval_prompt_tokens"] > 0
    assert report["eval"]["findings"] == []


def test_token_checks_render_with_the_configured_train_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    two_turns = json.dumps(
        {
            "messages": [
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "answer: 4"},
                {"role": "user", "content": "And 3+3?"},
                {"role": "assistant", "content": "answer: 6"},
            ]
        }
    )
    train = write(tmp_path / "train.jsonl", two_turns)
    monkeypatch.chdir(tmp_path)
    counts = {}
    for train_on in ("all_assistant_messages", "last_assistant_message"):
        (tmp_path / "machine.toml").write_text(f'[train]\ntrain_on = "{train_on}"\n', encoding="utf-8")
        code, report = run_json(capsys, str(train), "--model", "HuggingFaceTB/SmolLM2-135M-Instruct")
        assert code == 0, report
        counts[train_on] = report["stats"]["tokens"]
    everything, last = counts["all_assistant_messages"], counts["last_assistant_message"]
    assert everything["tokens"] == last["tokens"]
    assert 0 < last["trained_tokens"] < everything["trained_tokens"]
    (tmp_path / "machine.toml").write_text('[train]\ntrain_on = "nonsense"\n', encoding="utf-8")
    assert main(["train", "validate", str(train), "--max-length", "100"]) == 2
    assert "train_on" in capsys.readouterr().err


def test_unavailable_tokenizer_exits_2_and_says_how_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "train.jsonl", GOOD)
    assert main(["train", "validate", str(path), "--model", "acme/not-a-real-model"]) == 2
    err = capsys.readouterr().err
    assert "not available offline" in err and "local Hugging Face model directory" in err


def test_validator_and_its_command_import_nothing_heavy() -> None:
    code = (
        "import sys, machine_lsp.core.validate, machine_lsp.engines.readiness, machine_lsp.cli.validate_command;"
        "print(','.join(m for m in ('torch', 'transformers', 'tinker', 'tinker_cookbook', 'peft', 'pygls')"
        " if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_a_row_longer_than_the_model_gets_the_tools_finding_not_a_raw_transformers_warning(
    tmp_path: Path,
) -> None:
    # Over SmolLM2's 8192 tokens: transformers would log "Token indices sequence length is longer than ..."
    long_row = json.dumps(
        {
            "messages": [
                {"role": "user", "content": " ".join(["why"] * 9000)},
                {"role": "assistant", "content": "ok"},
            ]
        }
    )
    path = write(tmp_path / "train.jsonl", GOOD, long_row)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "machine_lsp.cli.main",
            "train",
            "validate",
            str(path),
            "--max-length",
            "8192",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Token indices sequence length" not in done.stderr + done.stdout, done.stderr
    assert done.returncode == 1 and ":2:1: error too-long the row is" in done.stdout, done.stdout


def test_data_quoted_in_a_finding_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = json.dumps(
        {"messages": [{"role": "Us\x1b[2Jer", "content": "hi"}, {"role": "assistant", "content": "ok"}]}
    )
    path = write(tmp_path / "train.jsonl", row)
    assert main(["train", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and 'unknown role "Us\\x1b[2Jer"' in out, repr(out)
