"""SIGHUP's config reads: each in a thread of its own with a deadline, a valid one handed on.

A config on a hung file system holds no reading up: it is read beside the loop, and abandoned
after `deadline_s` (the config in force stays; the next SIGHUP reads it again once that read
has ended, so a hung file system never gathers threads). A config that does not validate is
refused with its problems logged. systemd hears RELOADING=1 when a reload is asked for and
READY=1 when it is done, taken up or refused.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import suppress

from exporter.base import logs
from exporter.config.errors import ConfigError
from exporter.config.schema import Config
from exporter.daemon.logger import log
from exporter.daemon.notify import Notifier

RELOAD_DEADLINE_S = 30.0  # a config read (SIGHUP) not done by then is abandoned


class Reloads:
    """Reads the config anew when asked (`request`, then `start` from the loop); `read`: the
    config read (raises when it is bad), None for a daemon without a config file."""

    def __init__(
        self,
        read: Callable[[], Config] | None,
        notifier: Notifier,
        status: Callable[[], str],
        deadline_s: float = RELOAD_DEADLINE_S,
        free: asyncio.Event | None = None,
    ) -> None:
        self.read = read
        # set when the daemon's state may change (clear while a checkpoint's state is taken)
        self.free = free
        self.notifier = notifier
        self.status = status
        self.deadline_s = deadline_s
        self.wanted = False  # a reload asked for and not begun yet
        self._reloading: asyncio.Task[None] | None = None  # a config read and its take-up
        self._reader: threading.Thread | None = None  # the config read's thread

    def request(self) -> None:
        """Re-read the config at the ingest loop's next turn (SIGHUP); while a read is pending,
        once it has ended."""
        if self._reader is not None and self._reader.is_alive():
            log.warning(
                "reload: the config read begun before has not ended yet: the config is read "
                "again once it has"
            )
        self.notifier.reloading()
        self.wanted = True

    def due(self) -> bool:
        """A reload is wanted and none is pending: a config read (or its take-up) has not ended,
        an abandoned one counting until its thread ends."""
        if not self.wanted:
            return False
        if self._reloading is not None and not self._reloading.done():
            return False
        return self._reader is None or not self._reader.is_alive()

    def start(self, tg: asyncio.TaskGroup, take: Callable[[Config], None]) -> None:
        """Begin the reload wanted: the config read, then `take(config)` when it is valid."""
        self.wanted = False
        self._reloading = tg.create_task(self._reload(take), name="reload")

    async def _reload(self, take: Callable[[Config], None]) -> None:
        try:
            if self.read is None:
                log.warning("reload: this daemon has no config file to re-read")
                return
            try:
                new = await asyncio.wait_for(self._read_config(self.read), self.deadline_s)
            except TimeoutError:
                log.error(
                    "reload abandoned, the config in force stays: reading the config has not "
                    "ended in %.0f s (a hung file system, a FIFO?); a SIGHUP reads it again "
                    "once that read has ended",
                    self.deadline_s,
                )
                return
            except Exception as e:  # (ConfigError lists every problem)
                lines = logs.LINES if isinstance(e, ConfigError) else None
                log.error("reload refused, the config in force stays: %s", e, extra=lines)
                return
            if self.free is not None:
                await self.free.wait()
            take(new)
        finally:  # (READY=1 even while a node it added has not started: it is running)
            self.notifier.reloaded(self.status())
            self.notifier.status(self.status())

    def _read_config(self, read: Callable[[], Config]) -> asyncio.Future[Config]:
        """`read()` in a thread of its own (a daemon thread: one that hangs never holds the
        process's end up), its outcome as a future of the loop (dropped once abandoned)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Config] = loop.create_future()

        def settle(new: Config | None, error: Exception | None) -> None:
            if future.done():  # (abandoned)
                return
            if error is not None:
                future.set_exception(error)
            else:
                assert new is not None
                future.set_result(new)

        def run() -> None:
            new, error = None, None
            try:
                new = read()
            except Exception as e:  # (ConfigError lists every problem)
                error = e
            with suppress(RuntimeError):  # (the loop closed meanwhile)
                loop.call_soon_threadsafe(settle, new, error)

        self._reader = threading.Thread(target=run, name="config reload", daemon=True)
        self._reader.start()
        return future
