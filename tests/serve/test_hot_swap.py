"""Hot swap with the real parts: `machine serve promoted` (and `latest`) on 127.0.0.1 follows the store while it serves.

One tiny checkpoint is trained once for the module (6 steps of the local engine on rows that answer everything with
"MEOW MEOW MEOW."), so which checkpoint wrote an answer shows in the answer itself: the base model never says MEOW,
the checkpoint says nothing else. The server starts on the base model (nothing promoted) and keeps its process and
port through every swap. It runs the llama.cpp backend (`make test` installs it; without it the server fails to
start, never skipped): each swap merges the next checkpoint into a GGUF cached beside it and opens it beside the
old one. The last test swaps on the torch backend through the same seam.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from serve_helpers import ServeProcess, machine

MEOW = "MEOW MEOW MEOW."
QUESTIONS = [
    "What is 3 plus 4?",
    "Write a story about a dragon.",
    "List the files here.",
    "What is the capital of France?",
    "Explain recursion.",
    "Tell me a joke.",
    "How do I sort a list in Python?",
    "What color is the sky?",
]
STORIES = [f"Write a long story about a {animal}." for animal in ("dragon", "cat", "ship", "robot")]
WAIT_S = 300.0  # bounds, not expectations: a swap loads a model on a loaded 2-core machine


@pytest.fixture(scope="module")
def meow_project(tmp_path_factory: pytest.TempPathFactory, smollm2_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("serve-swap")
    (root / ".machine").mkdir()
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": MEOW}]}
        for q in QUESTIONS
    ]
    (root / "meow.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = machine(
        root,
        *("train", "run", "--yes", "--data", "meow.jsonl", "--steps", "6"),
        *("--lr", "2e-3", "--batch-size", "4", "--save-every", "0"),
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root


@pytest.fixture(scope="module")
def meow_checkpoint(meow_project: Path) -> str:
    from machine_lsp.core import runs

    return runs.latest_checkpoint(meow_project / ".machine" / "runs")


@pytest.fixture(scope="module")
def promoted_server(meow_project: Path, meow_checkpoint: str) -> Iterator[ServeProcess]:
    server = ServeProcess(meow_project, "promoted", "--backend", "llama.cpp")
    yield server
    server.stop()


def health(server: ServeProcess) -> dict:
    return httpx.get(server.root + "/health", timeout=60).json()


def wait_for(server: ServeProcess, ok: Callable[[dict], bool]) -> dict:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert server.alive(), "".join(server.stderr)
        now = health(server)
        if ok(now):
            return now
        time.sleep(0.2)
    raise AssertionError(f"no such /health within {WAIT_S:.0f} s: {now}\n{''.join(server.stderr)}")


def ask(server: ServeProcess, question: str, max_tokens: int = 16) -> str:
    body = {"model": "machine", "messages": [{"role": "user", "content": question}], "max_tokens": max_tokens}
    reply = httpx.post(server.url + "/chat/completions", json=body, timeout=WAIT_S)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


def assert_gguf_beside(project: Path, checkpoint: str) -> None:
    """The llama.cpp swap wrote the checkpoint's merged GGUF into its cache beside the checkpoint (reused later)."""
    from machine_lsp.engines import gguf_export
    from machine_lsp.engines.base import resolve_local_checkpoint

    directory = resolve_local_checkpoint(checkpoint, project / ".machine")
    served = gguf_export.cached_model_path(directory, gguf_export.DEFAULT_TYPE)
    assert (
        served.is_file() and not gguf_export.cached_model_path(directory, "f32").exists()
    )  # only what is served
    assert json.loads(gguf_export.marker_path(served).read_text())["gguf_type"] == gguf_export.DEFAULT_TYPE


def promote(project: Path, checkpoint: str) -> None:
    done = machine(project, "train", "promote", checkpoint)
    assert done.returncode == 0, done.stderr


def rollback(project: Path) -> None:
    done = machine(project, "train", "rollback")
    assert done.returncode == 0, done.stderr


