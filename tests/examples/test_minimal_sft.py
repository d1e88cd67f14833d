"""examples/minimal-sft: the corpus generator, and the README's commands run as written (with tiny sizes)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from example_modules import load_module, read_jsonl

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "minimal-sft"
README = EXAMPLE / "README.md"
VENV_BIN = Path(sys.executable).parent


make_corpus = load_module("minimal_sft_make_corpus", EXAMPLE / "make_corpus.py")


def pair_of(row: dict) -> frozenset[int] | tuple[int, int]:
    """The unordered operand pair of a row's question."""
    nums = [int(n) for n in re.findall(r"\d+", row["messages"][0]["content"])]
    assert len(nums) == 2, row
    return tuple(sorted(nums))  # type: ignore[return-value]


def run_corpus(out: Path, *args: str) -> Path:
    assert make_corpus.main(["--out", str(out), *args]) == 0
    return out


# ------------------------------------------------------------------------------------------------ make_corpus


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    a = run_corpus(tmp_path / "a", "--seed", "7")
    b = run_corpus(tmp_path / "b", "--seed", "7")
    names = sorted(p.name for p in a.iterdir())
    assert names == ["eval.jsonl", "manifest.json", "train.jsonl"]
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_other_seed_gives_a_different_draw(tmp_path: Path) -> None:
    a = run_corpus(tmp_path / "a", "--seed", "1")
    b = run_corpus(tmp_path / "b", "--seed", "2")
    pairs_a = {pair_of(r) for r in read_jsonl(a / "train.jsonl") + read_jsonl(a / "eval.jsonl")}
    pairs_b = {pair_of(r) for r in read_jsonl(b / "train.jsonl") + read_jsonl(b / "eval.jsonl")}
    assert pairs_a != pairs_b
    assert (a / "train.jsonl").read_bytes() != (b / "train.jsonl").read_bytes()
    assert json.loads((a / "manifest.json").read_text())["seed"] == 1


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 99])
def test_pairs_disjoint_and_unique(tmp_path: Path, seed: int) -> None:
    out = run_corpus(tmp_path, "--seed", str(seed))
    train, evals = read_jsonl(out / "train.jsonl"), read_jsonl(out / "eval.jsonl")
    train_pairs = [pair_of(r) for r in train]
    eval_pairs = [pair_of(r) for r in evals]
    assert len(set(train_pairs)) == len(train_pairs)
    assert len(set(eval_pairs)) == len(eval_pairs)
    assert not set(train_pairs) & set(eval_pairs)


def test_rows_have_the_taught_shape(tmp_path: Path) -> None:
    out = run_corpus(tmp_path)
    for row in read_jsonl(out / "train.jsonl"):
        user, assistant = row["messages"]
        a, b = (int(n) for n in re.findall(r"\d+", user["content"]))
        assert user["role"] == "user" and assistant["role"] == "assistant"
        assert assistant["content"] == f"answer: {a + b}"
        assert "answer" not in user["content"].lower()  # the question never states the format
    ids = []
    for row in read_jsonl(out / "eval.jsonl"):
        (user,) = row["messages"]
        a, b = (int(n) for n in re.findall(r"\d+", user["content"]))
        assert row["expected"] == f"answer: {a + b}" and row["match"] == "exact"
        assert "answer" not in user["content"].lower()
        ids.append(row["id"])
    assert len(set(ids)) == len(ids)


def test_sizes_configurable(tmp_path: Path) -> None:
    out = run_corpus(tmp_path, "--train", "5", "--eval", "3")
    assert len(read_jsonl(out / "train.jsonl")) == 5
    assert len(read_jsonl(out / "eval.jsonl")) == 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"] == {"train": 5, "eval": 3}


def test_defaults_are_48_and_24(tmp_path: Path) -> None:
    out = run_corpus(tmp_path)
    assert len(read_jsonl(out / "train.jsonl")) == 48
    assert len(read_jsonl(out / "eval.jsonl")) == 24


