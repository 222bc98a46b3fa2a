"""Gathers an SSH follow stream's packets into Batches, handed over by one timer per loop.

A node's journalctl writes each entry as it comes, so a request's lines arrive in several
packets. They collect in the SSH session (a callback each, no task woken) and one timer for all
the streams of the event loop hands each stream's lines over as one Batch, GATHER_S after the
first of them came, or at once when a backlog is streaming in (READ_SIZE bytes). The source's
task (`sshreader.SshSource`) wakes only when the queue is full, or at the end.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from exporter.base.records import Batch
from exporter.sources.sshconnect import STDERR, Channel, DataType, Session

READ_SIZE = 1 << 16  # a read for a report; a follow stream with this much is handed over at once
GATHER_S = 0.25  # a follow stream's output collects this long before it is handed over
GATHER_MAX = 1 << 18  # bytes collected before the channel stops reading (the node then waits)
STDERR_KEPT = 4096  # bytes of the remote journalctl's stderr kept for the error message
# (the stream's next bytes, the newest entry's cursor at its start, caught up already) -> the
# Batch they make, None while no line is whole: the source's conversion
Convert = Callable[[bytes, str, bool], Batch | None]


class Ticks:
    """One timer for all the follow streams of an event loop: every stream that got data since
    the last tick hands it over at the next, GATHER_S after the first of them got some, all in
    one callback. A tick is set only while a stream waits for one. (Nothing here refers to the
    loop, which keys `loop_ticks`'s table weakly: the streams and the timer are not held.)"""

    def __init__(self) -> None:
        self._due: list[weakref.ref[FollowStream]] = []
        self._set = False

    def add(self, follow: FollowStream) -> None:
        self._due.append(weakref.ref(follow))
        if not self._set:
            self._set = True
            asyncio.get_running_loop().call_later(GATHER_S, self._tick)

    def _tick(self) -> None:
        self._set = False
        due, self._due = self._due, []
        for ref in due:
            follow = ref()
            if follow is not None:
                follow.hand_over()


# each event loop's Ticks, dropped with its loop
_ticks_of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Ticks] = weakref.WeakKeyDictionary()


def loop_ticks() -> Ticks:
    """The running loop's Ticks."""
    loop = asyncio.get_running_loop()
    ticks = _ticks_of.get(loop)
    if ticks is None:
        ticks = _ticks_of[loop] = Ticks()
    return ticks


class FollowStream(Session[bytes]):
    """A follow stream: its output collected as its packets arrive (a callback each) and handed
    over as one Batch at the next tick, by the tick itself: no task is woken while the queue
    takes them. Past READ_SIZE bytes (a backlog streaming in) it is handed over at once. When
    the queue is full the batch is held for the source's task to put, and the channel stops
    reading meanwhile (as it does past GATHER_MAX bytes): the node waits."""

    def __init__(
        self,
        convert: Convert,
        out: asyncio.Queue[Batch],
        ticks: Ticks,
        newest: str,
        *,
        caught_up: bool,
    ) -> None:
        self._convert, self._out, self._ticks = convert, out, ticks
        self._newest, self.caught_up = newest, caught_up
        self._chan: Channel[bytes] | None = None
        self._parts: list[bytes] = []
        self._size = 0
        self._started = False  # handing over (once the source's first Batch is out)
        self._due = False  # a hand-over is scheduled
        self._paused = False
        self.stderr = b""
        self.closed = False
        self.error: Exception | None = None  # the connection's, or handing over failed
        self.held: Batch | None = None  # what the full queue did not take
        self.event = asyncio.Event()  # for the task: a batch held, the end, or an error

    # asyncssh's side

    def connection_made(self, chan: Channel[bytes]) -> None:
        self._chan = chan

    def data_received(self, data: bytes, datatype: DataType) -> None:
        if datatype == STDERR:
            self.stderr = (self.stderr + data)[:STDERR_KEPT]
            return
        self._parts.append(data)
        self._size += len(data)
        if self._size >= GATHER_MAX:
            self._pause()
        self._schedule()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.error is None:
            self.error = exc
        self.event.set()

    # the source's side

    def start(self) -> None:
        self._started = True
        self._schedule()

    def stop(self) -> None:
        """Hand over nothing more (the source is done with this stream)."""
        self._started = False

    def taken(self) -> None:
        """The task has put the batch that was held."""
        self.held = None
        if not self.closed and self.error is None:
            self.event.clear()
        self._resume()
        self._schedule()

    def hand_over(self) -> None:
        """What has collected, as one Batch, into the queue (or held, if it is full)."""
        self._due = False
        if not self._started or self.held is not None or self.error is not None:
            return
        if self._size:
            data = b"".join(self._parts)
            self._parts.clear()
            self._size = 0
            try:
                batch = self._convert(data, self._newest, self.caught_up)
            except Exception as e:  # the task raises it
                self.error = e
                self.event.set()
                return
            if batch is not None:
                self.caught_up = batch.caught_up
                try:
                    self._out.put_nowait(batch)
                except asyncio.QueueFull:
                    self.held = batch
                    self._pause()
                    self.event.set()
                    return
        self._resume()

    def _schedule(self) -> None:
        if not self._started or self._due or self.held is not None or not self._size:
            return
        self._due = True
        if self._size >= READ_SIZE:  # a backlog streaming in: no gathering
            asyncio.get_running_loop().call_soon(self.hand_over)
        else:
            self._ticks.add(self)

    def _pause(self) -> None:
        if not self._paused and self._chan is not None:
            self._paused = True
            self._chan.pause_reading()

    def _resume(self) -> None:
        if self._paused and self._chan is not None and self.held is None:
            self._paused = False
            self._chan.resume_reading()  # may deliver what waited, at once