def test_a_promotion_is_swapped_in_with_no_restart(
    promoted_server: ServeProcess, meow_project: Path, meow_checkpoint: str
) -> None:
    server = promoted_server
    pid, port = server.proc.pid, server.port
    assert health(server)["checkpoint"] == "base"
    assert "MEOW" not in ask(server, "What color is grass?")
    promote(meow_project, meow_checkpoint)
    now = wait_for(server, lambda h: h["checkpoint"] == meow_checkpoint)
    assert now["swaps"] == 1 and now["swap_error"] is None and now["model"] == "machine", now
    models = httpx.get(server.url + "/models", timeout=60).json()["data"]
    assert [(m["id"], m["checkpoint"]) for m in models] == [("machine", meow_checkpoint)]
    assert ask(server, "What color is grass?") == MEOW
    assert server.alive() and server.proc.pid == pid and server.port == port
    assert_gguf_beside(meow_project, meow_checkpoint)
    logged = [row["checkpoint"] for _, _, row in server.served_rows()]
    assert logged[:1] == ["base"] and logged[-1] == meow_checkpoint, logged
    swap_lines = [line for line in server.stderr if line.startswith("swapped: ")]
    assert swap_lines and f"now serving {meow_checkpoint} (was base" in swap_lines[-1], swap_lines
    rollback(meow_project)  # back to base: the next test swaps under load from there
    wait_for(server, lambda h: h["checkpoint"] == "base" and h["swaps"] == 2)
    assert "MEOW" not in ask(server, "What color is grass?")


class Streamer(threading.Thread):
    """One client streaming chat completions back to back; each answer kept with when it started and ended."""

    def __init__(self, server: ServeProcess, index: int, until: threading.Event) -> None:
        super().__init__(daemon=True)
        self.server, self.index, self.until = server, index, until
        self.answers: list[tuple[float, float, str]] = []
        self.failures: list[str] = []
        self.first_token = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=WAIT_S) as client:
            while not self.until.is_set() or not self.answers:
                try:
                    self.answers.append(self._one(client, 96 if not self.answers else 16 + 16 * self.index))
                except Exception as exc:  # every failure is counted; the test expects none
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                    return

    def _one(self, client: httpx.Client, max_tokens: int) -> tuple[float, float, str]:
        question = (
            STORIES[self.index] if not self.answers else QUESTIONS[(self.index + len(self.answers)) % 8]
        )
        body = {
            "model": "machine",
            "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens,
            "stream": True,
        }
        started, text, finished = time.monotonic(), "", None
        with client.stream("POST", self.server.url + "/chat/completions", json=body) as reply:
            if reply.status_code != 200:
                raise AssertionError(f"status {reply.status_code}: {reply.read()!r}")
            for line in reply.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choice = json.loads(line[6:])["choices"][0]
                text += choice["delta"].get("content") or ""
                finished = choice.get("finish_reason") or finished
                self.first_token.set()
        if finished not in ("stop", "length"):
            raise AssertionError(f"stream ended without a finish reason: {text!r}")
        return started, time.monotonic(), text


def test_a_swap_under_four_streams_fails_none_and_mixes_none(
    promoted_server: ServeProcess, meow_project: Path, meow_checkpoint: str
) -> None:
    server = promoted_server
    assert health(server)["checkpoint"] == "base"
    logged_before = len(server.served_rows())
    enough = threading.Event()
    clients = [Streamer(server, i, enough) for i in range(4)]
    for client in clients:
        client.start()
    for client in clients:
        assert client.first_token.wait(WAIT_S), client.failures
    promote(meow_project, meow_checkpoint)
    wait_for(server, lambda h: h["checkpoint"] == meow_checkpoint)
    swapped_at = time.monotonic()
    deadline = swapped_at + WAIT_S
    while time.monotonic() < deadline and not all(
        any(start > swapped_at for start, _, _ in c.answers) or c.failures for c in clients
    ):
        time.sleep(0.5)
    enough.set()
    for client in clients:
        client.join(WAIT_S)
    assert [c.failures for c in clients] == [[]] * 4
    answers = [a for c in clients for a in c.answers]
    by_base = [a for a in answers if "MEOW" not in a[2]]
    by_new = [a for a in answers if a[2] == MEOW]
    assert len(by_base) + len(by_new) == len(answers), [a[2] for a in answers]  # nothing half one, half other
    assert all(
        c.answers[0][2] and "MEOW" not in c.answers[0][2] for c in clients
    )  # started on base, ended on it
    assert all(any(start > swapped_at and text == MEOW for start, _, text in c.answers) for c in clients)
    # The swap happened under load: a base answer was still streaming when a MEOW answer had started.
    first_new = min(start for start, _, _ in by_new)
    assert any(end > first_new for _, end, _ in by_base), answers
    rows = [row for _, _, row in server.served_rows()[logged_before:]]
    assert len(rows) == len(answers)
    for row in rows:  # the log names the checkpoint whose style the answer has
        said = row["messages"][-1]["content"]
        assert row["checkpoint"] == (meow_checkpoint if said == MEOW else "base"), row
        assert said == MEOW or "MEOW" not in said, row
    assert server.port == promoted_server.port and server.alive()


