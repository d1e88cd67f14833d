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
        "sft_other_half.jsonl",
        "pairs.jsonl",
        "pairs_wrong_sum.jsonl",
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
    assert read_jsonl(a / "sft_other_half.jsonl") == full[:8]  # the other half: the good rows
    for row, pair in zip(half, pairs, strict=True):
        comparison = pair["comparison"]
        assert pair["label"] == "A" and comparison["completion_A"] == [row["messages"][1]]
        chatty = comparison["completion_B"][0]["content"]
        total = sum(operands(comparison["prompt_conversation"][0]["content"]))
        assert (
            row["messages"][1]["content"] == f"answer: {total}" and str(total) in chatty != row["messages"][1]
        )
    for pair, slipped in zip(pairs, read_jsonl(a / "pairs_wrong_sum.jsonl"), strict=True):
        assert slipped["comparison"]["completion_A"] == pair["comparison"]["completion_A"]
        right, wrong = (
            int(c[0]["content"].removeprefix("answer: "))
            for c in (slipped["comparison"]["completion_A"], slipped["comparison"]["completion_B"])
        )
        assert 1 <= abs(wrong - right) <= 9
    assert sum(1 for r in kto if r["label"]) == 8 and sum(1 for r in kto if not r["label"]) == 32
    trained = {operands(r["prompt"][0]["content"]) for r in kto} | {
        operands(r["messages"][0]["content"]) for r in full
    }
    assert not trained & {operands(r["messages"][0]["content"]) for r in held}
    assert all(r["match"] == "exact" and r["expected"].startswith("answer: ") for r in held)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_tiny_run_end_to_end_and_its_results_page(tmp_path: Path) -> None:
    """SFT on every good answer vs SFT then RPO at the DPO stage's own rate vs KTO against the model's own answers
    (1 step per stage, 2 held-out rows) on two corpus seeds, each seed's McNemar p and the pooled one computed from the eval files, and a RESULTS page
    written from the collected files, with its replication section."""
    work = tmp_path / "work"
    env = dict(os.environ, MACHINE_TORCH_THREADS="1")
    argv = [sys.executable, str(EXAMPLE / "run_example.py"), "--steps", "1", "--workdir", str(work)]
    argv += ["--corpus", "--good 2 --rewrites 2 --bad 1 --eval 2", "--arms", ",".join(TINY_ARMS)]
    proc = subprocess.run(
        [*argv, "--seeds", "0,1"], capture_output=True, text=True, timeout=850, env=env, check=False
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summaries = [json.loads((work / f"seed-{s}" / "summary.json").read_text()) for s in (0, 1)]
    assert [s["seed"] for s in summaries] == [0, 1]
    summary = summaries[0]
    assert [a["arm"] for a in summary["arms"]] == TINY_ARMS
    sft, staged, _ = summary["arms"]
    assert summary["baseline"]["n"] == sft["n"] == staged["n"] == 2
    assert "mcnemar_p" not in sft and 0 <= staged["mcnemar_p"] <= 1
    pooled = json.loads((work / "pooled.json").read_text())
    assert pooled["seeds"] == [0, 1] and [a["arm"] for a in pooled["arms"]] == ["baseline", *TINY_ARMS]
    both = {a["arm"]: a for a in pooled["arms"]}["sft+dpo-rpo"]
    assert both["n"] == 4 and both["per_seed_exact"] == [s["arms"][1]["exact"] for s in summaries]
    assert both["exact"] == sum(both["per_seed_exact"])
    check_own_answers(work / "seed-0")
    rows = {
        arm: [r["correct"] for s in (0, 1) for r in eval_rows(work / f"seed-{s}", arm)]
        for arm in ("sft-full", "sft+dpo-rpo")
    }
    paired = list(zip(rows["sft-full"], rows["sft+dpo-rpo"], strict=True))
    assert both["vs_sft-full"]["gained"] == sum(1 for ref, mine in paired if mine and not ref)
    assert both["vs_sft-full"]["lost"] == sum(1 for ref, mine in paired if ref and not mine)

    results, page = tmp_path / "results", tmp_path / "RESULTS.md"
    argv = ["--from", str(work / "seed-0"), "--from-seeds", str(work), "--results", str(results)]
    assert write_results.main([*argv, "--out", str(page)]) == 0
    text = page.read_text()
    what = "SFT on the rewrites, then RPO (alpha 1) on the pairs at a tenth of the rate"
    assert f"| sft+dpo-rpo | {what} | 2 | {staged['exact']}/2 |" in text
    assert "The measure needs" not in text and "with half the good rows" in text
    assert "## Replication over corpus seeds" in text and "--seeds 0,1 --steps 1" in text
    assert f"| sft+dpo-rpo | {what} | {both['exact']}/4 | {both['per_seed_exact'][0]} / " in text
    assert "`results-seeds/seed-1/eval_results/sft+dpo-rpo.json`" in text
    assert text == write_results.render(results)


#: the tiny run's arms: SFT, SFT then RPO, and KTO with the base model's own answers as the undesirable ones
TINY_ARMS = ["sft-full", "sft+dpo-rpo", "kto-balanced-lr3e-4-own"]


def check_own_answers(work: Path) -> None:
    """The *-own files: every rejected and undesirable answer is the base model's own answer to that prompt (from
    own/answers.json, the baseline eval on the prompts tagged bad), every other field as in the corpus's files."""
    asked = read_jsonl(work / "data" / "prompts_tagged_bad.jsonl")
    rows = json.loads((work / "own" / "answers.json").read_text())["rows"]
    said = {json.dumps(q["messages"]): r["output"] for q, r in zip(asked, rows, strict=True)}
    assert [r["id"] for r in rows] == [q["id"] for q in asked] and all(said.values())
    kto, own = read_jsonl(work / "data" / "kto.jsonl"), read_jsonl(work / "data" / "kto_own.jsonl")
    assert len(said) == sum(1 for r in kto if not r["label"]) == 3
    for row, mine in zip(kto, own, strict=True):
        answer = (
            row["completion"]
            if row["label"]
            else [{"role": "assistant", "content": said[json.dumps(row["prompt"])]}]
        )
        assert mine == {**row, "completion": answer}
    for pair, mine in zip(
        read_jsonl(work / "data" / "pairs.jsonl"), read_jsonl(work / "data" / "pairs_own.jsonl"), strict=True
    ):
        c = pair["comparison"]
        answer = [{"role": "assistant", "content": said[json.dumps(c["prompt_conversation"])]}]
        assert mine == {**pair, "comparison": {**c, "completion_B": answer}}


def eval_rows(work: Path, arm: str) -> list[dict]:
    return json.loads((work / "eval_results" / f"{arm}.json").read_text())["rows"]


RESULTS = EXAMPLE / "docs" / "results"


def test_the_recorded_results_page_is_its_files_rendered() -> None:
    assert (EXAMPLE / "docs" / "RESULTS.md").read_text(encoding="utf-8") == write_results.render(RESULTS)