def test_manifest_checksums_match_files(tmp_path: Path) -> None:
    out = run_corpus(tmp_path, "--seed", "3")
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == {"train.jsonl", "eval.jsonl"}
    for name, meta in manifest["files"].items():
        data = (out / name).read_bytes()
        assert meta["sha256"] == hashlib.sha256(data).hexdigest()
        assert meta["rows"] == len(data.splitlines())


def test_too_many_rows_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert make_corpus.main(["--out", str(tmp_path), "--train", "5000"]) == 2
    assert "distinct pairs" in capsys.readouterr().err


def example_probe() -> list[str]:
    """The bleed probe of this example: the engine's built-in questions plus probe_extra.txt."""
    from machine_lsp.core import evals

    return evals.probe_prompts((EXAMPLE / "probe_extra.txt").read_text(encoding="utf-8").splitlines())


def test_the_runs_anchor_prompts_are_disjoint_from_this_examples_probe() -> None:
    """The anchor rows `machine retrain` adds (core.anchors) never ask what the bleed probe asks, rewordings
    included: the probe must measure requests the model never trained on."""
    from machine_lsp.core import anchors

    probe = example_probe()
    assert len(probe) >= 12 + 10, "the engine's built-in probe set plus probe_extra.txt"
    assert anchors.near_duplicates(anchors.ANCHOR_POOL, probe) == []


# ------------------------------------------------------------------------------------------------ README


def readme_commands() -> list[str]:
    """Shell commands of the README's terminal walkthrough: ```sh blocks, comments and blank lines dropped."""
    text = README.read_text(encoding="utf-8")
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" # ")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


TINY = {
    r"--train \d+": "--train 6",
    r"--eval \d+": "--eval 3",
    r"seq 1 \d+": "seq 1 6",  # tag the 6 rows
    r"--steps \d+": "--steps 2",
}


def tiny(command: str) -> str:
    for pattern, repl in TINY.items():
        command = re.sub(pattern, repl, command)
    return command


def test_readme_has_the_whole_terminal_loop() -> None:
    commands = readme_commands()
    joined = "\n".join(commands)
    for verb in (
        "make_corpus.py",
        "machine train validate",
        "machine good",
        "machine train sft",
        "machine train smoke",
        "machine train eval init",
        "machine train eval baseline",
        "machine retrain",
        "machine train eval checkpoint",
        "machine train eval compare",
        "machine train eval probe",
    ):
        assert verb in joined, verb


