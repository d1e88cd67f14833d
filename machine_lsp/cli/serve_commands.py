"""`machine serve [CHECKPOINT]` and `machine use CHECKPOINT --agent A`: use a trained checkpoint from an agent.

`serve` binds its port first (a taken port fails before the model loads), loads the checkpoint (LoRA merged) and
answers OpenAI Chat Completions, OpenAI Responses and Anthropic Messages on 127.0.0.1; every answered exchange is
appended to `.machine/served/<date>.jsonl` for tagging. Heavy imports happen only inside the command.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import ipaddress
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.exit_codes import EXIT_OK, EXIT_USAGE
from machine_lsp.core.store import find_machine_dir
from machine_lsp.core.terminal_text import for_terminal
from machine_lsp.engines.gguf_export import DEFAULT_TYPE, GGUF_TYPES
from machine_lsp.serve import agents
from machine_lsp.serve.checkpoints import CheckpointError, Target, resolve, servable


def _err() -> Console:
    return Console(stderr=True, soft_wrap=True)


def register(verbs: VerbParsers) -> None:
    serve = verbs.parser("serve", _serve)
    serve.add_argument(
        "checkpoint",
        nargs="?",
        default="latest",
        metavar="CHECKPOINT",
        help="latest (default: the newest training run's last checkpoint), promoted (what the eval gate or "
        "`machine train promote` promoted; base when none), base, local://RUN/NAME or a directory; latest and "
        "promoted are followed: a new checkpoint is swapped in with no restart",
    )
    serve.add_argument("--port", type=int, default=agents.DEFAULT_PORT, metavar="P")
    serve.add_argument("--host", default="127.0.0.1", metavar="H", help="non-loopback hosts need --api-key")
    serve.add_argument(
        "--api-key",
        metavar="K",
        default=os.environ.get(agents.SERVE_KEY_ENV),
        help=f"key clients must send (default: ${agents.SERVE_KEY_ENV})",
    )
    serve.add_argument("--max-batch", type=int, default=32, metavar="N", help="requests decoded together")
    serve.add_argument(
        "--max-tokens", type=int, default=1024, metavar="N", help="cap on every reply's tokens (default 1024)"
    )
    serve.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="when a request sets none (default 0: greedy)",
    )
    serve.add_argument(
        "--max-body-mb",
        type=float,
        default=8.0,
        metavar="MB",
        help="largest request body accepted; bigger ones get a 413 (default 8)",
    )
    serve.add_argument("--no-log", action="store_true", help="do not append exchanges to .machine/served/")
    _add_model_options(serve)
    _register_use(verbs)


def _add_model_options(serve: argparse.ArgumentParser) -> None:
    """How `machine serve` loads and follows its model: backend, contexts, merging, following the store."""
    serve.add_argument(
        "--no-merge", action="store_true", help="keep the LoRA adapter unmerged (torch; slower)"
    )
    serve.add_argument(
        "--no-follow",
        action="store_true",
        help="promoted/latest: keep the checkpoint loaded at start (default: swap in each new one, no restart)",
    )
    serve.add_argument(
        "--backend",
        choices=["llama.cpp", "torch"],
        help="llama.cpp (the default when llama-cpp-python is installed: the checkpoint merged into a GGUF) or "
        "torch (the reference; batched waves)",
    )
    serve.add_argument(
        "--workers", type=int, default=1, metavar="N", help="llama.cpp contexts decoding at once (default 1)"
    )
    add_gguf_type(serve, "the merged GGUF llama.cpp serves")


def add_gguf_type(parser: argparse.ArgumentParser, what: str) -> None:
    """`--gguf-type f32|f16|q8_0` (`engines.gguf_export.GGUF_TYPES`; the default is its DEFAULT_TYPE)."""
    parser.add_argument(
        "--gguf-type",
        choices=GGUF_TYPES,
        help=f"{what} (default {DEFAULT_TYPE}): f32 (torch's answers token for token), f16 (as right as torch on "
        "the minimal-sft eval), q8_0 (llama.cpp's quantizer: fastest, fewer exact answers there; "
        "docs/SERVE.md)",
    )


def _register_use(verbs: VerbParsers) -> None:
    use = verbs.parser("use", _use)
    use.add_argument(
        "checkpoint", metavar="CHECKPOINT", help="latest, promoted, base, local://RUN/NAME or tinker://…"
    )
    use.add_argument(
        "--agent", required=True, type=agents.agent_alias, choices=agents.AGENTS, help="claude-code = claude"
    )
    use.add_argument("--write", action="store_true", help="merge it into the config file the agent reads")
    use.add_argument(
        "--port", type=int, default=agents.DEFAULT_PORT, metavar="P", help="port of `machine serve`"
    )
    use.add_argument(
        "--keyed", action="store_true", help=f"the server checks a key (${agents.SERVE_KEY_ENV})"
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the options of `machine serve` (None: nothing)."""
    if not 0 < args.port < 65536:
        return f"--port must be 1-65535, got {args.port}"
    if not _is_loopback(args.host) and not args.api_key:
        return (
            f"refusing to listen on {escape(args.host)} without a key: pass --api-key "
            f"(or set {agents.SERVE_KEY_ENV}); clients then send it as a Bearer token or x-api-key"
        )
    if args.max_batch < 1 or args.max_tokens < 1 or args.workers < 1 or not 0 <= args.temperature <= 2:
        return "--max-batch, --max-tokens and --workers must be at least 1, --temperature in [0, 2]"
    if not 0 < args.max_body_mb <= 1024:
        return f"--max-body-mb must be in (0, 1024], got {args.max_body_mb:g}"
    if args.backend == "llama.cpp" and args.no_merge:
        return "--no-merge keeps the adapter apart, which only the torch backend does (--backend torch)"
    if args.gguf_type and _backend(args) == "torch":
        return "--gguf-type is the llama.cpp backend's GGUF; the torch backend serves the float32 weights"
    return None


