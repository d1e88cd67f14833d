"""Reading inputs and writing outputs without being fooled by special files or symlinks.

* Inputs (`--from FILE`, `train validate FILE`) must be regular files: a FIFO would block forever and
  `/dev/zero` would be read until the machine runs out of memory. They are opened with `O_NONBLOCK` (so opening a
  FIFO cannot block), checked with `fstat`, and refused with a one-line reason when they are anything else.
* Outputs (`export --out FILE`) stay atomic for ordinary files (temporary file + rename, in the directory of the
  file actually written), but a symlink is written through (its target is replaced, the link stays) and an existing
  special file (`/dev/null`, `/dev/full`, a FIFO) is written into, never replaced by a regular file.
* `open_store_dir` / `open_store_file` open the store's own directories and files without following a symlink
  (`O_NOFOLLOW`): a cloned repository must not be able to point the store anywhere.
* Every other file the tool writes for itself (agent configs, the served-exchange log, the Tinker server records,
  job outputs in the project) goes through `write_file_safely` / `open_append_safely` / `read_file_safely`: the
  directories from a trusted root (the project, HOME) down to the file are walked one name at a time with
  `O_NOFOLLOW` (a linked directory is refused, a missing one created), a symlink, FIFO, device or directory as the
  file is refused with one line naming it, the temporary file gets a random name and is created with
  `O_CREAT|O_EXCL|O_NOFOLLOW` (a planted name is never written through), and an existing file keeps its mode.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

_READ_CHUNK = 1 << 20


class NotRegularFile(OSError):
    """The path exists but is not a regular file (or not a directory, where one was expected)."""

    def __init__(self, path: str | os.PathLike[str], what: str, expected: str = "a regular file") -> None:
        super().__init__(errno.EINVAL, f"is {what}, not {expected}", str(path))
        self.what = what

    def __str__(self) -> str:
        return f"{self.filename} {self.strerror}"


# (test, what it says): the kinds of file a mode can name, for messages.
_MODE_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def describe_mode(mode: int) -> str:
    """What kind of file a mode says it is, for messages: 'a FIFO (named pipe)', 'a character device', ..."""
    return next((what for test, what in _MODE_KINDS if test(mode)), "a special file")


def _clear_nonblock(fd: int) -> None:
    os.set_blocking(fd, True)


def _read_and_close(fd: int) -> bytes:
    """Everything left to read from `fd`, which is closed afterwards whatever happens."""
    try:
        chunks: list[bytes] = []
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
    except BaseException:
        os.close(fd)
        raise
    return _read_and_close(fd)


def unreadable_reason(exc: OSError, expected: str = "a file") -> str:
    """Why an input cannot be read, in the words every input error uses (the caller names the file): the one
    wording for a missing file, a directory, a FIFO or device (`read_regular`), a permission or another failure."""
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return f"is a directory, expected {expected}"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, NotRegularFile):
        return str(exc.strerror)
    return f"cannot read: {exc.strerror or exc}"


def read_input(
    path: Path, error: Callable[[str], Exception], expected: str = "a file", missing: str = "no such file"
) -> bytes:
    """The bytes of the input file `path` (`read_regular`: a FIFO or /dev/zero is refused, never read), or
    `error("PATH: reason")`; `missing` replaces the reason for a missing file (a hint of how to make one)."""
    try:
        return read_regular(path)
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except OSError as exc:
        raise error(f"{path}: {unreadable_reason(exc, expected)}") from None


def read_input_text(path: Path, error: Callable[[str], Exception], expected: str = "a file") -> str:
    """`read_input` decoded as UTF-8 (a BOM is dropped), or `error` naming the first byte that is not."""
    data = read_input(path, error, expected)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None


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


# -- files the tool writes for itself, under a trusted root ------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _refuse_link_or_special(exc: OSError, dir_fd: int, name: str, display: Path, expected: str) -> None:
    """Turn ELOOP/ENOTDIR from an O_NOFOLLOW open into a NotRegularFile naming what is there instead."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO):
        return
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return
    raise NotRegularFile(display, describe_mode(mode), expected) from None


def open_dir_under(directory: Path, root: Path | None = None, *, create: bool = True) -> int:
    """A descriptor of `directory`, reached from `root` one name at a time without following a link.

    `root` is trusted as it is (the project directory, HOME, a directory the user named); when it is None or not
    an ancestor of `directory`, `directory` itself is the root. Missing directories below the root are created
    when `create`; a symlink or a file on the way raises NotRegularFile naming it.
    """
    directory = Path(os.path.abspath(directory))
    base = Path(os.path.abspath(root)) if root is not None else directory
    try:
        parts = directory.relative_to(base).parts
    except ValueError:
        base, parts = directory, ()
    if create and not parts:
        base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, _DIR_FLAGS)
    here = base
    try:
        for part in parts:
            here = here / part
            child = _open_child_dir(fd, part, here, create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child_dir(fd: int, name: str, display: Path, create: bool) -> int:
    """The directory `name` inside `fd` without following a link; created first when missing and `create`."""
    for attempt in range(2):
        try:
            return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
        except FileNotFoundError:
            if not create or attempt:
                raise
            try:
                os.mkdir(name, 0o777, dir_fd=fd)
            except FileExistsError:
                pass  # made by someone else meanwhile (or a dangling link): opened, or refused, just below
        except OSError as exc:
            _refuse_link_or_special(exc, fd, name, display, "a directory")
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _existing_mode(dir_fd: int, name: str, display: Path) -> int | None:
    """The permission bits of the regular file `name`, None when there is none; anything else is refused."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(display, describe_mode(st.st_mode))
    return stat.S_IMODE(st.st_mode)


def write_file_safely(path: Path, payload: bytes, *, root: Path | None = None, new_mode: int = 0o666) -> None:
    """Replace `path` with `payload` atomically, never through a link (see the module doc).

    A new file gets `new_mode` less the umask; an existing one keeps its mode. Raises NotRegularFile for a
    symlink, FIFO, device or directory at `path` or on the way from `root`, other OSError as they come.
    """
    path = Path(os.path.abspath(path))
    dir_fd = open_dir_under(path.parent, root)
    try:
        mode = _existing_mode(dir_fd, path.name, path)
        temp = f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, new_mode, dir_fd=dir_fd
        )
        try:
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
    finally:
        os.close(dir_fd)


def read_file_safely(path: Path, *, root: Path | None = None) -> bytes | None:
    """The bytes of the regular file `path` (None when it does not exist), reached without following a link and
    without blocking on a FIFO; a link, FIFO, device or directory raises NotRegularFile."""
    path = Path(os.path.abspath(path))
    try:
        dir_fd = open_dir_under(path.parent, root, create=False)
    except FileNotFoundError:
        return None
    try:
        fd = open_store_file(dir_fd, path.name, os.O_RDONLY, path)
    except FileNotFoundError:
        return None
    finally:
        os.close(dir_fd)
    return _read_and_close(fd)


def open_append_safely(path: Path, *, root: Path | None = None) -> int:
    """A blocking O_APPEND descriptor of the regular file `path` (created 0644 less the umask when missing),
    reached without following a link; a link, FIFO, device or directory raises NotRegularFile."""
    path = Path(os.path.abspath(path))
    dir_fd = open_dir_under(path.parent, root)
    try:
        return open_store_file(dir_fd, path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT, path)
    finally:
        os.close(dir_fd)