def test_readme_commands_parse_with_the_cli() -> None:
    """Every `machine ...` line of the README is accepted by the real CLI parser (cheap drift check)."""
    from machine_lsp.cli.main import build_parser

    parser = build_parser()
    for command in readme_commands():
        argv = shlex.split(command)
        if argv[0] != "machine":
            continue
        argv = [a if "$" not in a else "local://run/final" for a in argv[1:]]
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse exits on unknown verbs/options
            raise AssertionError(f"the CLI rejects the README command: {command}") from exc
        assert getattr(args, "func", None) is not None, command


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_readme_commands_run_as_written(tmp_path: Path) -> None:
    """Runs the README's terminal walkthrough in a copy of the example, with tiny sizes; trains 2 real steps."""
    work = tmp_path / "minimal-sft"
    work.mkdir()
    for name in ("make_corpus.py", "probe_extra.txt"):
        shutil.copy(EXAMPLE / name, work / name)
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MACHINE_HOME", None)
    script = "set -euo pipefail\n" + "\n".join(tiny(c) for c in readme_commands()) + "\n"
    (tmp_path / "readme.sh").write_text(script)
    proc = subprocess.run(
        ["bash", str(tmp_path / "readme.sh")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
    )
    assert proc.returncode == 0, (
        f"README commands failed:\n{script}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    )
    results = work / "project" / "eval_results"
    baseline = json.loads((results / "baseline.json").read_text())
    trained = json.loads((results / "trained.json").read_text())
    assert baseline["n"] == trained["n"] == 3
    assert baseline["checkpoint"] in (None, "") and trained["checkpoint"].startswith("local://")
    probes = list(results.glob("probe-*.json"))
    assert len(probes) == 1
    probe = json.loads(probes[0].read_text())["probe"]
    assert probe["n"] == len(example_probe())
    manifest = json.loads((work / "data" / "manifest.json").read_text())
    assert manifest["counts"] == {"train": 6, "eval": 3}
    runs = work / "project" / ".machine" / "runs"
    train_runs = [json.loads(p.read_text()) for p in runs.glob("*retrain*/manifest.json")]
    assert [r["steps_done"] for r in train_runs] == [2]
    # 6 tagged rows (the gate evaluates eval.jsonl, nothing held out of them): ceil(0.5 x 6) = 3 anchor rows
    assert train_runs[0]["anchors"]["added"] == 3 and train_runs[0]["anchors"]["counts"]["pool"] == 3
    assert "Retrained on 6 tagged rows plus 3 anchor rows" in proc.stdout


def test_demo_commands_parse_with_the_cli(tmp_path: Path) -> None:
    """The commands run_demo.py (`make demo`) runs are accepted by the real CLI parser."""
    from machine_lsp.cli.main import build_parser

    run_demo = load_module("minimal_sft_run_demo", EXAMPLE / "run_demo.py")
    parser = build_parser()
    prefix = run_demo.machine_argv()
    for scope in ("auto", "off"):
        args = run_demo.parse_args(["--scope", scope])
        stages = run_demo.stages_before_checkpoint(args) + run_demo.stages_after_checkpoint(
            "local://run/step-30", tmp_path
        )
        commands = [argv for s in stages for argv in (s.argv, *s.more)]
        machine_commands = [argv for argv in commands if argv[: len(prefix)] == prefix]
        assert len(machine_commands) == len(commands) - 1  # all but make_corpus.py
        assert (
            sum(argv[len(prefix)] == "good" for argv in machine_commands) == 48
        )  # every training row tagged
        for argv in machine_commands:
            try:
                parsed = parser.parse_args(argv[len(prefix) :])
            except SystemExit as exc:
                raise AssertionError(f"the CLI rejects the demo command: {argv}") from exc
            assert getattr(parsed, "func", None) is not None
            if argv[len(prefix)] == "retrain":
                assert parsed.scope == scope
        assert make_corpus.parse_args(stages[0].argv[2:]).train == 48


# ------------------------------------------------------------------------------------------------ RESULTS.md

RESULTS_DOC = EXAMPLE / "docs" / "RESULTS.md"
RESULTS_DIR = EXAMPLE / "docs" / "results"


def test_results_checksums_match_the_recorded_files() -> None:
    listed = dict(
        re.findall(r"\| `results/([^`]+)` \| `([0-9a-f]{64})` \|", RESULTS_DOC.read_text(encoding="utf-8"))
    )
    on_disk = {p.relative_to(RESULTS_DIR).as_posix() for p in RESULTS_DIR.rglob("*") if p.is_file()}
    assert set(listed) == on_disk
    for name, digest in listed.items():
        assert hashlib.sha256((RESULTS_DIR / name).read_bytes()).hexdigest() == digest, name


def test_results_headline_matches_the_result_files() -> None:
    lines = RESULTS_DOC.read_text(encoding="utf-8").splitlines()
    for label, variant in (("| **scoped (default)**", "scoped"), ("| without scoping", "plain")):
        (row,) = [line for line in lines if line.startswith(label)]
        trained = json.loads((RESULTS_DIR / variant / "trained.json").read_text())
        probe = json.loads((RESULTS_DIR / variant / "probe-trained.json").read_text())["probe"]["rows"]
        timings = json.loads((RESULTS_DIR / variant / "timings.json").read_text())
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
        builtin = [r for r in probe if r["source"] == "builtin"]
        user = [r for r in probe if r["source"] == "user"]
        assert cells[3] == f"{trained['correct']}/{trained['n']}"
        assert cells[4] == f"{trained['format_ok']}/{trained['n']}"
        assert cells[5] == f"{sum(r['bleeds'] for r in builtin)}/{len(builtin)}"
        assert cells[6] == f"{sum(r['bleeds'] for r in user)}/{len(user)}"
        assert cells[7].startswith(f"{timings['total_seconds']} s")
