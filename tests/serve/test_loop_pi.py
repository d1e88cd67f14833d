"""The loop, end to end, with the real Pi (installed by scripts/setup-agents.sh): `machine serve base`, Pi answers
arithmetic questions through it, the served turns are tagged with `answer: N` rewrites, a few local training steps,
`machine serve latest`, and Pi's answers, read from Pi's own session log, now take the `answer: N` form.

Skipped when Pi is not installed (`make agents`), except in CI where the capture suite makes missing agents fail.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from serve_helpers import ServeProcess, free_port, machine

CAPTURE = Path(__file__).resolve().parents[1] / "capture"
if str(CAPTURE) not in sys.path:
    sys.path.insert(0, str(CAPTURE))

import capture_agents  # noqa: E402
from capture_agents import AgentMissing, AgentRun, agent_executable  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.agents]
QUESTIONS = [(3, 4), (12, 30)]
FORM = re.compile(r"answer: \d+")


def _pi_answers(log: Path) -> list[str]:
    """Assistant texts in a Pi v3 session log, in order."""
    answers = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        message = entry.get("message") or {}
        if entry.get("type") == "message" and message.get("role") == "assistant":
            content = message.get("content")
            parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            answers.append("".join(p.get("text", "") for p in parts if p.get("type") == "text").strip())
    return answers


def _ask(run: AgentRun, question: str) -> str:
    run.run(question)
    answers = _pi_answers(run.log())
    assert answers and answers[-1], f"Pi logged no answer for {question!r} in {run.log()}"
    return answers[-1]


def test_pi_uses_the_served_checkpoint_and_the_trained_one_answers_in_the_tagged_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        agent_executable("pi")
    except AgentMissing as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{exc} (CI must run the real agents)")
        pytest.skip(str(exc))
    # Pi's ~1.5k-token prompt is prefilled on the CPU: allow more than the capture suite's 120 s per prompt.
    monkeypatch.setattr(capture_agents, "RUN_TIMEOUT_S", 600)
    port = free_port()
    run = AgentRun("pi", tmp_path / "pi", SimpleNamespace(base_url=f"http://127.0.0.1:{port}"))
    project = run.project
    (project / ".machine").mkdir()
    agent_dir = run.home / ".pi" / "agent"
    for name in (
        "models.json",
        "settings.json",
    ):  # the capture harness's own config: `machine use` writes ours
        (agent_dir / name).unlink()
    done = machine(
        project, "use", "base", "--agent", "pi", "--port", str(port), "--write", HOME=str(run.home)
    )
    assert done.returncode == 0, done.stderr

    server = ServeProcess(project, "base", "--max-tokens", "48", port=port)
    try:
        before = {q: _ask(run, f"What is {q[0]} plus {q[1]}?") for q in QUESTIONS}
    finally:
        server.stop()
    assert not any(FORM.fullmatch(answer) for answer in before.values()), before
    rows = server.served_rows()
    for a, b in QUESTIONS:
        path, number, _ = next(
            (p, n, r) for p, n, r in rows if f"What is {a} plus {b}?" in str(r["messages"][-2]["content"])
        )
        tagged = machine(project, "good", "--from", f"{path}:{number}", "--as", f"answer: {a + b}")
        assert tagged.returncode == 0, tagged.stderr

    trained = machine(
        project,
        *("train", "run", "--yes", "--steps", "6", "--lr", "1e-3", "--batch-size", "2", "--save-every", "0"),
        timeout=1800,
    )
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]

    server = ServeProcess(
        project, "latest", "--max-tokens", "48", port=port
    )  # same port: Pi's config unchanged
    try:
        assert server.ready_line.startswith("serving local://")
        after = {q: _ask(run, f"What is {q[0]} plus {q[1]}?") for q in QUESTIONS}
    finally:
        server.stop()
    assert all(FORM.fullmatch(answer) for answer in after.values()), after
    assert [r["checkpoint"] for _, _, r in server.served_rows()][-len(QUESTIONS) :] == [
        server.ready_line.split()[1]
    ] * len(QUESTIONS)
