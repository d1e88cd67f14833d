"""The server jobs behind the editors' faces (the language server runs them as children, like every long job).

* ``serve``: `machine serve CHECKPOINT --port P` as a job. It binds the port first (a taken port fails at once),
  loads the checkpoint by the CLI's seam and defaults (`serve.llama_backend.load_backend`: llama.cpp on the
  default GGUF type when llama-cpp-python is installed, else torch; ``backend``/``gguf_type`` choose) with
  ``progress`` events, emits ``ready`` with the URL once the server answers, and serves until
  it is cancelled (SIGTERM stops the HTTP server cleanly; the job then ends ``done``, "stopped serving …").
  Runless: it leaves no `.machine/runs/` entry; exchanges are appended to `.machine/served/` as with the CLI.
* ``tinker-serve``: `machine tinker serve` as a job: SkyRL tx's venv on first use, the detached server, readiness
  (``progress`` events), then `[tinker] base_url` in machine.toml; ``done`` carries the server's record. A cancel
  while it starts stops the half-started server (``process.start`` cleans up on any exception).

* ``use``, ``tinker-status``, ``tinker-stop``: quick verbs (a second or so; `stop` up to 20 s) whose ``done``
  result is the reply the language server sends: the modules they need reach torch lazily, so the server process
  does not import them (lint-imports: server-stays-light).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Any

import msgspec

from machine_lsp.jobs import events as ev
from machine_lsp.jobs.runner import JobContext, JobError
from machine_lsp.serve.ports import HOST, bind_error, port_problem

log = logging.getLogger(__name__)


class ServeArgs(msgspec.Struct, forbid_unknown_fields=True):
    checkpoint: str = "latest"
    port: int = 8765  # serve.agents.DEFAULT_PORT; 0: any free port (the ready event says which)
    max_batch: int = 32
    max_tokens: int = 1024
    temperature: float = 0.0
    no_log: bool = False
    follow: bool = True  # promoted/latest: swap in each newly promoted (or trained) checkpoint
    backend: str | None = None  # "llama.cpp" | "torch"; None: llama.cpp where installed (the CLI's default)
    gguf_type: str | None = None  # llama.cpp's GGUF: "f32" | "f16" | "q8_0"; None: gguf_export.DEFAULT_TYPE


class TinkerServeArgs(msgspec.Struct, forbid_unknown_fields=True):
    model: str | None = None
    port: int | None = None
    ready_timeout: float = 900.0
    write_config: bool = True


def serve(ctx: JobContext, args: ServeArgs) -> tuple[dict[str, Any], str]:
    from machine_lsp.core.store import find_machine_dir
    from machine_lsp.serve import agents
    from machine_lsp.serve.checkpoints import CheckpointError, servable

    if (problem := port_problem(args.port) or _model_problem(args)) is not None:
        raise JobError(problem, kind="usage")
    machine_dir = find_machine_dir(ctx.cwd)
    try:
        target = servable(args.checkpoint, machine_dir)
    except CheckpointError as exc:
        raise JobError(str(exc)) from None
    from machine_lsp.serve import server
    from machine_lsp.serve.served_log import ServedLog

    sock, loaded = _bind_and_load(ctx, args, target, machine_dir)
    settings = server.ServeSettings(
        model_name=agents.MODEL_ID,
        checkpoint=target.address,
        api_key=None,
        default_max_tokens=args.max_tokens,
        default_temperature=args.temperature,
        log=None if args.no_log else ServedLog(machine_dir),
    )
    served: dict[str, Any] = {"checkpoint": target.address, "model": agents.MODEL_ID}

    def ready(url: str) -> None:
        served["url"] = url
        where = "" if args.no_log else f"; exchanges -> {machine_dir / 'served'}/"
        ctx.emit(
            ev.Ready(url=url, name=target.address, message=f"serving {target.address} at {url}/v1{where}")
        )

    following = _following(ctx, args, machine_dir, served)
    asyncio.run(
        _until_stopped(
            server.run, sock, loaded, settings, max_batch=args.max_batch, on_ready=ready, **following
        )
    )
    return served, f"stopped serving {served['checkpoint']}"


def _model_problem(args: ServeArgs) -> str | None:
    from machine_lsp.engines.gguf_export import GGUF_TYPES
    from machine_lsp.serve.llama_backend import BACKENDS, TORCH, default_backend

    if args.backend is not None and args.backend not in BACKENDS:
        return f"backend must be one of {', '.join(BACKENDS)}, not {args.backend!r}"
    if args.gguf_type is not None and args.gguf_type not in GGUF_TYPES:
        return f"gguf_type must be one of {', '.join(GGUF_TYPES)}, not {args.gguf_type!r}"
    if args.gguf_type is not None and (args.backend or default_backend()) == TORCH:
        return "gguf_type is the llama.cpp backend's GGUF; the torch backend serves the float32 weights"
    return None


def _load(args: ServeArgs, target: Any, machine_dir: Path) -> Any:
    """`target` loaded the way `machine serve` loads it (the same seam, the same defaults)."""
    from machine_lsp.serve import llama_backend

    return llama_backend.load_backend(
        args.backend,
        target.directory,
        base_model=target.base_model,
        store_root=machine_dir,
        gguf_type=args.gguf_type,  # type: ignore[arg-type]  # checked by _model_problem
    )


def _bind_and_load(ctx: JobContext, args: ServeArgs, target: Any, machine_dir: Path) -> tuple[Any, Any]:
    """The listening socket (bound first: a busy port fails before the model loads) and the loaded checkpoint."""
    from machine_lsp.engines.base import EngineError
    from machine_lsp.serve import server
    from machine_lsp.serve.llama_backend import describe

    try:
        sock = server.bind(HOST, args.port)
    except OSError as exc:
        raise JobError(bind_error(exc, HOST, args.port), kind="usage") from None
    how = describe(args.backend, args.gguf_type)
    ctx.progress(0, None, f"loading {target.address} ({target.base_model}) with {how} …", force=True)
    try:
        loaded = _load(args, target, machine_dir)
    except EngineError as exc:
        sock.close()
        raise JobError(str(exc), kind="engine") from None
    except BaseException:
        sock.close()
        raise
    return sock, loaded


async def _until_stopped(run: Any, *args: Any, **kwargs: Any) -> None:
    """`run(*args, stop=…, **kwargs)` until SIGINT/SIGTERM (a cancel stops the HTTP server cleanly) or the
    language server that started the job is gone."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watch = asyncio.ensure_future(_stop_when_orphaned(stop))
    try:
        await run(*args, stop=stop, **kwargs)
    finally:
        watch.cancel()


