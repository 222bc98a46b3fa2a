"""The threads every file source shares: a bounded pool, each source's blocking calls in order.

A file source's reads block (a dump on a slow or hung file system), so they run off the event
loop. A thread of its own for each source made 1,000 threads for 1,000 file nodes. Here the
sources share a pool: it starts a thread only when every one it has is busy, up to MAX_THREADS,
and a thread idle for IDLE_SECONDS ends (down to none). A source's calls run one after the
other, in the order they came (`Serial`), never two at once. A call stuck in the kernel holds
one thread and its own source, not the others (until MAX_THREADS calls are stuck at once).
The threads are daemon threads, which neither `asyncio.run` nor the interpreter's exit waits
for: a stuck call never holds up the process's shutdown.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
MAX_THREADS = 32
IDLE_SECONDS = 30.0

_Call = tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]


class Pool:
    """Daemon threads that take runnable sources (`Serial`s) from one queue."""

    def __init__(self, max_threads: int = MAX_THREADS, idle_seconds: float = IDLE_SECONDS) -> None:
        self.max_threads = max_threads
        self.idle_seconds = idle_seconds
        self._ready: collections.deque[Serial] = collections.deque()
        self._cond = threading.Condition()
        self.threads = 0  # running now
        self._idle = 0  # of those, waiting for work
        self.most = 0  # the most that ran at once

    def serial(self, name: str) -> Serial:
        """A source's queue of calls, run in order on this pool's threads."""
        return Serial(self, name)

    def _schedule(self, serial: Serial) -> None:
        with self._cond:
            self._ready.append(serial)
            if len(self._ready) > self._idle and self.threads < self.max_threads:
                self.threads += 1
                self.most = max(self.most, self.threads)
                threading.Thread(target=self._serve, name="file sources", daemon=True).start()
            else:
                self._cond.notify()

    def _serve(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
                while not self._ready:
                    if not self._cond.wait(self.idle_seconds) and not self._ready:
                        self._idle -= 1
                        self.threads -= 1
                        return
                self._idle -= 1
                serial = self._ready.popleft()
            serial._run_one()


class Serial:
    """One source's calls, run in the order they came, one at a time, on the pool's threads."""

    def __init__(self, pool: Pool, name: str) -> None:
        self.pool, self.name = pool, name
        self._calls: collections.deque[_Call] = collections.deque()
        self._lock = threading.Lock()
        self._scheduled = False  # a call of it is queued in the pool or running

    def _put(self, call: _Call) -> None:
        with self._lock:
            self._calls.append(call)
            if self._scheduled:
                return
            self._scheduled = True
        self.pool._schedule(self)

    def _run_one(self) -> None:
        """Run the next call, then hand the source back to the pool if it has more."""
        with self._lock:
            fn, future, loop = self._calls.popleft()
        try:
            result, error = fn(), None
        except BaseException as e:  # handed to the awaiting task, whatever it is
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # (a closed loop: nobody waits any more)
            loop.call_soon_threadsafe(_settle, future, result, error)
        with self._lock:
            more = bool(self._calls)
            self._scheduled = more
        if more:
            self.pool._schedule(self)

    async def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` after the calls before it; its result (or what it raised)."""
        return await self.submit(fn)

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Queue `fn` after the calls before it, now; the future of its result. (Whoever drops
        the future cancels it: its result, or what it raised, is then thrown away.)"""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._put((fn, future, loop))
        return future

    async def finish(self, last: Callable[[], None], timeout: float) -> bool:
        """Run `last` after the call in progress, if any; wait at most `timeout` seconds for it
        (False when it was not done by then: it runs when the call in progress returns)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._put((last, future, loop))
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return False
        return True


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # its awaiting task was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


FILES = Pool()  # the file sources' pool
