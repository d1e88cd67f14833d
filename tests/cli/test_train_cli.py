"""`machine train sft|smoke|run|eval ...` and `machine jobs`: scaffolds, dry runs, confirmations, compare, cancel.

The fast tests use the real parser, store, tokenizers and cookbook renderers (no model weights). The slow ones run
real tiny jobs on the embedded SmolLM2 through the CLI, which renders the same child-process events as the editor.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from machine_lsp.cli.main import main
from machine_lsp.core import evals
from machine_lsp.core.schema import Source, TagRecord, training_row_from_obj
from machine_lsp.core.store import Store
from machine_lsp.scaffold.config import load_config

REPO = Path(__file__).resolve().parents[2]
TOOL_ROW = {
    "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'},
        {"role": "assistant", "content": "answer: 21"},
    ]
}


def _row(a: int, b: int) -> dict:
    return {
        "messages": [
            {"role": "user", "content": f"What is {a} plus {b}?"},
            {"role": "assistant", "content": f"answer: {a + b}"},
        ]
    }


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    (root / ".machine").mkdir(parents=True)
    rows = [_row(a, b) for a, b in [(3, 4), (12, 30), (7, 8), (21, 5), (9, 9), (40, 2)]]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals_rows = [
        {
            "messages": [{"role": "user", "content": f"What is {a} plus {b}?"}],
            "expected": f"answer: {a + b}",
            "id": f"e{i}",
        }
        for i, (a, b) in enumerate([(5, 6), (13, 2), (30, 30)])
    ]
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals_rows))
    monkeypatch.chdir(root)
    monkeypatch.delenv("MACHINE_HOME", raising=False)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no stored Tinker login
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    return root


def _cli(
    cwd: Path, *argv: str, timeout: float = 120, stdin: int | None = subprocess.DEVNULL, **env: str
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "MACHINE_TORCH_THREADS": "1", "COLUMNS": "200", **env}
    full_env.pop("MACHINE_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "machine_lsp.cli.main", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        stdin=stdin,
    )


def _script(cwd: Path, name: str, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MACHINE_TORCH_THREADS": "1"}
    return subprocess.run(
        [sys.executable, name, *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


# ------------------------------------------------------------------------------------------------- scaffolds


def test_sft_writes_script_and_config_and_refuses_to_overwrite(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "train",
            "sft",
            "train.jsonl",
            "--epochs",
            "3",
            "--steps",
            "7",
            "--lr",
            "0.001",
            "--rank",
            "8",
            "--batch-size",
            "4",
        ]
    )
    assert code == 0
    cfg = load_config(proj / "machine.toml").train
    assert (cfg.engine, cfg.data, cfg.epochs, cfg.steps, cfg.learning_rate, cfg.rank, cfg.batch_size) == (
        "local",
        "train.jsonl",
        3,
        7,
        0.001,
        8,
        4,
    )
    script = (proj / "train_sft.py").read_text()
    assert "get_engine(ENGINE" in script and 'ENGINE = "local"' in script
    compile(script, "train_sft.py", "exec")

    (proj / "train_sft.py").write_text("# my edits\n")
    capsys.readouterr()
    assert main(["train", "sft", "train.jsonl", "--engine", "tinker"]) == 2
    assert "already exist" in capsys.readouterr().err
    assert (proj / "train_sft.py").read_text() == "# my edits\n"  # untouched
    assert load_config(proj / "machine.toml").train.engine == "local"

    assert main(["train", "sft", "train.jsonl", "--engine", "tinker", "--force"]) == 0
    assert "supervised import train" in (proj / "train_sft.py").read_text()
    assert load_config(proj / "machine.toml").train.engine == "tinker"


def test_sft_bad_input_is_a_usage_error(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "sft", "nope.jsonl"]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err
    assert main(["train", "sft", "train.jsonl", "--batch-size", "0"]) == 2
    assert "batch_size must be >= 1" in capsys.readouterr().err
    assert not (proj / "train_sft.py").exists() and not (proj / "machine.toml").exists()


@pytest.mark.skipif(
    shutil.which("ruff", path=str(Path(sys.executable).parent)) is None, reason="ruff not installed"
)
def test_scaffolds_are_lint_clean(proj: Path) -> None:
    ruff = str(Path(sys.executable).parent / "ruff")
    for engine in ("local", "tinker"):
        assert main(["train", "sft", "--engine", engine, "--force"]) == 0
        assert main(["train", "eval", "init", "--force"]) == 0
        out = subprocess.run(
            [ruff, "check", "--config", str(REPO / "pyproject.toml"), "train_sft.py", "eval.py"],
            cwd=proj,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout


def test_local_dry_run_builds_config_and_first_batch(proj: Path) -> None:
    assert main(["train", "sft", "train.jsonl", "--batch-size", "4", "--epochs", "2"]) == 0
    out = _script(proj, "train_sft.py", "--dry-run")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "6 rows x 2 epochs = 4 steps of batch 4 (as configured)" in out.stdout
    assert "first batch: 4 rows," in out.stdout and "trained tokens" in out.stdout
    assert not list((proj / ".machine").glob("runs/*")), "a dry run creates no run"


def test_tinker_dry_run_offline_with_tool_calls_and_the_store(proj: Path) -> None:
    """The Tinker scaffold builds cookbook's train.Config and a first batch offline, from our parser (tool calls
    break the cookbook's Arrow builder) and from the store when no FILE is given."""
    store = Store.open(proj)
    for i, row in enumerate([TOOL_ROW, _row(1, 2)]):
        store.append(
            TagRecord(
                id=f"t{i}",
                verdict="good",
                messages=training_row_from_obj(row).messages,
                source=Source(kind="cli", uri="file:///x.jsonl"),
                created_at="2026-11-30T00:00:00Z",
                tool_version="test",
            )
        )
    assert main(["train", "sft", "--engine", "tinker", "--steps", "3"]) == 0
    out = _script(proj, "train_sft.py", "--dry-run")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "thinkingmachines/Inkling-Small (tml_v0)" in out.stdout and "max_steps 3" in out.stdout
    assert "first batch: 2 rows," in out.stdout

    # without --dry-run and without a key: a precise error, no traceback
    started = time.monotonic()
    out = _script(proj, "train_sft.py", timeout=60)
    assert out.returncode == 2 and time.monotonic() - started < 40
    assert "no Tinker API key" in out.stderr and "Traceback" not in out.stderr