def _backend(args: argparse.Namespace) -> str:
    """The backend asked for, else llama.cpp when it is installed (torch when --no-merge is asked for)."""
    from machine_lsp.serve import llama_backend

    if args.backend:
        return str(args.backend)
    return llama_backend.TORCH if args.no_merge else llama_backend.default_backend()


def _load(args: argparse.Namespace, target: Target, machine_dir: Path) -> Any:
    """The checkpoint loaded for the chosen backend (EngineError when it cannot be)."""
    from machine_lsp.serve import llama_backend

    return llama_backend.load_backend(
        _backend(args),
        target.directory,
        base_model=target.base_model,
        store_root=machine_dir,
        workers=args.workers,
        merge=not args.no_merge,
        gguf_type=args.gguf_type,
    )


def _servable(checkpoint: str, machine_dir: Path) -> Target | str:
    """The checkpoint `machine serve` can load, or why it cannot (`serve.checkpoints.servable`)."""
    try:
        return servable(checkpoint, machine_dir)
    except CheckpointError as exc:
        return escape(str(exc))


def _serve(args: argparse.Namespace) -> int:
    err = _err()
    problem = _usage_error(args)
    if problem is not None:
        err.print(f"machine serve: {problem}")
        return EXIT_USAGE
    machine_dir = find_machine_dir()
    target = _servable(args.checkpoint, machine_dir)
    if isinstance(target, str):
        err.print(f"machine serve: {target}")
        return EXIT_USAGE

    from machine_lsp.serve import server

    try:
        sock = server.bind(args.host, args.port)
    except OSError as exc:
        from machine_lsp.serve.ports import bind_error

        err.print(f"machine serve: {escape(bind_error(exc, args.host, args.port))} (--port)")
        return EXIT_USAGE

    from machine_lsp.engines.base import EngineError
    from machine_lsp.serve.llama_backend import describe

    how = describe(_backend(args), args.gguf_type)
    err.print(f"loading {escape(target.address)} ({escape(target.base_model)}) with {how} …")
    try:
        loaded = _load(args, target, machine_dir)
    except EngineError as exc:
        sock.close()
        err.print(f"machine serve: {escape(str(exc))}")
        return EXIT_USAGE
    settings, follow = _settings(args, target, machine_dir), _following(args, machine_dir)

    def ready(url: str) -> None:
        log = "" if args.no_log else f"; exchanges -> {machine_dir / 'served'}/"
        print(f"serving {target.address} as model '{agents.MODEL_ID}' at {url}/v1{log}", flush=True)

    _log_to(err)
    serving = functools.partial(
        server.run, sock, loaded, settings, max_batch=args.max_batch, on_ready=ready, **follow
    )
    asyncio.run(_until_signalled(serving))
    err.print("machine serve: stopped")
    return EXIT_OK


