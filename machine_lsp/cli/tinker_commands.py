"""`machine tinker serve|status|stop`: a local, self-hosted Tinker-API server (SkyRL tx) for this project.

`serve` prepares SkyRL tx's own venv on first use, starts the server on 127.0.0.1 with the embedded SmolLM2 (or
`--model DIR`), waits until it answers, prints the `TINKER_BASE_URL` and writes it to machine.toml
`[tinker] base_url`, where `--engine tinker` finds it. Exit codes: 0 ok, 1 the server failed or is not running
(`status`), 2 bad usage (port in use, missing model dir, a server already running).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from machine_lsp.cli.verb_parsers import VerbParsers
from machine_lsp.core.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def register(verbs: VerbParsers) -> None:
    serve = verbs.parser("tinker serve", _serve)
    serve.add_argument(
        "--model", metavar="DIR", help="a local Hugging Face model directory (default: SmolLM2)"
    )
    serve.add_argument(
        "--port", type=int, metavar="P", help="TCP port on 127.0.0.1 (default: 8000, else a free one)"
    )
    serve.add_argument("--nice", type=int, default=0, metavar="N", help="run the server at nice level N")
    serve.add_argument(
        "--ready-timeout", type=float, default=900.0, metavar="S", help="seconds to wait for it to answer"
    )
    serve.add_argument("--no-config", action="store_true", help="do not write the URL into machine.toml")

    status = verbs.parser("tinker status", _status)
    status.add_argument("--json", action="store_true", help="print the server record as JSON")

    verbs.parser("tinker stop", _stop)


def _machine_dir() -> Path:
    from machine_lsp.core.store import find_machine_dir, make_machine_dir

    directory = find_machine_dir(Path.cwd())
    make_machine_dir(directory)
    return directory


def _serve(args: argparse.Namespace) -> int:
    from machine_lsp.scaffold.config import ConfigError
    from machine_lsp.tinker_server import process, project
    from machine_lsp.tinker_server.venv import ServerSetupError

    out, err = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    started = time.monotonic()

    def progress(message: str) -> None:
        err.print(f"[dim]{escape(message)}[/]")

    try:
        record = process.start(
            _machine_dir(),
            model=args.model,
            port=args.port,
            nice=args.nice,
            progress=progress,
            ready_timeout=args.ready_timeout,
        )
    except process.ServerError as exc:
        err.print(f"machine: {escape(str(exc))}")
        usage = (
            "already running" in str(exc)
            or "in use" in str(exc)
            or "--model" in str(exc)
            or "--port" in str(exc)
        )
        return EXIT_USAGE if usage else EXIT_FAILED
    except ServerSetupError as exc:
        err.print(f"machine: {escape(str(exc))}")
        return EXIT_FAILED
    out.print(
        f"Tinker server ready in {time.monotonic() - started:.0f} s (pid {record.pid}, log {record.log})"
    )
    out.print(f"TINKER_BASE_URL={record.base_url}")
    if not args.no_config:
        try:
            path = project.set_base_url(Path.cwd(), record.base_url)
            out.print(f"wrote [tinker] base_url to {escape(str(path))}; `--engine tinker` verbs use it")
        except (ConfigError, OSError) as exc:
            err.print(
                f"machine: warning: {escape(str(exc))}; export TINKER_BASE_URL={record.base_url} instead"
            )
    out.print("stop it with [bold]machine tinker stop[/]")
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    import msgspec

    from machine_lsp.tinker_server import process

    out = Console(soft_wrap=True)
    machine_dir = _machine_dir()
    record, stale = process.live_record(machine_dir)
    if args.json:
        payload = msgspec.to_builtins(record) if record else None
        if record:
            payload["answering"] = process.healthy(record.base_url)
        out.print_json(data={"server": payload, "stale_record_removed": stale})
        return EXIT_OK if record else EXIT_FAILED
    if record is None:
        note = " (removed a stale record: its process is gone)" if stale else ""
        out.print(f"no Tinker server running for this project{note}")
        return EXIT_FAILED
    answering = process.healthy(record.base_url)
    state = "answering" if answering else "not answering yet"
    out.print(f"Tinker server pid {record.pid} on {record.base_url}: {state}; started {record.started_at}")
    out.print(f"model {escape(record.model)}; log {escape(record.log)}")
    for line in process.log_tail(Path(record.log), 5):
        out.print(f"  [dim]{escape(line[:200])}[/]")
    return EXIT_OK


def _stop(args: argparse.Namespace) -> int:
    from machine_lsp.tinker_server import process

    out = Console(soft_wrap=True)
    try:
        outcome = process.stop(_machine_dir())
    except process.ServerError as exc:
        Console(stderr=True, soft_wrap=True).print(f"machine tinker stop: {escape(str(exc))}")
        return EXIT_FAILED
    out.print(escape(outcome.message))
    return EXIT_OK
