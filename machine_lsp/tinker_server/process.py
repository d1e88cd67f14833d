"""Start, find, wait for and stop the managed SkyRL tx server (`machine tinker serve|status|stop`).

* One server per project: its record (`server.json`, record.py), log, database and checkpoints live in
  `.machine/tinker-server/`, written by the safe-write rule (no link followed). `stop` signals only a process the
  record proves to be the server (pid, start time, boot, command line and a token in its environment), and says
  whether it really ended.
* The server runs detached (its own session, so `stop` signals the API server and the engine it spawns together),
  under SkyRL tx's own venv (`venv.py`), always on 127.0.0.1, through the compatibility layer (`compat.py`).
* SkyRL tx starts its engine with a hard-coded `uv run ... -m tx.tinker.engine ...`: a `uv` shim on the server's
  PATH runs the venv's python with what follows `-m`.
* JAX compiles every new input shape (1-3 min on CPU); a persistent compile cache under the user cache makes a
  restart reuse them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from machine_lsp.core.safe_files import open_append_safely, open_dir_under, write_file_safely
from machine_lsp.tinker_server import venv
from machine_lsp.tinker_server.record import (  # noqa: F401 (re-exported: the verbs and tests use process.X)
    DIR_NAME,
    RECORD_FILE,
    TOKEN_ENV,
    GarbledRecord,
    ServerRecord,
    boot_id,
    is_alive,
    live_record,
    new_token,
    ownership,
    process_start_ticks,
    read_record,
    record_path,
    remove_record,
    server_dir,
    write_record,
)

Progress = Callable[[str], None]

HOST = "127.0.0.1"
DEFAULT_PORT = 8000
LOG_FILE = "server.log"
READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 20.0
START_MARKER = "--- machine tinker serve"
ENGINE_READY_LINE = "Initialized TinkerEngine"
COMPAT_SCRIPT = Path(__file__).with_name("compat.py")
# LoRA adapters the engine keeps: N allows N-1 live training clients (slot 0 is the base model).
MAX_LORA_ADAPTERS = 8
MAX_LORA_RANK = 32
# A job's client heartbeats every 10 s while it runs; once it stops for this long, tx frees the job's adapter slot.
# tx's default (300 s) let a few quick jobs in a row fill all 7 slots ("Maximum number of LoRA adapters (8)
# reached"); 60 s is still six missed heartbeats, which a busy engine's API process does not come near.
SESSION_TIMEOUT_S = 60
SESSION_CHECK_S = 10

UV_SHIM = """#!/bin/sh
# SkyRL tx starts its engine with `uv run [uv options] -m tx.tinker.engine ...`: run this venv's python with
# everything from `-m` on. Written by machine-lsp (`machine tinker serve`).
while [ $# -gt 0 ] && [ "$1" != "-m" ]; do shift; done
exec {python} "$@"
"""


class ServerError(RuntimeError):
    """A serve/stop request that cannot be carried out; the message is one line that says why and what to do."""


def base_url_for(port: int) -> str:
    return f"http://{HOST}:{port}"


def port_free(port: int) -> bool:
    """Nothing listens on `port`. SO_REUSEADDR as uvicorn binds: the connections of a server that just died
    linger in TIME_WAIT for a minute and must not make its own port look taken to the restart."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def healthy(base_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/api/v1/healthz", timeout=timeout) as response:
            return response.status == 200 and json.loads(response.read()).get("status") == "ok"
    except (OSError, ValueError, urllib.error.URLError):
        return False


def log_tail(path: Path, lines: int = 8) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def tinker_proto_path() -> Path:
    """Our tinker SDK's generated protobuf module (the compat layer decodes request bodies with it)."""
    import importlib.util

    spec = importlib.util.find_spec("tinker")  # finds the package without importing it (and torch)
    if spec is None or not spec.submodule_search_locations:
        raise ServerError("the tinker SDK is not installed in this environment")
    path = Path(next(iter(spec.submodule_search_locations))) / "proto" / "tinker_public_pb2.py"
    if not path.is_file():
        raise ServerError(f"{path}: missing; the tinker SDK in this environment is not 0.38")
    return path


def resolve_model(model: str | None, progress: Progress) -> Path:
    """`--model DIR` (a local HF directory) or the embedded SmolLM2, converted once into the cache."""
    if model is None:
        from machine_lsp.engines import smollm2

        return smollm2.ensure_model(progress)
    path = Path(model).expanduser().absolute()
    if not path.is_dir():
        raise ServerError(f"--model {model}: no such directory (pass a local Hugging Face model directory)")
    if not (path / "config.json").is_file():
        raise ServerError(f"--model {model}: not a Hugging Face model directory (no config.json in it)")
    return path


def _v4_tokenizer_config(config: dict) -> bool:
    """transformers 5 -> 4.x tokenizer_config.json, in place; True if anything changed."""
    changed = False
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        changed = True
    if config.pop("backend", None) is not None:
        changed = True
    if isinstance(config.get("extra_special_tokens"), list):
        config["additional_special_tokens"] = config.pop("extra_special_tokens")
        changed = True
    return changed