def _settings(args: argparse.Namespace, target: Target, machine_dir: Path) -> Any:
    from machine_lsp.serve import server
    from machine_lsp.serve.served_log import ServedLog

    return server.ServeSettings(
        model_name=agents.MODEL_ID,
        checkpoint=target.address,
        api_key=args.api_key or None,
        default_max_tokens=args.max_tokens,
        default_temperature=args.temperature,
        max_body_mb=args.max_body_mb,
        log=None if args.no_log else ServedLog(machine_dir),
    )


def _following(args: argparse.Namespace, machine_dir: Path) -> dict[str, Any]:
    """`server.run`'s follow/load arguments: `promoted` and `latest` follow the store unless --no-follow."""
    from machine_lsp.serve import swap

    if args.no_follow or args.checkpoint not in swap.FOLLOWED:
        return {}

    def load(target: Target) -> Any:
        return _load(args, target, machine_dir)  # the backend the server started with

    return {"follow": swap.Follower(args.checkpoint, machine_dir), "load": load}


class _ConsoleLog(logging.Handler):
    """Log records as one rich line each on stderr: `machine.serve`'s request lines plain, library warnings marked."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = escape(for_terminal(record.getMessage()))  # a request's path is the client's text
            if record.exc_info and record.exc_info[1] is not None:
                text += escape(f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})")
            if record.levelno >= logging.WARNING:
                text = f"[yellow]{record.levelname.lower()}:[/] {escape(record.name)}: {text}"
            self.console.print(text, highlight=False)
        except Exception:  # a log line never breaks the server
            self.handleError(record)


def _log_to(console: Console) -> None:
    """Route every logger through one rich handler on stderr (no raw library tracebacks in the terminal)."""
    root = logging.getLogger()
    root.handlers[:] = [_ConsoleLog(console)]
    root.setLevel(logging.WARNING)
    logging.getLogger("machine.serve").setLevel(logging.INFO)


async def _until_signalled(serving: Callable[..., Awaitable[None]]) -> None:
    """Await `serving(stop=event)`; SIGINT or SIGTERM sets the event."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serving(stop=stop)


def _use(args: argparse.Namespace) -> int:
    err = _err()
    machine_dir = find_machine_dir()
    try:
        target = resolve(args.checkpoint, machine_dir)
    except CheckpointError as exc:
        err.print(f"machine use: {escape(str(exc))}")
        return EXIT_USAGE
    try:
        ep = agents.endpoint_for(target.address, target.kind, port=args.port, keyed=args.keyed)
        cfg = agents.config_for(args.agent, ep, machine_dir.parent)
    except agents.UseError as exc:
        err.print(f"machine use: {escape(str(exc))}")
        return EXIT_USAGE
    for warning in cfg.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    out = Console(soft_wrap=True, highlight=False)
    out.print(f"# {cfg.agent}: {cfg.path}")
    print(cfg.text.rstrip("\n"))
    for note in cfg.notes:
        out.print(f"# {escape(note)}")
    if ep.local:
        out.print(f"# start the server: machine serve {escape(args.checkpoint)} --port {args.port}")
    if args.write:
        try:
            written = agents.write(cfg)
        except agents.UseError as exc:
            err.print(f"machine use: {escape(str(exc))}")
            return EXIT_USAGE
        for path in written:
            out.print(f"wrote {path}")
    return EXIT_OK