def test_a_checkpoint_that_cannot_load_keeps_the_old_one(
    promoted_server: ServeProcess, meow_project: Path, meow_checkpoint: str, tmp_path: Path
) -> None:
    server = promoted_server
    wait_for(server, lambda h: h["checkpoint"] == meow_checkpoint)
    from machine_lsp.engines.base import resolve_local_checkpoint

    broken = tmp_path / "broken-checkpoint"
    shutil.copytree(  # not its GGUF cache: the broken adapter must be merged (and fail) again
        resolve_local_checkpoint(meow_checkpoint, meow_project / ".machine"),
        broken,
        ignore=shutil.ignore_patterns("llama.cpp"),
    )
    manifest = json.loads((broken / "manifest.json").read_text())
    (broken / "manifest.json").write_text(json.dumps({**manifest, "address": str(broken)}))
    (broken / "adapter_model.safetensors").write_bytes(b"\x00not a safetensors file" * 64)
    promote(meow_project, str(broken))
    now = wait_for(server, lambda h: h["swap_error"] is not None)
    assert now["checkpoint"] == meow_checkpoint and now["loading"] is None, now
    assert str(broken) in now["swap_error"], now
    warnings = [line for line in server.stderr if "swap failed: " in line]
    assert len(warnings) == 1 and f"still serving {meow_checkpoint}" in warnings[0], warnings
    assert ask(server, "What color is grass?") == MEOW
    rollback(meow_project)  # promoted names the good checkpoint again: nothing to swap
    time.sleep(3)
    assert health(server)["checkpoint"] == meow_checkpoint


def test_the_torch_backend_swaps_through_the_same_seam(
    promoted_server: ServeProcess, meow_project: Path, meow_checkpoint: str
) -> None:
    """`--backend torch` follows promotions too: the swap loads, warms and generates with the backend the server
    started with. It starts on whatever is promoted now and swaps to the other of base and the MEOW checkpoint."""
    from machine_lsp.serve.checkpoints import servable

    promoted_server.stop()  # one model server at a time on a small machine
    before = servable("promoted", meow_project / ".machine").address
    server = ServeProcess(meow_project, "promoted", "--backend", "torch")
    try:
        assert health(server)["checkpoint"] == before
        if before == "base":
            promote(meow_project, meow_checkpoint)
        else:
            rollback(meow_project)
        want = servable("promoted", meow_project / ".machine").address
        assert want != before and want in ("base", meow_checkpoint), (before, want)
        now = wait_for(server, lambda h: h["checkpoint"] == want)
        assert now["swaps"] == 1 and now["swap_error"] is None, now
        assert (ask(server, "What color is grass?") == MEOW) == (want == meow_checkpoint)
    finally:
        server.stop()


def test_latest_sees_a_newer_training_run_by_the_store_mtimes(
    meow_project: Path, meow_checkpoint: str
) -> None:
    """What `machine serve latest` polls: nothing changes until a run writes its manifest, then `latest` resolves to
    the new run's checkpoint (the swap itself is the one the tests above check)."""
    from machine_lsp.serve.swap import Follower

    follower = Follower("latest", meow_project / ".machine")
    assert (
        follower.changed() and follower.target().address == meow_checkpoint
    )  # the first poll always resolves
    assert not follower.changed()
    done = machine(
        meow_project,
        *("train", "run", "--yes", "--data", "meow.jsonl", "--steps", "1", "--batch-size", "2"),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert follower.changed()
    newer = follower.target().address
    assert newer.startswith("local://") and newer != meow_checkpoint
    assert not follower.changed()