def _following(ctx: JobContext, args: ServeArgs, machine_dir: Any, served: dict[str, Any]) -> dict[str, Any]:
    """`server.run`'s follow arguments for `promoted`/`latest` (none for a fixed checkpoint or `follow: false`): a
    swap is announced as the server being ready again, on the new checkpoint; a failed one as a warning."""
    from machine_lsp.serve import swap
    from machine_lsp.serve.checkpoints import Target
    from machine_lsp.serve.generation import Loaded

    if not args.follow or args.checkpoint not in swap.FOLLOWED:
        return {}

    def swapped(checkpoint: str | None, line: str) -> None:
        if checkpoint is None:
            ctx.emit(ev.Log(message=ev.SWAP_FAILED + line, level="warning"))
            return
        served["checkpoint"] = checkpoint
        ctx.emit(ev.Ready(url=served["url"], name=checkpoint, message=line))

    def load(new: Target) -> Loaded:
        return _load(args, new, machine_dir)  # the backend the server started with

    return {"follow": swap.Follower(args.checkpoint, machine_dir), "load": load, "on_swap": swapped}


async def _stop_when_orphaned(stop: asyncio.Event, every_s: float = 1.0) -> None:
    """A server whose editor died (its language server killed) must not hold the port forever: the job runs in
    its own session, so nothing else would stop it."""
    parent = os.getppid()
    while not stop.is_set():
        await asyncio.sleep(every_s)
        if os.getppid() != parent:
            log.warning("the language server that started this job is gone: stopping")
            stop.set()


def tinker_serve(ctx: JobContext, args: TinkerServeArgs) -> tuple[dict[str, Any], str]:
    from machine_lsp.core.store import find_machine_dir, make_machine_dir
    from machine_lsp.scaffold.config import ConfigError
    from machine_lsp.tinker_server import process, project
    from machine_lsp.tinker_server.venv import ServerSetupError

    def progress(message: str) -> None:
        log.info("%s", message)
        ctx.progress(0, None, message, force=True)

    machine_dir = find_machine_dir(ctx.cwd)
    make_machine_dir(machine_dir)
    try:
        record = process.start(
            machine_dir, model=args.model, port=args.port, progress=progress, ready_timeout=args.ready_timeout
        )
    except process.ServerError as exc:
        raise JobError(str(exc), kind="usage" if "in use" in str(exc) else "input") from None
    except ServerSetupError as exc:
        raise JobError(str(exc), kind="engine") from None
    result: dict[str, Any] = msgspec.to_builtins(record)
    result["config"] = None
    if args.write_config:
        try:
            result["config"] = str(project.set_base_url(ctx.cwd, record.base_url))
        except (ConfigError, OSError) as exc:
            ctx.log(f"{exc}; export TINKER_BASE_URL={record.base_url} instead", level="warning")
    return result, f"Tinker server ready at {record.base_url} (pid {record.pid})"


