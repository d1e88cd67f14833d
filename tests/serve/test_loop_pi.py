"""The loop, end to end, with the real parts and no restart: the real Pi (installed by scripts/setup-agents.sh) uses
`machine serve promoted` (the real SmolLM2 on 127.0.0.1, configured by `machine use --write`); its turns and more in
its context are tagged with `answer: N` rewrites (`machine good --from FILE:LINE --as`); `machine retrain` (sized,
scoped, gated) promotes; the server swaps with its process and port unchanged; the same Pi answers a new question
in the taught form, read from Pi's own session log; the real Codex and OpenCode, configured by `machine use
--write` for the same server, are answered by the promoted checkpoint, read from their own logs. Then a
deliberately bad run (everything answered `answer: 42`) is refused by its gate, and the server keeps the
checkpoint it serves.

One server, one retrain, one bad run for the module. Skipped when Pi is not installed (`make agents`), except in CI
where the capture suite makes missing agents fail.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from serve_helpers import ServeProcess, free_port, machine

from machine_lsp.core import promotions, runs

CAPTURE = Path(__file__).resolve().parents[1] / "capture"
if str(CAPTURE) not in sys.path:
    sys.path.insert(0, str(CAPTURE))

import capture_agents  # noqa: E402
import loop_agents  # noqa: E402
from capture_agents import AgentMissing, AgentRun, agent_executable  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.agents]
PI_QUESTIONS = [(3, 4), (12, 30)]  # asked by Pi itself
# Asked in Pi's context (its system prompt) over the API. With Pi's two, 12 tagged turns: the gate's minimum for its
# held-out split (6 held out, 6 trained), so the run is as small as a gated one can be (each row carries Pi's
# ~1.5k-token prompt: the tagged rows' count is what this test's training costs).
REPLAYED = [(a + 5, 2 * a + 9) for a in range(10)]
NEW_QUESTION = (51, 16)
AGENTS_QUESTION = (27, 35)  # asked by Codex and by OpenCode after the swap
FORM = re.compile(r"answer: \d+")
WAIT_S = 900.0  # a bound for a loaded 2-core machine, not an expectation


def question(a: int, b: int) -> str:
    return f"What is {a} plus {b}?"


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


def _ask(run: AgentRun, prompt: str) -> str:
    run.run(prompt)
    answers = _pi_answers(run.log())
    assert answers and answers[-1], f"Pi logged no answer for {prompt!r} in {run.log()}"
    return answers[-1]


def _health(server: ServeProcess) -> dict:
    return httpx.get(server.root + "/health", timeout=60).json()


def _agent(name: str) -> Path:
    try:
        return agent_executable(name)
    except AgentMissing as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{exc} (CI must run the real agents)")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def pi(tmp_path_factory: pytest.TempPathFactory, smollm2_dir: Path) -> AgentRun:
    _agent("pi")
    port = free_port()
    run = AgentRun(
        "pi", tmp_path_factory.mktemp("loop") / "pi", SimpleNamespace(base_url=f"http://127.0.0.1:{port}")
    )
    run.port = port  # type: ignore[attr-defined]
    (run.project / ".machine").mkdir()
    for name in (
        "models.json",
        "settings.json",
    ):  # the capture harness's own config: `machine use` writes ours
        (run.home / ".pi" / "agent" / name).unlink()
    done = machine(
        run.project, "use", "promoted", "--agent", "pi", "--port", str(port), "--write", HOME=str(run.home)
    )
    assert done.returncode == 0, done.stderr
    return run


@pytest.fixture(scope="module")
def server(pi: AgentRun) -> Iterator[ServeProcess]:
    served = ServeProcess(pi.project, "promoted", "--max-tokens", "48", port=pi.port)  # type: ignore[attr-defined]
    yield served
    served.stop()


def _replay_in_pis_context(server: ServeProcess) -> None:
    """Ask REPLAYED over the API with Pi's own system prompt (from its served turn), as more turns to tag."""
    pi_turn = server.served_rows()[0][2]["messages"]
    system = [m for m in pi_turn if m["role"] == "system"]
    with httpx.Client(timeout=WAIT_S) as client:
        for a, b in REPLAYED:
            body = {
                "model": "machine",
                "messages": [*system, {"role": "user", "content": question(a, b)}],
                "max_tokens": 48,
                "temperature": 0,
            }
            assert client.post(server.url + "/chat/completions", json=body).status_code == 200


def _tag_every_served_turn(project: Path, server: ServeProcess) -> int:
    sums = {question(a, b): a + b for a, b in [*PI_QUESTIONS, *REPLAYED]}
    tagged = 0
    for path, number, row in server.served_rows():
        asked = str(row["messages"][-2]["content"])
        total = next(v for q, v in sums.items() if q in asked)
        done = machine(project, "good", "--from", f"{path}:{number}", "--as", f"answer: {total}")
        assert done.returncode == 0, done.stderr
        tagged += 1
    return tagged


