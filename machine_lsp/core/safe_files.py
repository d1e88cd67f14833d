"""Reading inputs and writing outputs without being fooled by special files or symlinks.

* Inputs (`--from FILE`, `train validate FILE`) must be regular files: a FIFO would block forever and
  `/dev/zero` would be read until the machine runs out of memory. They are opened with `O_NONBLOCK` (so opening a
  FIFO cannot block), checked with `fstat`, and refused with a one-line reason when they are anything else.
* Outputs (`export --out FILE`) stay atomic for ordinary files (temporary file + rename, in the directory of the
  file actually written), but a symlink is written through (its target is replaced, the link stays) and an existing
  special file (`/dev/null`, `/dev/full`, a FIFO) is written into, never replaced by a regular file.
* `open_store_dir` / `open_store_file` open the store's own directories and files without following a symlink
  (`O_NOFOLLOW`): a cloned repository must not be able to point the store anywhere.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

_READ_CHUNK = 1 << 20


class NotRegularFile(OSError):
    """The path exists but is not a regular file (or not a directory, where one was expected)."""

    def __init__(self, path: str | os.PathLike[str], what: str, expected: str = "a regular file") -> None:
        super().__init__(errno.EINVAL, f"is {what}, not {expected}", str(path))
        self.what = what

    def __str__(self) -> str:
        return f"{self.filename} {self.strerror}"


def describe_mode(mode: int) -> str:
    """What kind of file a mode says it is, for messages: 'a FIFO (named pipe)', 'a character device', ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _clear_nonblock(fd: int) -> None:
    os.set_blocking(fd, True)


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular file (symlinks to one are fine). Raises FileNotFoundError, PermissionError,
    IsADirectoryError, or NotRegularFile for a FIFO, a device or a socket - without blocking or reading it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, describe_mode(mode))
        _clear_nonblock(fd)
        chunks: list[bytes] = []
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_output(path: str | os.PathLike[str], payload: bytes) -> None:
    """Write `payload` to the output `path`.

    A new or regular file is replaced atomically (a crash never leaves half an output); through a symlink, the
    link's target is the file replaced and the link stays; an existing device or FIFO is written into as it is.
    Raises OSError (IsADirectoryError for a directory, FileNotFoundError when the folder is missing).
    """
    real = Path(os.path.realpath(path))
    try:
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_into_special(real, payload)
        return
    directory = real.parent
    if not directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"the folder {directory} does not exist", str(path))
    fd, tmp_name = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=directory)
    try:
        # mkstemp makes 0600 files: keep an existing file's mode, else give a new one the usual umask mode.
        if st is not None:
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, real)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _write_into_special(path: Path, payload: bytes) -> None:
    # No O_CREAT, no O_TRUNC: the device or FIFO is used as it is, never replaced.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


# -- the store's own files ------------------------------------------------------------------------------------


def open_store_dir(path: Path) -> int:
    """A descriptor of the directory `path`, never through a symlink. Raises FileNotFoundError when it does not
    exist, NotRegularFile when it is a symlink or not a directory, other OSError as they come."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            mode = os.lstat(path).st_mode
            raise NotRegularFile(path, describe_mode(mode), "a directory") from None
        raise
    return fd


def open_store_file(dir_fd: int, name: str, flags: int, display: Path) -> int:
    """Open `name` inside the directory `dir_fd` without following a symlink or blocking on a FIFO; refuse
    anything that is not a regular file (NotRegularFile). The descriptor is returned in blocking mode."""
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(display, "a symbolic link") from None
        if exc.errno == errno.EISDIR:
            raise NotRegularFile(display, "a directory") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(display, describe_mode(mode))
    _clear_nonblock(fd)
    return fd


def check_real_dir(path: Path) -> None:
    """Raise NotRegularFile when `path` exists as a symlink or as anything but a directory."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise NotRegularFile(path, describe_mode(mode), "a directory")
