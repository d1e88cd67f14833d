"""train-run with objective dpo on the store's pairs (then eval-pairs on its checkpoint), train-smoke with kto on a
KTO file: real SmolLM2 child jobs.

The manifest records the objective, beta and how the pairs were built; the snapshot is the pairs file trained on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from machine_lsp.core import runs

pytestmark = pytest.mark.slow

PAIRS = [(3, 4), (12, 30), (7, 8), (21, 5)]


def _store(project: Path) -> None:
    """Rewrites of chatty answers (pairs from rewrites), and a good and a bad answer on one prompt."""
    from machine_lsp.core.schema import Message, Source, TagRecord
    from machine_lsp.core.store import Store

    store = Store.open(project)

    def record(i: int, verdict: str, question: str, answer: str, original: str | None = None) -> None:
        store.append(
            TagRecord(
                id=f"r{i}",
                verdict=verdict,  # type: ignore[arg-type]
                messages=[Message(role="user", content=question), Message(role="assistant", content=answer)],
                source=Source(kind="cli", uri=f"file:///chat.jsonl#{i}"),
                created_at="2026-12-02T00:00:00Z",
                tool_version="test",
                original=original,
            )
        )

    for i, (a, b) in enumerate(PAIRS[:3]):
        record(i, "good", f"What is {a} plus {b}?", f"answer: {a + b}", original=f"Sure! That's {a + b}.")
    a, b = PAIRS[3]
    record(10, "good", f"What is {a} plus {b}?", f"answer: {a + b}")
    record(11, "bad", f"What is {a} plus {b}?", f"Hmm, {a} plus {b} is {a + b}, I believe.")


def test_dpo_run_on_the_store_records_the_objective_and_its_pairs(
    tmp_path: Path, run_job, job_env, only_run_dir
) -> None:
    (tmp_path / ".machine").mkdir()
    _store(tmp_path)
    args = {"objective": "dpo", "beta": 0.2, "batch_size": 2, "steps": 2, "save_every": 0}
    code, events, err = run_job(
        tmp_path, "train-run", args, timeout=300, env=job_env(MACHINE_TORCH_THREADS="1")
    )
    assert code == 0, err[-3000:]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-4)  # the first step's policy is the reference
    manifest = runs.read_manifest(only_run_dir(tmp_path))
    assert manifest.status == "done" and manifest.config["objective"] == "dpo"
    assert manifest.objective == {
        "name": "dpo",
        "beta": 0.2,
        "rpo_alpha": 0.0,
        "counts": {
            "source": "store",
            "pairs": 4,
            "from_rewrites": 3,
            "from_tags": 1,
            "ties_skipped": 0,
            "desirable": 0,
            "undesirable": 0,
        },
    }
    [data] = manifest.data
    rows = [json.loads(line) for line in Path(data.path).read_text().splitlines()]
    assert data.rows == len(rows) == 4 and all(set(r) == {"comparison", "label"} for r in rows)
    assert manifest.checkpoints and manifest.checkpoints[-1].final

    # The trained checkpoint on those pairs: the policy now prefers the chosen sides more than the base does.
    (tmp_path / "held_out.jsonl").write_text(Path(data.path).read_text())
    args = {"checkpoint": "latest", "data": "held_out.jsonl", "beta": 0.2}
    code, events, err = run_job(
        tmp_path, "eval-pairs", args, timeout=300, env=job_env(MACHINE_TORCH_THREADS="1")
    )
    assert code == 0, err[-3000:]
    result = events[-1]["result"]
    assert result["pairs"] == 4 and result["beta"] == 0.2
    assert result["accuracy"] > 0.5 and result["margin"] > 0, result
    saved = json.loads((tmp_path / result["out"]).read_text())
    assert saved["checkpoint"] == manifest.last_checkpoint and len(saved["rows"]) == 4
    assert saved["margin"] == pytest.approx(
        sum(
            0.2 * ((r["chosen"] - r["chosen_ref"]) - (r["rejected"] - r["rejected_ref"]))
            for r in saved["rows"]
        )
        / 4
    )


def test_kto_smoke_on_a_kto_file(tmp_path: Path, run_job, job_env) -> None:
    (tmp_path / ".machine").mkdir()
    lines = []
    for i, (a, b) in enumerate(PAIRS):
        good = i % 2 == 0
        lines.append(
            json.dumps(
                {
                    "prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
                    "completion": [
                        {
                            "role": "assistant",
                            "content": f"answer: {a + b}" if good else f"It's {a + b}, friend!",
                        }
                    ],
                    "label": good,
                }
            )
        )
    (tmp_path / "kto.jsonl").write_text("\n".join(lines) + "\n")
    args = {"objective": "kto", "data": "kto.jsonl", "batch_size": 3}  # step 2: a batch of one
    code, events, err = run_job(
        tmp_path, "train-smoke", args, timeout=300, env=job_env(MACHINE_TORCH_THREADS="1")
    )
    assert code == 0, err[-3000:]
    done = events[-1]
    assert done["event"] == "done"
    losses = done["result"]["losses"]
    assert losses[0] == pytest.approx(0.5, abs=1e-4) and losses[1] != losses[0]
    assert isinstance(done["result"]["sample"]["output"], str)


def test_kto_refuses_a_file_of_one_example(tmp_path: Path, run_job, job_env) -> None:
    (tmp_path / ".machine").mkdir()
    row = {
        "prompt": [{"role": "user", "content": "2+2?"}],
        "completion": [{"role": "assistant", "content": "4"}],
        "label": True,
    }
    (tmp_path / "kto.jsonl").write_text(json.dumps(row) + "\n")
    args = {"objective": "kto", "data": "kto.jsonl", "batch_size": 1}
    code, events, _ = run_job(
        tmp_path, "train-smoke", args, timeout=300, env=job_env(MACHINE_TORCH_THREADS="1")
    )
    assert code != 0
    assert "at least 2 examples" in events[-1]["message"], events[-1]


def test_kto_trains_with_the_desirable_weight_auto_resolves_and_records_both() -> None:
    """`kto_desirable_weight = "auto"` (the default): 1 good and 3 bad examples train the good one at weight 3;
    the manifest's objective record carries the weight trained with and the setting; a number stays itself."""
    from machine_lsp.core.preference import KtoRow
    from machine_lsp.engines import render
    from machine_lsp.jobs.step_data import KtoStepData, _weights
    from machine_lsp.scaffold.config import TrainSection

    _, renderer = render.load_tokenizer_and_renderer("HuggingFaceTB/SmolLM2-135M-Instruct")
    rows = [
        (
            f"kto.jsonl:{i + 1}",
            KtoRow(
                prompt=[{"role": "user", "content": f"What is {a} plus {b}?"}],
                completion=[{"role": "assistant", "content": f"answer: {a + b}" if i == 0 else "Hmm, well!"}],
                label=i == 0,
            ),
        )
        for i, (a, b) in enumerate(PAIRS)
    ]
    auto = TrainSection(objective="kto", kto_undesirable_weight=0.5)
    data = KtoStepData(auto, renderer, rows)
    _, objective = data.batch([0, 1])
    assert (objective.desirable_weight, objective.undesirable_weight) == (1.5, 0.5)  # 1.5 * 1 == 0.5 * 3
    assert _weights(auto, data.objective) == {
        "desirable_weight": 1.5,
        "desirable_weight_setting": "auto",
        "undesirable_weight": 0.5,
    }
    fixed = TrainSection(objective="kto", kto_desirable_weight=2.0)
    assert KtoStepData(fixed, renderer, rows).objective.desirable_weight == 2.0
