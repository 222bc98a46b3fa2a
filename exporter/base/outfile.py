"""Output files written safely: a regular file replaced whole, a device or FIFO written in place.

`opened(path)` is where `report --output` and the backfill write. What is at the path decides:
- nothing, or a regular file: a new temporary file beside it (an unpredictable name, created
  with O_EXCL|O_NOFOLLOW, so nothing planted there is followed or truncated) is written,
  fsynced and renamed over the path, so a reader sees the old file or the new one, whole;
- a character device or a FIFO (/dev/null, a terminal, a pipe someone reads): written in place,
  opened without O_CREAT or O_TRUNC and checked after opening, never replaced; a FIFO nobody
  reads is refused at once, not waited on;
- a symbolic link: written through only when the link is root's or this user's (as /dev/stdout
  is) and leads to a character device or a FIFO; any other link is refused, never replaced;
- a directory, a block device, a socket: refused.
Every refusal is an `OutputError` (an OSError), `PATH: why` on one line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

NEW_FILE_MODE = 0o666  # (less the umask, as a shell's `>` makes a file)
TEMP_TRIES = 16  # fresh random names before giving up (each one taken: someone plants them)
NAME_KEPT = 64  # characters of the path's name in its temporary file's (NAME_MAX is 255)
TOKEN_BYTES = 8


class OutputError(OSError):
    """An output path that is not written: `PATH: why`, on one line."""

    def __init__(self, path: Path, why: str, code: int | None = errno.EINVAL) -> None:
        super().__init__(code or errno.EINVAL, why)
        self.shown = shown(path)

    def __str__(self) -> str:
        return f"{self.shown}: {self.strerror}"


def shown(path: Path | str) -> str:
    """A path for a message: its unprintable characters escaped, so it stays on one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))


def create_temp(directory: Path, name: str, mode: int = NEW_FILE_MODE) -> tuple[int, Path]:
    """A new file `.NAME.RANDOM.tmp` in `directory`, open for writing: created with O_EXCL and
    O_NOFOLLOW, so a file or link planted under any name is never opened. OSError as open()
    raises it (the directory missing, read-only)."""
    for _ in range(TEMP_TRIES):
        temp = directory / f".{name[:NAME_KEPT]}.{secrets.token_hex(TOKEN_BYTES)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(temp, flags, mode), temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name in {shown(directory)}")


def fsync_directory(directory: Path) -> None:
    """A rename in `directory` made durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def opened(path: Path) -> Iterator[TextIO]:
    """A text file (UTF-8) that writes `path` as the module docstring says; the new file takes
    the path only when the block ends without an exception. OutputError when `path` cannot be
    written; nothing is left behind then."""
    st = _lstat(path)
    if st is None or stat.S_ISREG(st.st_mode):
        with _replacing(path) as f:
            yield f
        return
    with os.fdopen(_in_place(path, st), "w", encoding="utf-8") as f:
        yield f


def write_text(path: Path, text: str) -> None:
    """`text` at `path`, as `opened` writes it."""
    with opened(path) as f:
        f.write(text)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        if not path.parent.is_dir():
            why = f"No such file or directory (no directory {shown(path.parent)})"
            raise OutputError(path, why, errno.ENOENT) from None
        return None
    except OSError as e:
        raise OutputError(path, e.strerror or type(e).__name__, e.errno) from None


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[TextIO]:
    """A temporary file beside `path`, renamed over it when the block ends well."""
    directory = path.parent
    try:
        fd, temp = create_temp(directory, path.name)
    except OSError as e:
        why = f"cannot make a file in {shown(directory)}: {e.strerror}"
        raise OutputError(path, why, e.errno) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    fsync_directory(directory)


def _in_place(path: Path, st: os.stat_result) -> int:
    """A descriptor that writes to the device or FIFO at `path` (or that a link of root's or
    this user's leads to), blocking as a write to it should; OutputError for anything else."""
    kind = stat.S_IFMT(st.st_mode)
    if kind == stat.S_IFLNK and st.st_uid not in (0, os.geteuid()):
        raise OutputError(
            path,
            f"a symbolic link of another user's (uid {st.st_uid}): refused (give the file it "
            "leads to, or remove the link)",
        )
    if kind not in (stat.S_IFLNK, stat.S_IFCHR, stat.S_IFIFO):
        raise OutputError(path, f"{_what(kind)}: refused")
    follow = 0 if kind == stat.S_IFLNK else os.O_NOFOLLOW
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | follow
    try:
        fd = os.open(path, flags)  # (no O_CREAT, no O_TRUNC: nothing there is made or emptied)
    except OSError as e:
        raise OutputError(path, _open_failure(e, kind), e.errno) from None
    found = stat.S_IFMT(os.fstat(fd).st_mode)
    if found not in (stat.S_IFCHR, stat.S_IFIFO):
        os.close(fd)
        raise OutputError(path, _not_written_through(kind, found))
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def _open_failure(e: OSError, kind: int) -> str:
    if e.errno == errno.ENXIO:  # (O_NONBLOCK: a FIFO without a reader, a socket)
        return "no reader (a FIFO nobody reads, or a socket): refused"
    if e.errno == errno.ELOOP:
        loop = kind == stat.S_IFLNK
        return "a loop of symbolic links" if loop else "became a symbolic link: refused"
    if e.errno == errno.ENOENT and kind == stat.S_IFLNK:
        return "a symbolic link that leads nowhere: refused (remove the link)"
    return f"cannot be opened: {e.strerror or type(e).__name__}"


def _not_written_through(kind: int, found: int) -> str:
    if kind == stat.S_IFLNK:
        return (
            f"a symbolic link to {_what(found)}: refused (only a link to a device or a FIFO, "
            "as /dev/stdout, is written through; give the file itself, or no --output for "
            "standard output)"
        )
    return f"changed to {_what(found)} while being opened: refused"


def _what(kind: int) -> str:
    return {
        stat.S_IFREG: "a regular file",
        stat.S_IFDIR: "a directory",
        stat.S_IFBLK: "a block device",
        stat.S_IFSOCK: "a socket",
        stat.S_IFLNK: "a symbolic link",
        stat.S_IFCHR: "a character device",
        stat.S_IFIFO: "a FIFO",
    }.get(kind, "not a file")


def room(path: Path | None) -> int | None:
    """The bytes free on the file system where `path` (a file to replace, or a directory to
    fill) would be written; None when it is written in place (a device, a FIFO) or unknown."""
    if path is None:
        return None
    try:
        st: os.stat_result | None = os.stat(path)
    except OSError:
        st = None
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return None
    where = path if st is not None and stat.S_ISDIR(st.st_mode) else path.parent
    try:
        while not where.is_dir() and where != where.parent:  # (a directory to be made)
            where = where.parent
        return shutil.disk_usage(where).free
    except OSError:
        return None
