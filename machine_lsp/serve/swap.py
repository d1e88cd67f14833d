"""Hot swap: `machine serve promoted|latest` follows the store and replaces its model between requests.

* `Slot` is one loaded checkpoint with its own `BatchGenerator` (worker thread). A request takes the current slot
  at the moment it is submitted (no await in between) and is answered wholly by it: a swap never moves a request
  to another model mid-answer. The server counts the requests each slot holds; a slot that is no longer current is
  closed (its thread ended, its model freed) once the last of them is answered.
* `Follower` watches what a name means without loading anything: the mtime and size of `.machine/promotions.jsonl`
  (`promoted`) or of `.machine/runs/` and its manifests (`latest`), a few `stat` calls per poll. Only when that
  changes is the name resolved again (`checkpoints.servable`).
* `follow()` runs on the server's event loop: a newly named checkpoint is loaded in a background thread (a second
  model copy while the old one serves) by the backend the server started with (`llama_backend.load_backend`: for
  llama.cpp that merges the adapter and writes its GGUF, cached beside the checkpoint, then opens it), warmed with
  one forward pass, given its own generator (`llama_backend.generator_for`) and installed. A
  checkpoint that cannot load, one on another base model (another tokenizer: restart for that), or a swap that fails
  after loading is one warning line; the old checkpoint stays served and that checkpoint is not retried until the
  store changes again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine_lsp.serve import llama_backend
from machine_lsp.serve.checkpoints import PROMOTED, CheckpointError, Target, servable
from machine_lsp.serve.generation import BatchGenerator, Loaded

LOG = logging.getLogger("machine.serve")
FOLLOWED = (PROMOTED, "latest")  # the names whose meaning changes as the store does
POLL_S = 2.0
RETIRE_TIMEOUT_S = 30.0


@dataclass(eq=False)
class Slot:
    """One checkpoint being served: its model and the generator that decodes on it."""

    loaded: Loaded
    generator: BatchGenerator
    checkpoint: str
    loaded_in_s: float = 0.0
    holders: int = 0  # requests submitted to this slot and not answered yet (event-loop thread only)


@dataclass
class SwapState:
    """What /health and the swap lines report."""

    loading: str | None = None
    swaps: int = 0
    last_error: str | None = None
    finished_before: Counter[str] = field(default_factory=Counter)  # finish reasons of retired slots
    draining: set[Slot] = field(default_factory=set)  # replaced slots still answering their requests
    listener: Callable[[str | None, str], None] | None = (
        None  # (the new checkpoint or None: failed, the line)
    )

    def tell(self, checkpoint: str | None, line: str) -> None:
        if self.listener is not None:
            self.listener(checkpoint, line)


class Follower:
    """What `name` (promoted | latest) means in `machine_dir`, re-resolved only when the store changed."""

    def __init__(self, name: str, machine_dir: Path) -> None:
        if name not in FOLLOWED:
            raise ValueError(f"only {', '.join(FOLLOWED)} are followed, not {name!r}")
        self.name = name
        self.machine_dir = machine_dir
        self.seen: tuple[Any, ...] | None = (
            None  # the first poll resolves: a change during the first load counts
        )

    def signature(self) -> tuple[Any, ...]:
        if self.name == PROMOTED:
            return (_stamp(self.machine_dir / "promotions.jsonl"),)
        runs = self.machine_dir / "runs"
        try:
            names = sorted(entry.name for entry in os.scandir(runs) if entry.is_dir(follow_symlinks=False))
        except OSError:
            return (None,)
        return (_stamp(runs), *(_stamp(runs / name / "manifest.json") for name in names))

    def changed(self) -> bool:
        now = self.signature()
        if now == self.seen:
            return False
        self.seen = now
        return True

    def target(self) -> Target:
        return servable(self.name, self.machine_dir)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size)


Loader = Callable[[Target], Loaded]


async def follow(
    server: Any,
    follower: Follower,
    load: Loader,
    *,
    max_batch: int,
    stop: asyncio.Event,
    poll_s: float = POLL_S,
    on_swap: Callable[[str | None, str], None] | None = None,
) -> None:
    """Until `stop`: poll the store; load and install each newly named checkpoint (see the module doc).
    `on_swap(checkpoint, line)` hears of each swap (`checkpoint` None: it failed, the old one stays)."""
    server.state.listener = on_swap
    pool = ThreadPoolExecutor(1, thread_name_prefix="machine-serve-load")
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=poll_s)
                return
            except TimeoutError:
                pass
            if not follower.changed():
                continue
            try:
                target = follower.target()
            except CheckpointError as exc:
                _failed(server, f"{follower.name} now names a checkpoint this server cannot load: {exc}")
                continue
            if target.address == server.slot.checkpoint:
                continue
            slot = await _load_slot(server, target, load, pool, max_batch)
            if slot is not None and not stop.is_set():
                install(server, slot)
            elif slot is not None:
                slot.generator.close(0)
    finally:  # a stop while loading must not wait for the load: its thread is left to finish on its own
        pool.shutdown(wait=False, cancel_futures=True)


async def _load_slot(
    server: Any, target: Target, load: Loader, pool: ThreadPoolExecutor, max_batch: int
) -> Slot | None:
    """The new checkpoint loaded, warmed and with its generator started; None (one warning) when any step fails."""
    old = server.slot.checkpoint
    if target.base_model != server.slot.loaded.base_model:
        _failed(
            server,
            f"{target.address} is trained on {target.base_model}, this server serves "
            f"{server.slot.loaded.base_model}: restart machine serve to change the base model",
        )
        return None
    server.state.loading = target.address
    LOG.info("loading %s in the background (still serving %s) …", target.address, old)
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    try:
        loaded = await loop.run_in_executor(pool, _load_and_warm, load, target)
        generator = llama_backend.generator_for(loaded, max_batch=max_batch)
        generator.start()
    except Exception as exc:  # any failure to load keeps the old checkpoint: that is the contract
        _failed(server, f"{target.address} did not load: {_one_line(exc)}")
        return None
    finally:
        server.state.loading = None
    return Slot(loaded, generator, target.address, loaded_in_s=time.perf_counter() - started)


def _load_and_warm(load: Loader, target: Target) -> Loaded:
    loaded = load(target)
    llama_backend.warm(loaded)
    return loaded


def _failed(server: Any, message: str) -> None:
    server.state.last_error = message
    line = f"{message}; still serving {server.slot.checkpoint}"
    LOG.warning("swap failed: %s", line)
    server.state.tell(None, line)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]


def install(server: Any, slot: Slot) -> None:
    """Make `slot` current (on the event loop, between two submits); the old one drains, then is closed."""
    old = server.slot
    server.slot = slot
    server.state.swaps += 1
    server.state.last_error = None
    server.state.draining.add(old)
    line = (
        f"swapped: now serving {slot.checkpoint} (was {old.checkpoint}; loaded in {slot.loaded_in_s:.1f} s)"
    )
    LOG.info("%s", line)
    server.state.tell(slot.checkpoint, line)
    release(server, old)


def hold(slot: Slot) -> None:
    slot.holders += 1


def release(server: Any, slot: Slot) -> None:
    """A request on `slot` was answered (or `slot` was just replaced): close a replaced slot nobody holds."""
    if slot is server.slot or slot.holders > 0 or slot not in server.state.draining:
        return
    server.state.draining.discard(slot)
    server.state.finished_before.update(slot.generator.finished)
    asyncio.get_running_loop().run_in_executor(None, slot.generator.close, RETIRE_TIMEOUT_S)


async def close_all(server: Any, timeout: float) -> None:
    """End every generation of every slot, the current one and those still draining (the server is stopping)."""
    loop = asyncio.get_running_loop()
    slots = [server.slot, *server.state.draining]
    await asyncio.gather(*(loop.run_in_executor(None, slot.generator.close, timeout) for slot in slots))