def test_tinker_verbs_need_yes_without_a_terminal(proj: Path) -> None:
    assert main(["train", "sft", "train.jsonl", "--engine", "tinker"]) == 0
    for argv in (
        ["train", "smoke"],
        ["train", "run"],
        ["train", "eval", "baseline", "--data", "eval.jsonl"],
        ["train", "eval", "checkpoint", "tinker://r/sampler_weights/s", "--data", "eval.jsonl"],
    ):
        out = _cli(proj, *argv)
        assert out.returncode == 2, (argv, out.stderr)
        # what will run, about how many tokens and (a training run) at what price, then the way to go ahead
        assert "runs on Tinker and costs money (" in out.stderr and "): pass --yes" in out.stderr
        if argv[1] in ("smoke", "run"):  # the pricing file is on a closed local port here (tests/conftest.py)
            assert "tokens; price unknown (could not read Tinker's pricing" in out.stderr, out.stderr
        else:
            assert "tokens): pass --yes" in out.stderr
        assert "on tinker:" in out.stderr
        if argv == ["train", "run"]:  # the plan comes first, sized by the rows (core.run_plan)
            assert out.stdout.startswith(
                "plan: train-run on tinker: train.jsonl: 6 rows x 6 epochs = 6 steps"
            )
    assert not (proj / ".machine" / "runs").exists()
    out = _cli(proj, "train", "smoke", "--yes", "--engine", "tinker", timeout=60)
    assert out.returncode == 1 and "no Tinker API key" in out.stderr


