"""The managed server's record (`.machine/tinker-server/server.json`) and the proof that a process is that server.

The record names the pid with the process's start time (clock ticks since boot) and the boot id, so a reused pid
or a record left by a reboot reads as stale; and, since a record is only a file in the project (a cloned repository
can hold any), with the server's exact command line and a random token put into the server's environment
(`MACHINE_TINKER_TOKEN`). Only a process that matches all of them is ever signalled (`owned`).

The record is read and written by the safe-write rule (core/safe_files.py): no link is followed, a planted
`server.tmp` or linked `tinker-server/` is never written through, and a record that does not decode is "garbled":
`machine tinker stop` removes it and says so.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import msgspec

from machine_lsp.core.safe_files import NotRegularFile, open_dir_under, read_file_safely, write_file_safely

DIR_NAME = "tinker-server"
RECORD_FILE = "server.json"
TOKEN_ENV = "MACHINE_TINKER_TOKEN"


class ServerRecord(msgspec.Struct, kw_only=True):
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells a reused pid apart
    boot_id: str  # /proc/sys/kernel/random/boot_id: tells a record from before a reboot apart
    host: str
    port: int
    base_url: str
    model: str
    log: str
    started_at: str
    ready: bool = False
    cmdline: list[str] = msgspec.field(default_factory=list)  # the server's argv (after `nice`, if any)
    token: str = ""  # MACHINE_TINKER_TOKEN in the server's environment


class GarbledRecord(Exception):
    """The record exists but is not a server record (bad JSON, wrong fields, a link or special file)."""


@dataclass(frozen=True)
class Ownership:
    owned: bool
    reason: str  # why not, in words: "its command line is not the server's", ...


def server_dir(machine_dir: Path) -> Path:
    return machine_dir / DIR_NAME


def record_path(machine_dir: Path) -> Path:
    return server_dir(machine_dir) / RECORD_FILE


def new_token() -> str:
    return secrets.token_hex(16)


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start_ticks(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot, or None if there is no such process (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after its closing parenthesis.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # exited, waiting to be reaped: it is not running
        return None
    return int(fields[19])  # field 22 overall; fields[0] is field 3


def read_record(machine_dir: Path) -> ServerRecord | None:
    """The record, None when there is none; GarbledRecord (with the reason) when it is not one."""
    path = record_path(machine_dir)
    try:
        data = read_file_safely(path, root=machine_dir.parent)
    except NotRegularFile as exc:
        raise GarbledRecord(str(exc)) from None
    except OSError as exc:
        raise GarbledRecord(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data is None:
        return None
    try:
        return msgspec.json.decode(data, type=ServerRecord)
    except msgspec.MsgspecError as exc:
        raise GarbledRecord(f"{path}: not a server record ({exc})") from None


def write_record(machine_dir: Path, record: ServerRecord) -> None:
    write_file_safely(record_path(machine_dir), msgspec.json.encode(record), root=machine_dir.parent)


def remove_record(machine_dir: Path) -> None:
    """Remove the record (a link or special file there is removed itself; nothing it points at is touched)."""
    try:
        fd = open_dir_under(server_dir(machine_dir), machine_dir.parent, create=False)
    except (FileNotFoundError, NotRegularFile):
        return
    try:
        os.unlink(RECORD_FILE, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0")[:-1]]


def _holds_token(pid: int, token: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{TOKEN_ENV}={token}".encode() in environ.split(b"\0")


def is_alive(record: ServerRecord) -> bool:
    """The recorded process still runs: same pid, same start time, same boot (it may still not be ours)."""
    if record.boot_id and record.boot_id != boot_id():
        return False
    return process_start_ticks(record.pid) == record.start_ticks


def ownership(record: ServerRecord) -> Ownership:
    """Whether the running process the record names is provably the server `machine tinker serve` started."""
    if not is_alive(record):
        return Ownership(False, "its process is gone")
    if not record.token or not record.cmdline:
        return Ownership(False, "the record carries no proof of which process is the server")
    cmdline = _cmdline(record.pid)
    # Right after the start `nice` may not have exec'd the server yet: its argv ends with the server's.
    if cmdline is None or cmdline[-len(record.cmdline) :] != record.cmdline:
        return Ownership(False, "its command line is not the server's")
    if not _holds_token(record.pid, record.token):
        return Ownership(False, "it does not hold the server's token")
    return Ownership(True, "")


def live_record(machine_dir: Path) -> tuple[ServerRecord | None, bool]:
    """(the record of our running server or None, whether a stale or garbled record was found and removed)."""
    try:
        record = read_record(machine_dir)
    except GarbledRecord:
        remove_record(machine_dir)
        return None, True
    if record is None:
        return None, False
    if ownership(record).owned:
        return record, False
    if is_alive(record):
        # A live process the record cannot prove is ours: never reported as our server, never signalled; the
        # record stays for `machine tinker stop`, which says why it signals nothing and clears it.
        return None, False
    remove_record(machine_dir)
    return None, True
