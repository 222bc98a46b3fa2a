"""SIGHUP before the daemon's loop takes it: caught from the process's first moment, recorded.

`catch` is the first thing the command does (`exporter.entry`, before the heavy imports): from
then on a SIGHUP (systemd's `reload`, logrotate) no longer kills the process while it starts;
the daemon takes up what arrived (`take`) once its own handler is in place.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType

_arrived: list[float] = []  # when (monotonic) each early SIGHUP came


def _record(signum: int, frame: FrameType | None) -> None:
    _arrived.append(time.monotonic())


def catch() -> None:
    """Record SIGHUP from now on, until the daemon installs its own handler."""
    signal.signal(signal.SIGHUP, _record)


def take() -> int:
    """How many SIGHUPs arrived since `catch` and were not taken yet (then none are left)."""
    count = len(_arrived)
    _arrived.clear()
    return count


def ignore() -> None:
    """Ignore SIGHUP (once the daemon's handler is gone: the process is ending); signals are
    the main thread's, elsewhere nothing is done."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


def release() -> None:
    """SIGHUP's default action again (for a command that is no daemon: a hang-up ends it), with
    any SIGHUP caught meanwhile delivered now."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if take():
        os.kill(os.getpid(), signal.SIGHUP)