def test_a_local_tinker_server_costs_nothing_so_nobody_is_asked(
    proj: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[tinker] base_url` on loopback (what `machine tinker serve` writes): no --yes needed; a hosted URL still asks."""
    from machine_lsp.tinker_server.process import free_port

    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    assert main(["train", "sft", "train.jsonl", "--engine", "tinker"]) == 0
    port = free_port()  # nothing listens there: the job starts, then fails its preflight at once
    with (proj / "machine.toml").open("a") as f:
        f.write(f"\n[tinker]\nbase_url = 'http://127.0.0.1:{port}'\n")
    out = _cli(proj, "train", "smoke", timeout=90)
    assert "costs money" not in out.stderr and "--yes" not in out.stderr
    assert out.returncode == 1 and f"127.0.0.1:{port}" in out.stderr and "refused" in out.stderr
    hosted = _cli(proj, "train", "smoke", TINKER_BASE_URL="https://tinker.example.invalid")
    assert hosted.returncode == 2 and "costs money" in hosted.stderr


def test_eval_init_writes_eval_py(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "eval", "init"]) == 0
    assert (proj / "eval.py").is_file() and (proj / "machine.toml").is_file()
    compile((proj / "eval.py").read_text(), "eval.py", "exec")
    assert main(["train", "eval", "init"]) == 2
    assert "already exists" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- compare


def _result(name: str, correct: list[bool], fmt: list[bool]) -> evals.EvalResult:
    rows = [
        evals.RowResult(
            id=f"e{i}",
            prompt=f"q{i}",
            expected="answer: 1",
            output="answer: 1" if c else "nope",
            correct=c,
            format_ok=f,
        )
        for i, (c, f) in enumerate(zip(correct, fmt, strict=True))
    ]
    return evals.build_result(
        rows, name=name, model="m", checkpoint=None, engine="local", data_path="eval.jsonl", data_sha256="abc"
    )


def test_compare_prints_the_statistics_and_writes_a_chart(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = proj / "eval_results"
    out_dir.mkdir()
    a = _result("baseline", [False] * 8 + [True, True], [False] * 10)
    b = _result("step-60", [True] * 7 + [False, True, False], [True] * 10)
    (out_dir / "baseline.json").write_bytes(evals.encode_result(a))
    (out_dir / "step-60.json").write_bytes(evals.encode_result(b))
    code = main(
        ["train", "eval", "compare", "eval_results/baseline.json", "eval_results/step-60.json", "--json"]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    # gained: rows 0-6 (7), lost: row 9 (1) -> p = 2 * (1 + 8) / 256
    assert (data["gained"], data["lost"], data["a_correct"], data["b_correct"]) == (7, 1, 2, 8)
    assert data["mcnemar_p"] == pytest.approx(18 / 256)
    assert data["delta"] == pytest.approx(0.6) and data["b_format_rate"] == 1.0
    assert Path(data["chart"]).stat().st_size > 5000

    code = main(["train", "eval", "compare", "eval_results/baseline.json", "eval_results/step-60.json"])
    text = capsys.readouterr().out
    assert code == 0 and "McNemar p = 0.07031" in text and "gained 7" in text and "changed rows (8)" in text

    assert main(["train", "eval", "compare", "eval_results/baseline.json", "missing.json"]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err


def test_jobs_list_shows_runs_and_lost_ones(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from machine_lsp.core import runs

    runs_dir = proj / ".machine" / "runs"
    run_dir, manifest = runs.create_run_dir(runs_dir, "train-run", cwd=proj, args={})
    manifest.pid = 2**22 + 12345  # no such process: the run was killed without a chance to record it
    runs.write_manifest(run_dir, manifest)
    assert main(["jobs", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["id"] == run_dir.name and data[0]["effective_status"] == "lost"
    assert main(["jobs", "cancel", run_dir.name]) == 1
    assert "is gone" in capsys.readouterr().out
    assert main(["jobs", "cancel", "nope"]) == 2


# ------------------------------------------------------------------------------------------------- slow: real runs


@pytest.mark.slow
def test_cli_smoke_run_cancel_and_eval_on_the_local_engine(proj: Path) -> None:
    from machine_lsp.engines import smollm2

    smollm2.ensure_model()
    # 400 steps: the cancel below always comes long before the end (with 40 a loaded run once finished first)
    assert (
        main(["train", "sft", "train.jsonl", "--batch-size", "3", "--steps", "400", "--save-every", "2"]) == 0
    )

    smoke = _cli(proj, "train", "smoke", timeout=300)
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    assert "step 1/2 loss" in smoke.stdout and "step 2/2 loss" in smoke.stdout and "smoke ok" in smoke.stdout

    env = {**os.environ, "PYTHONPATH": str(REPO), "MACHINE_TORCH_THREADS": "1", "COLUMNS": "200"}
    cli = subprocess.Popen(
        [sys.executable, "-m", "machine_lsp.cli.main", "train", "run"],
        cwd=proj,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 300
        manifest = None
        while time.monotonic() < deadline:
            time.sleep(0.5)
            found = [p for p in (proj / ".machine" / "runs").glob("*train-run*/manifest.json")]
            if found:
                manifest = json.loads(found[0].read_text())
                if manifest["checkpoints"]:
                    break
        assert manifest and manifest["checkpoints"], "no checkpoint within the bound"
        # The outcome, not a stopwatch: a cancel ends the job however loaded the machine is (a job that has not
        # stopped within the grace period is killed and recorded cancelled, see core.runs.stop_job).
        cancel = _cli(proj, "jobs", "cancel", manifest["id"][-4:], timeout=300)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        assert "cancelled; last checkpoint local://" in cancel.stdout
        out, err = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:
            cli.send_signal(signal.SIGTERM)
            cli.wait(timeout=30)
    assert cli.returncode == 130, err[-2000:]
    assert "checkpoint step-2" in out and "cancelled" in err

    listing = _cli(proj, "jobs")
    assert "cancelled" in listing.stdout and "train-smoke" in listing.stdout

    base = _cli(proj, "train", "eval", "baseline", "--data", "eval.jsonl", "--max-tokens", "12", timeout=300)
    assert base.returncode == 0, base.stderr[-2000:]
    assert "eval_results/baseline.json" in base.stdout
    result = json.loads((proj / "eval_results" / "baseline.json").read_text())
    assert result["n"] == 3 and result["engine"] == "local" and result["checkpoint"] is None

    # the scaffolded eval.py reproduces the job's greedy outputs on the base model
    assert main(["train", "eval", "init"]) == 0
    (proj / "eval_results" / "baseline.json").rename(proj / "eval_results" / "baseline-job.json")
    cfg_text = (proj / "machine.toml").read_text().replace("max_tokens = 32", "max_tokens = 12")
    (proj / "machine.toml").write_text(cfg_text)
    script = _script(proj, "eval.py", "--data", "eval.jsonl", timeout=300)
    assert script.returncode == 0, script.stderr[-2000:]
    again = json.loads((proj / "eval_results" / "baseline.json").read_text())
    assert [r["output"] for r in again["rows"]] == [r["output"] for r in result["rows"]]


@pytest.mark.slow
def test_local_train_sft_script_trains_and_records_its_checkpoint(proj: Path) -> None:
    from machine_lsp.engines import smollm2

    smollm2.ensure_model()
    assert (
        main(["train", "sft", "train.jsonl", "--steps", "2", "--batch-size", "3", "--save-every", "0"]) == 0
    )
    out = _script(proj, "train_sft.py", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "step 1/2  loss" in out.stdout and "step 2/2  loss" in out.stdout
    manifests = list((proj / ".machine" / "runs").glob("*/manifest.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert manifest["status"] == "done" and manifest["job"] == "train_sft.py" and manifest["steps_done"] == 2
    address = manifest["last_checkpoint"]
    assert address == f"local://{manifests[0].parent.name}/step-2" and f"checkpoint {address}" in out.stdout
    assert (manifests[0].parent / "checkpoints" / "step-2" / "manifest.json").is_file()
    listing = _cli(proj, "jobs")
    assert "train_sft.py" in listing.stdout and "done" in listing.stdout
