"""The daemon in-process: a Daemon on its own event loop in a thread, for tests that need its
state as well as what it serves (the daemon as a process is `daemon_process`)."""

from __future__ import annotations

import asyncio
import threading

from exporter.daemon.daemon import Daemon

from support.scrape import http_get
from support.tools import wait_for


class DaemonThread:
    """A Daemon on its own event loop in a thread, stopped by cancelling its task."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.error: BaseException | None = None

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        try:
            await self.daemon.run()
        except asyncio.CancelledError:
            pass
        except BaseException as e:
            self.error = e

    def __enter__(self) -> DaemonThread:
        self._thread.start()
        wait_for(lambda: self.daemon.address, 10, "the daemon to bind")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._task is not None
        self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(10)
        assert not self._thread.is_alive(), "the daemon did not stop on cancellation"
        assert self.error is None, self.error

    @property
    def url(self) -> str:
        assert self.daemon.address is not None
        return f"http://127.0.0.1:{self.daemon.address[1]}"

    def metrics(self) -> str:
        status, body, _ = http_get(self.url + "/metrics")
        assert status == 200
        return body.decode()
