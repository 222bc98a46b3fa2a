"""Small files a config names read safely: a regular file only, never waited on, bounded."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_SECRET_FILE = 1 << 20  # a key, a known_hosts, a password: anything bigger is none
_READ_CHUNK = 1 << 16
# what a path that is no regular file is, by its st_mode's file type
_FILE_TYPES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symlink",
}


def file_kind(mode: int) -> str:
    """What a file of st_mode `mode` is, in words ("a FIFO", "a regular file")."""
    return "a regular file" if stat.S_ISREG(mode) else _FILE_TYPES.get(stat.S_IFMT(mode), "?")


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket or a directory: nothing to read a file from."""


def read_regular(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of the regular file at `path`. Opened without blocking and as no
    controlling terminal, then fstat()ed: a FIFO, a device or a directory there is refused
    (NotRegular, an OSError) before a byte is read, never waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise NotRegular(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(mode):
            raise NotRegular(errno.EINVAL, f"not a regular file ({file_kind(mode)})")
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def why_not(e: OSError) -> str:
    """Why a file cannot be read, in words (its strerror: never the path again)."""
    return e.strerror or str(e) or type(e).__name__


def read_small_file(path: Path) -> bytes:
    """A key, known_hosts or secret file's bytes: a regular file only (opened without
    blocking: a FIFO there is refused, not waited on), at most MAX_SECRET_FILE."""
    return read_regular(path, MAX_SECRET_FILE)
