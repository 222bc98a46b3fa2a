"""sd_notify for a Type=notify service: READY=1, STATUS=, WATCHDOG=1, RELOADING=1, STOPPING=1.

Silent when systemd did not ask (no NOTIFY_SOCKET). The watchdog is fed at most twice per
WATCHDOG_USEC, from the ingest loop's own turns: a heartbeat of the loop, not of entries read.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from types import ModuleType

log = logging.getLogger(__name__)


def _sd_daemon() -> ModuleType | None:
    """systemd-python's `daemon`, imported only when systemd asked for notifications (1.4 ms of
    every start otherwise); None without it (the `journal` extra: the demo runs without it)."""
    try:
        from systemd import daemon
    except ImportError:
        return None
    module: ModuleType = daemon
    return module


class Notifier:
    def __init__(
        self, env: Mapping[str, str] = os.environ, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.enabled = bool(env.get("NOTIFY_SOCKET"))
        self.clock = clock
        watchdog_usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_every = int(watchdog_usec) / 2e6 if watchdog_usec.isdigit() else None
        self._last_watchdog = float("-inf")
        self._ready = False
        self._reloading = False  # RELOADING=1 sent, its READY=1 not yet
        self._sd = _sd_daemon() if self.enabled else None
        if self.enabled and self._sd is None:
            log.warning(
                "systemd asked for notifications (NOTIFY_SOCKET) but systemd-python is "
                "not installed: pip install 'sm-llm-exporter[journal]'"
            )
            self.enabled = False

    def _send(self, state: str) -> None:
        if self.enabled and self._sd is not None:
            self._sd.notify(state)

    def ready(self, status: str) -> None:
        if not self._ready:
            self._ready = True
            self._send(f"READY=1\nSTATUS={status}")

    def status(self, status: str) -> None:
        self._send(f"STATUS={status}")

    def heartbeat(self) -> None:
        """One turn of the ingest loop: feed the watchdog when it is due."""
        if self.watchdog_every is None:
            return
        now = self.clock()
        if now - self._last_watchdog >= self.watchdog_every:
            self._last_watchdog = now
            self._send("WATCHDOG=1")

    def reloading(self) -> None:
        """A reload has begun (SIGHUP); `reloaded` when it is done, taken up or refused. Before
        the first READY=1 a reload is part of the start: systemd hears of neither."""
        if not self._ready:
            return
        self._reloading = True
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._send(f"RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading the config")

    def reloaded(self, status: str) -> None:
        """The reload is done: every RELOADING=1 is followed by its READY=1 (systemd holds the
        unit in `reloading`, and queues every later reload, until it comes)."""
        if self._reloading:
            self._reloading = False
            self._send(f"READY=1\nSTATUS={status}")

    def stopping(self) -> None:
        self._send("STOPPING=1\nSTATUS=stopping: writing the last checkpoint")
