"""examples/minimal-preference: the corpus, a tiny end-to-end run of run_example.py (real SmolLM2, 1 step per
stage, 2 held-out rows) and write_results.py, and the recorded RESULTS.md against its result files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from example_modules import load_module, read_jsonl

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "minimal-preference"


make_corpus = load_module("minimal_preference_make_corpus", EXAMPLE / "make_corpus.py")
sys.path.insert(0, str(EXAMPLE))
write_results = load_module("minimal_preference_write_results", EXAMPLE / "write_results.py")


def operands(text: str) -> tuple[int, ...]:
    return tuple(sorted(int(n) for n in re.findall(r"\d+", text)[:2]))


def test_corpus_is_seeded_and_shaped_as_the_exports(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert make_corpus.main(["--out", str(a)]) == make_corpus.main(["--out", str(b)]) == 0
    for name in (
        "sft_full.jsonl",
        "sft_half.jsonl",
        "pairs.jsonl",
        "kto.jsonl",
        "eval.jsonl",
        "manifest.json",
    ):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    full, half = read_jsonl(a / "sft_full.jsonl"), read_jsonl(a / "sft_half.jsonl")
    pairs, kto, held = (
        read_jsonl(a / "pairs.jsonl"),
        read_jsonl(a / "kto.jsonl"),
        read_jsonl(a / "eval.jsonl"),
    )
    assert (len(full), len(half), len(pairs), len(kto), len(held)) == (16, 8, 8, 40, 24)
    assert half == full[8:]  # half the good answers: the rewrites
    for row, pair in zip(half, pairs, strict=True):
        comparison = pair["comparison"]
        assert pair["label"] == "A" and comparison["completion_A"] == [row["messages"][1]]
        chatty = comparison["completion_B"][0]["content"]
        total = sum(operands(comparison["prompt_conversation"][0]["content"]))
        assert (
            row["messages"][1]["content"] == f"answer: {total}" and str(total) in chatty != row["messages"][1]
        )
    assert sum(1 for r in kto if r["label"]) == 8 and sum(1 for r in kto if not r["label"]) == 32
    trained = {operands(r["prompt"][0]["content"]) for r in kto} | {
        operands(r["messages"][0]["content"]) for r in full
    }
    assert not trained & {operands(r["messages"][0]["content"]) for r in held}
    assert all(r["match"] == "exact" and r["expected"].startswith("answer: ") for r in held)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_tiny_run_end_to_end_and_its_results_page(tmp_path: Path) -> None:
    """SFT on every good answer vs SFT then RPO at the DPO stage's own rate (1 step per stage, 2 held-out rows),
    the summary's McNemar p computed from the eval files, and a RESULTS page written from the collected files."""
    work = tmp_path / "work"
    env = dict(os.environ, MACHINE_TORCH_THREADS="1")
    argv = [sys.executable, str(EXAMPLE / "run_example.py"), "--steps", "1", "--workdir", str(work)]
    argv += ["--corpus", "--good 2 --rewrites 2 --bad 1 --eval 2", "--arms", "sft-full,sft+dpo-rpo"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=850, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((work / "summary.json").read_text())
    assert [a["arm"] for a in summary["arms"]] == ["sft-full", "sft+dpo-rpo"]
    sft, staged = summary["arms"]
    assert summary["baseline"]["n"] == sft["n"] == staged["n"] == 2
    assert "mcnemar_p" not in sft and 0 <= staged["mcnemar_p"] <= 1
    assert staged["gained"] + staged["lost"] <= 2 and staged["steps"] == 2 and len(staged["losses"]) == 2
    manifest = json.loads((work / ".machine" / "runs" / staged["run_id"] / "manifest.json").read_text())
    sft_stage, dpo_stage = manifest["objective"]["stages"]
    assert (sft_stage["objective"], dpo_stage["objective"]) == ("sft", "dpo")
    assert sft_stage["learning_rate"] == 5e-4 and dpo_stage["learning_rate"] == pytest.approx(5e-5)
    assert dpo_stage["rpo_alpha"] == 1.0
    lines = (work / ".machine" / "runs" / staged["run_id"] / "metrics.jsonl").read_text().splitlines()
    dpo_step = json.loads(lines[1])
    terms = dpo_step["objective"]
    assert dpo_step["lr"] == pytest.approx(5e-5) and terms["nll_loss"] > 0
    assert terms["preference_loss"] == pytest.approx(
        0.6931, abs=1e-3
    )  # the DPO stage starts at its reference
    assert staged["losses"][1] == pytest.approx(terms["preference_loss"] + terms["nll_loss"], abs=1e-4)

    results, page = tmp_path / "results", tmp_path / "RESULTS.md"
    assert write_results.main(["--from", str(work), "--results", str(results), "--out", str(page)]) == 0
    text = page.read_text()
    what = "SFT on the rewrites, then RPO (alpha 1) on the pairs at a tenth of the rate"
    assert f"| sft+dpo-rpo | {what} | 2 | {staged['exact']}/2 |" in text
    assert "The measure needs" not in text and "with half the good rows" in text
    assert text == write_results.render(results)


RESULTS = EXAMPLE / "docs" / "results"


def test_the_recorded_results_page_is_its_files_rendered() -> None:
    assert (EXAMPLE / "docs" / "RESULTS.md").read_text(encoding="utf-8") == write_results.render(RESULTS)
