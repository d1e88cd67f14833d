"""`[tinker] budget_usd` in the job itself: what the editor starts with `yes` (no question asked) meets the budget
before the engine is built, so nothing reaches hosted Tinker and no key is needed to be refused. The pricing file is
read from a closed local port (tests/conftest.py): its price is unknown, and a budget that cannot be checked is not
kept."""

from __future__ import annotations

import json
from pathlib import Path


def test_the_job_refuses_a_run_whose_price_it_cannot_check(project: Path, run_job, job_env) -> None:  # noqa: ANN001
    rows = [
        {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "answer: 2"}]}
    ] * 4
    (project / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (project / "machine.toml").write_text(
        '[train]\nengine = "tinker"\nmodel = "Qwen/Qwen3-8B"\ndata = "train.jsonl"\n\n[tinker]\nbudget_usd = 1\n'
    )
    code, events, _stderr = run_job(project, "train-run", {}, env=job_env())
    logged = [e.get("message", "") for e in events if e.get("event") == "log"]
    ended = events[-1]
    assert code != 0 and ended["event"] == "error", events[-3:]
    assert ended["message"].startswith("not started: [tinker] budget_usd is $1 but the price is unknown"), (
        ended
    )
    assert "could not read Tinker's pricing from http://127.0.0.1:" in ended["message"]
    assert any(m.startswith("price: price unknown (could not read Tinker's pricing") for m in logged), logged
