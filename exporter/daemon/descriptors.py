"""The file descriptors the sources may hold: what the limit leaves after the listener's share.

The process's soft RLIMIT_NOFILE (raised to the hard one at start, as far as it may be) is
shared. The listener keeps `http_max_connections` of it, and FD_RESERVE more stay for the
checkpoint, worker threads, logs and the connections over the cap for a moment. What is left,
less what was open before any source ran, is the sources' budget: a source takes its kind's
share (`sources.registry.descriptors`) before it starts and gives it back when it ends. A node
whose source finds the budget spent is down, and says why, until a share is free; the
listener and the checkpoint always have theirs.
"""

from __future__ import annotations

import os
import threading

from exporter.web.server import FD_RESERVE, fd_budget


def open_now() -> int:
    """The descriptors this process has open (0 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


class Budget:
    """The sources' share of the descriptors: `take` before a source runs, `give` after."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # what the sources may hold at once
        self.held = 0
        self._lock = threading.Lock()

    @classmethod
    def of_process(cls, http_max_connections: int) -> Budget:
        """The budget this process's limit leaves (see the module docstring)."""
        return cls(max(0, fd_budget(FD_RESERVE + http_max_connections) - open_now()))

    def take(self, n: int) -> bool:
        """Hold `n` descriptors, if the budget has them."""
        with self._lock:
            if self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.held = max(0, self.held - n)

    def why_not(self, n: int) -> str:
        """Why a source of `n` descriptors cannot start now, in words for its node's error."""
        return (
            f"too few file descriptors: this source needs {n} and the sources already hold "
            f"{self.held} of the {self.limit} that the limit (RLIMIT_NOFILE) leaves after the "
            f"listener's connections and a reserve; raise LimitNOFILE= in the unit "
            f"(systemctl edit sm-llm-exporter) or follow fewer nodes here"
        )