class UseArgs(msgspec.Struct, forbid_unknown_fields=True):
    agent: str
    checkpoint: str = "latest"
    port: int = 8765
    write: bool = False
    served: str | None = None  # the checkpoint the editor's server serves on `port`, if one runs


def use(ctx: JobContext, args: UseArgs) -> tuple[dict[str, Any], str]:
    """`machine use CHECKPOINT --agent A [--write]`; the result is the language server's UseReply."""
    from machine_lsp.core.store import find_machine_dir
    from machine_lsp.serve import agents
    from machine_lsp.serve.checkpoints import CheckpointError, resolve

    machine_dir = find_machine_dir(ctx.cwd)
    try:
        target = resolve(args.checkpoint, machine_dir)
        ep = agents.endpoint_for(target.address, target.kind, port=args.port, keyed=False)
        cfg = agents.config_for(args.agent, ep, machine_dir.parent)
    except (CheckpointError, agents.UseError) as exc:
        raise JobError(str(exc), kind="usage") from None
    notes = list(cfg.notes)
    if ep.local and args.served is None:
        notes.append(f"start the server first: Serve Checkpoint ({args.checkpoint}) on port {args.port}")
    elif ep.local and args.served != target.address:
        notes.append(f"the server on port {args.port} serves {args.served}, not {target.address}: restart it")
    written: list[str] = []
    if args.write:
        try:
            written = [str(path) for path in agents.write(cfg)]
        except agents.UseError as exc:
            raise JobError(str(exc), kind="usage") from None
    message = (
        f"{args.agent} now uses {target.address}: wrote {', '.join(written)}"
        if written
        else f"{args.agent}: {cfg.path} (not written)"
    )
    result = {
        "agent": args.agent,
        "checkpoint": target.address,
        "path": str(cfg.path),
        "text": cfg.text,
        "notes": notes,
        "warnings": list(cfg.warnings),
        "written": written,
        "local": ep.local,
        "port": args.port if ep.local else None,
        "serving": args.served is not None,
        "message": message,
    }
    return result, message


class TinkerArgs(msgspec.Struct, forbid_unknown_fields=True):
    pass


def _tinker_state(record: Any, message: str, **extra: Any) -> dict[str, Any]:
    """The language server's TinkerServerReply fields for a server record."""
    return {
        "status": "running" if record.ready else "starting",
        "message": message,
        "base_url": record.base_url,
        "pid": record.pid,
        "model": record.model,
        "log": record.log,
        "started_at": record.started_at,
        **extra,
    }


def tinker_status(ctx: JobContext, args: TinkerArgs) -> tuple[dict[str, Any], str]:
    """`machine tinker status`: the project's server record (a stale one is removed) and whether it answers."""
    from machine_lsp.core.store import find_machine_dir
    from machine_lsp.tinker_server import process

    record, stale = process.live_record(find_machine_dir(ctx.cwd))
    if record is None:
        note = " (removed a stale record: its process is gone)" if stale else ""
        message = f"no Tinker server running for this project{note}"
        return {"status": "stopped", "message": message, "stale_record_removed": stale}, message
    answering = process.healthy(record.base_url)
    message = f"Tinker server on {record.base_url}: {'answering' if answering else 'not answering yet'}"
    return _tinker_state(record, message, answering=answering), message


def tinker_stop(ctx: JobContext, args: TinkerArgs) -> tuple[dict[str, Any], str]:
    """`machine tinker stop`."""
    from machine_lsp.core.store import find_machine_dir
    from machine_lsp.tinker_server import process

    try:
        outcome = process.stop(find_machine_dir(ctx.cwd))
    except process.ServerError as exc:
        raise JobError(str(exc)) from None
    message = outcome.message
    if outcome.stopped is None:
        return {"status": "stopped", "message": message}, message
    return {**_tinker_state(outcome.stopped, message), "status": "stopped"}, message