def _wait_for_checkpoint(server: ServeProcess, checkpoint: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert server.alive(), "".join(server.stderr)
        now = _health(server)
        if now["checkpoint"] == checkpoint:
            return now
        time.sleep(0.5)
    raise AssertionError(
        f"the server did not swap to {checkpoint}: {_health(server)}\n{''.join(server.stderr)}"
    )


def test_pi_answers_in_the_taught_style_after_retrain_with_the_server_up(
    pi: AgentRun, server: ServeProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pi's ~1.5k-token prompt is prefilled on the CPU: allow more than the capture suite's 120 s per prompt.
    monkeypatch.setattr(capture_agents, "RUN_TIMEOUT_S", 600)
    project, pid, port = pi.project, server.proc.pid, server.port
    assert _health(server)["checkpoint"] == "base"
    before = [_ask(pi, question(a, b)) for a, b in PI_QUESTIONS]
    assert not any(FORM.fullmatch(answer) for answer in before), before
    _replay_in_pis_context(server)
    assert _tag_every_served_turn(project, server) == len(PI_QUESTIONS) + len(REPLAYED)

    # The retrain is the one busy process while it runs (the server idles, Pi waits): both cores for it.
    done = machine(project, "retrain", "--yes", timeout=3600, HOME=str(pi.home), MACHINE_TORCH_THREADS="2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    promoted = promotions.read_log(project / ".machine").current()
    assert promoted is not None, done.stdout[-3000:]
    assert "Promoted:" in done.stdout, done.stdout[-3000:]  # the retrain's one-paragraph summary
    gate = runs.list_runs(project / ".machine" / "runs")[0][1].gate  # type: ignore[union-attr]
    metrics = gate["metrics"] if gate else {}
    # the bleed probe was also asked inside Pi's system prompt and tools, and stayed within the bound there
    assert metrics["contexts"] >= 1 and metrics["candidate_context_bleed_rate"] is not None, metrics

    now = _wait_for_checkpoint(server, promoted)
    assert now["swaps"] == 1 and now["swap_error"] is None, now
    assert (
        server.alive() and server.proc.pid == pid and server.port == port
    )  # no restart, Pi's config unchanged
    after = _ask(pi, question(*NEW_QUESTION))
    assert FORM.fullmatch(after), after
    assert server.served_rows()[-1][2]["checkpoint"] == promoted


@pytest.mark.parametrize("agent", ["codex", "opencode"])
def test_codex_and_opencode_answer_through_the_swapped_checkpoint(
    agent: str, pi: AgentRun, server: ServeProcess, tmp_path: Path
) -> None:
    """The checkpoint Pi's tags taught, served by the same process after its swap, answers the other agents through
    the configs `machine use --write` writes: each one's answer is read back from its own log and was served by the
    promoted checkpoint, with the agent's own instructions and tools. Whether it comes in the taught form is printed,
    not asserted: their own turns are not tagged (each row would carry their 6-8k-token prompts, minutes of training
    per step on 2 cores), and the form Pi's context taught reached Codex in 3 of 4 runs (`answer: 84`, `answer: 92`,
    `answer: 102.`, `27 + 35 = 72`) and OpenCode in 4 of 4."""
    executable = _agent(agent)
    promoted = promotions.read_log(pi.project / ".machine").current()
    assert promoted is not None and _health(server)["checkpoint"] == promoted, (
        "the Pi loop test promotes first"
    )
    env = loop_agents.world(tmp_path)
    loop_agents.configure(agent, pi.project, env, server.port)
    asked = question(*AGENTS_QUESTION)
    answer = loop_agents.ask(agent, executable, pi.project, env, asked)
    print(f"\n{agent} answered {answer!r} ({'in' if FORM.match(answer) else 'not in'} the taught form)")
    answered = [row for _, _, row in server.served_rows() if asked in json.dumps(row["messages"])]
    assert answered and {row["checkpoint"] for row in answered} == {promoted}, answered
    turn = max(answered, key=lambda row: row["usage"]["prompt_tokens"])  # not OpenCode's short title request
    assert str(turn["messages"][-1]["content"]).strip() == answer  # what the agent logged is what was served
    # Codex through the Responses API, OpenCode through Chat Completions, each with its own instructions and tools
    # (several thousand tokens: they fit SmolLM2's 8192; Claude Code's do not, test_agents_context.py)
    assert turn["api"] == {"codex": "responses", "opencode": "chat.completions"}[agent], turn["api"]
    assert turn["usage"]["prompt_tokens"] > 4000, turn["usage"]


def test_the_gate_refuses_a_run_that_answers_everything_in_the_format(
    pi: AgentRun, server: ServeProcess
) -> None:
    project = pi.project
    served_before = _health(server)
    log_before = promotions.read_log(project / ".machine")
    questions = [question(a, a + 2) for a in range(8)] + [
        "Name a primary color.",
        "What is the boiling point of water in Celsius?",
        "Write a haiku about rain.",
        "Who painted the Mona Lisa?",
        "What is a synonym for happy?",
        "How many legs does a spider have?",
        "Describe a forest in one sentence.",
        "What is the largest mammal?",
    ]
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": "answer: 42"}]}
        for q in questions
    ]
    (project / "bad.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = machine(
        project,
        *("train", "run", "--yes", "--data", "bad.jsonl", "--steps", "6"),
        *("--lr", "2e-3", "--batch-size", "4", "--save-every", "0"),
        timeout=3600,
        MACHINE_TORCH_THREADS="2",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    manifests = [
        m for _, m in runs.list_runs(project / ".machine" / "runs") if m and m.args.get("data") == "bad.jsonl"
    ]
    assert len(manifests) == 1
    gate = manifests[0].gate
    assert gate is not None and gate["promoted"] is False, gate
    assert "bleed" in gate["reason"], gate["reason"]
    assert gate["metrics"]["candidate_bleed_rate"] > 0.1, gate["metrics"]
    log_after = promotions.read_log(project / ".machine")
    assert log_after.current() == log_before.current()
    assert len(log_after.events) == len(log_before.events)  # nothing promoted, not even on the record
    time.sleep(5)  # a swap would start within the server's 2 s poll
    served_after = _health(server)
    assert (served_after["checkpoint"], served_after["swaps"]) == (
        served_before["checkpoint"],
        served_before["swaps"],
    )
