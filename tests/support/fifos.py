"""FIFOs for the file source's tests: a writer that holds one open, and one that unblocks a reader."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def fifo_writer(path: Path) -> int | None:
    """A blocking write end of the FIFO at `path`, or None while no reader has it open (a
    writer's open without O_NONBLOCK would wait for one)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            return None
        raise
    os.set_blocking(fd, True)
    return fd


def unblock(path: Path) -> None:
    """Release a reader stuck opening the FIFO (what the source did before it used O_NONBLOCK),
    so a failing test fails instead of hanging: open the write end once and close it."""
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)  # (O_RDWR never blocks on a FIFO)
    os.close(fd)