def _v4_model_config(config: dict) -> bool:
    """transformers 5 -> 4.x config.json (flat rope_theta, torch_dtype), in place; True if anything changed."""
    changed = False
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" not in config and "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
        if rope.get("rope_type", "default") == "default":
            config.setdefault("rope_scaling", None)
        changed = True
    if "dtype" in config and "torch_dtype" not in config:
        config["torch_dtype"] = config["dtype"]
        changed = True
    return changed


def server_model_dir(model_dir: Path) -> Path:
    """`model_dir` as SkyRL tx's transformers 4.57 can read it.

    A directory saved by transformers 5 (our SmolLM2 conversion) names its tokenizer class `TokenizersBackend`,
    lists `extra_special_tokens` and nests `rope_theta` in `rope_parameters`, none of which 4.57 (or tx's model
    code) reads. Such a directory is served through a view in the cache: links to every file but these two JSON
    files, which are rewritten in the 4.x form.
    """
    rewritten: dict[str, dict] = {}
    for name, convert in (("tokenizer_config.json", _v4_tokenizer_config), ("config.json", _v4_model_config)):
        try:
            config = json.loads((model_dir / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and convert(config):
            rewritten[name] = config
    if not rewritten:
        return model_dir
    view = venv.cache_dir() / "models" / model_dir.name
    tmp = view.with_name(f".{view.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.name not in rewritten:
            (tmp / item.name).symlink_to(item.absolute())
    for name, config in rewritten.items():
        (tmp / name).write_text(json.dumps(config, indent=2))
    shutil.rmtree(view, ignore_errors=True)
    tmp.rename(view)
    return view


def _check_port(machine_dir: Path, port: int | None, progress: Progress) -> int:
    """The port to serve on; refuses a second server for the project and a taken or impossible port."""
    running, stale = live_record(machine_dir)
    if running is not None:
        raise ServerError(
            f"a Tinker server is already running for this project (pid {running.pid}, {running.base_url}); "
            "`machine tinker stop` first"
        )
    if stale:
        progress("removed a stale server record (its process is gone)")
    if port is None:
        return DEFAULT_PORT if port_free(DEFAULT_PORT) else free_port()
    if not 1 <= port <= 65535:
        raise ServerError(f"--port {port}: not a TCP port (1-65535)")
    if not port_free(port):
        raise ServerError(f"port {port} on {HOST} is in use; pick another with --port")
    return port


def _server_command(home: Path, venv_dir: Path, model_dir: Path, port: int, nice: int) -> list[str]:
    """The SkyRL tx command line (through `compat.py`), with the `uv` shim it expects written into `home/bin`."""
    root = home.parent.parent  # the project: no link on the way down from it
    os.close(open_dir_under(home / "checkpoints", root))
    shim = UV_SHIM.format(python=venv.venv_python(venv_dir)).encode()
    write_file_safely(home / "bin" / "uv", shim, root=root, new_mode=0o755)
    backend_config = {"max_lora_adapters": MAX_LORA_ADAPTERS, "max_lora_rank": MAX_LORA_RANK}
    argv = [
        str(venv.venv_python(venv_dir)),
        str(COMPAT_SCRIPT),
        *("--host", HOST, "--port", str(port), "--base-model", str(model_dir)),
        *("--backend", "jax", "--backend-config", json.dumps(backend_config)),
        *("--session-timeout-sec", str(SESSION_TIMEOUT_S)),
        *("--session-cleanup-interval-sec", str(SESSION_CHECK_S)),
        *("--database-url", f"sqlite:///{home / 'tinker.db'}"),
        *("--checkpoints-base", str(home / "checkpoints")),
        *("--tinker-proto", str(tinker_proto_path())),
    ]
    return ["nice", "-n", str(nice), *argv] if nice else argv


def _server_env(home: Path, token: str) -> dict[str, str]:
    """Our environment for the server: CPU JAX with a persistent compile cache, offline, none of our packages."""
    jax_cache = venv.cache_dir() / "jax-cache"
    jax_cache.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        PATH=f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=str(jax_cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5",
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    env[TOKEN_ENV] = token  # what `stop` checks before it signals anything
    env.pop("PYTHONPATH", None)  # the server venv must not see our packages
    env.pop("VIRTUAL_ENV", None)
    return env


def start(
    machine_dir: Path,
    *,
    model: str | None = None,
    port: int | None = None,
    nice: int = 0,
    progress: Progress,
    ready_timeout: float = READY_TIMEOUT_S,
) -> ServerRecord:
    """Start the server and wait until it answers; returns its record. Raises ServerError."""
    port = _check_port(machine_dir, port, progress)
    model_dir = server_model_dir(resolve_model(model, progress))
    venv_dir = venv.ensure_venv(progress)
    home = server_dir(machine_dir)
    try:
        argv = _server_command(home, venv_dir, model_dir, port, nice)
        log_fd = open_append_safely(home / LOG_FILE, root=machine_dir.parent)
    except OSError as exc:
        raise ServerError(f"cannot prepare {home}: {exc}") from None
    progress(f"starting SkyRL tx on {base_url_for(port)} with {model_dir} (log: {home / LOG_FILE})")
    token = new_token()
    proc = _spawn(argv, _server_env(home, token), log_fd)
    record = ServerRecord(
        pid=proc.pid,
        start_ticks=process_start_ticks(proc.pid) or 0,
        boot_id=boot_id(),
        host=HOST,
        port=port,
        base_url=base_url_for(port),
        model=str(model_dir),
        log=str(home / LOG_FILE),
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        cmdline=argv[3:] if nice else argv,  # what runs once `nice` has exec'd the server
        token=token,
    )
    write_record(machine_dir, record)
    try:
        _wait_ready(proc, record, progress, ready_timeout)
    except BaseException:
        _terminate_group(proc.pid)
        proc.wait()
        remove_record(machine_dir)
        raise
    record.ready = True
    write_record(machine_dir, record)
    return record


def _spawn(argv: list[str], env: dict[str, str], log_fd: int) -> subprocess.Popen[bytes]:
    """The server, detached in its own session, its output appended to the log behind a start marker."""
    with open(log_fd, "ab") as log:
        log.write(f"\n{START_MARKER} {dt.datetime.now(dt.UTC).isoformat()} ---\n".encode())
        log.flush()
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _wait_ready(
    proc: subprocess.Popen[bytes], record: ServerRecord, progress: Progress, timeout: float
) -> None:
    started = time.monotonic()
    next_report = started + 10
    log_path = Path(record.log)
    while True:
        code = proc.poll()
        if code is not None:
            tail = " | ".join(log_tail(log_path, 4))
            raise ServerError(f"the server exited with code {code} while starting; last log lines: {tail}")
        # The log first (a file read): polling the API every half second would fill the log with access lines.
        if _engine_ready(log_path) and healthy(record.base_url):
            progress(f"server ready after {time.monotonic() - started:.0f} s")
            return
        now = time.monotonic()
        if now - started > timeout:
            raise ServerError(f"the server did not answer within {timeout:.0f} s; see {log_path}")
        if now >= next_report:
            last = log_tail(log_path, 1)
            progress(f"waiting for the server ({now - started:.0f} s){': ' + last[0][:120] if last else ''}")
            next_report = now + 10
        time.sleep(0.5)


def _engine_ready(log_path: Path) -> bool:
    """The API answers before its engine has loaded the model: wait for the engine's own line in this start's log."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return False
    return ENGINE_READY_LINE in text[text.rfind(START_MARKER) :]


def _signal(record: ServerRecord, sig: signal.Signals) -> None:
    """`sig` to the server's process group (it leads its own session), or to the process alone if it does not
    lead one (it was proven to be the server just before)."""
    try:
        if os.getpgid(record.pid) == record.pid:
            os.killpg(record.pid, sig)
        else:
            os.kill(record.pid, sig)
    except ProcessLookupError:
        pass


def _ended(record: ServerRecord, timeout: float) -> bool:
    """Wait up to `timeout` for the recorded process to end (a reaped pid or a zombie counts as ended)."""
    deadline = time.monotonic() + timeout
    while True:
        _reap(record.pid)
        if not is_alive(record):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _terminate(record: ServerRecord) -> bool:
    """SIGTERM the proven server, SIGKILL it after STOP_TIMEOUT_S; True when it really ended."""
    _signal(record, signal.SIGTERM)
    if _ended(record, STOP_TIMEOUT_S):
        return True
    _signal(record, signal.SIGKILL)
    return _ended(record, 10.0)


def _terminate_group(pid: int, timeout: float = STOP_TIMEOUT_S) -> bool:
    """The child `start` just spawned and still holds (no record needed): SIGTERM its group, then SIGKILL."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        _reap(pid)
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


@dataclass(frozen=True)
class StopOutcome:
    stopped: ServerRecord | None  # the server that was stopped, None when nothing was
    message: str  # one line, true to what happened


def stop(machine_dir: Path) -> StopOutcome:
    """Stop this project's server, signalling only a process the record proves to be it. A stale, garbled or
    unprovable record is removed (nothing signalled); a server that outlives SIGKILL raises ServerError."""
    try:
        record = read_record(machine_dir)
    except GarbledRecord as exc:
        remove_record(machine_dir)
        return StopOutcome(None, f"removed a garbled server record: {exc}; nothing was signalled")
    if record is None:
        return StopOutcome(None, "no Tinker server running for this project")
    proof = ownership(record)
    if not proof.owned:
        remove_record(machine_dir)
        if proof.reason == "its process is gone":
            return StopOutcome(None, "no Tinker server running for this project (removed a stale record)")
        return StopOutcome(
            None,
            f"not stopped: pid {record.pid} is running but {proof.reason}, so it was not signalled; "
            "removed the record",
        )
    if not _terminate(record):
        raise ServerError(
            f"sent SIGKILL to the Tinker server (pid {record.pid}) but it is still running; the record is kept"
        )
    remove_record(machine_dir)
    return StopOutcome(record, f"stopped the Tinker server (pid {record.pid}, {record.base_url})")
