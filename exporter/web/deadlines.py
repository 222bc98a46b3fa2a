"""Open connections by phase, each cut once its phase's deadline has passed.

A connection waits for a request head (HEAD), idles between requests (IDLE), is stalled on its
answer (WRITE: the client does not take it) or is being answered (ANSWER: no deadline, never
cut). A request head has `head_seconds` to arrive, an answer `write_seconds` to be taken (after
a `Connection: close` too), a kept-alive connection `idle_seconds` between requests. Each
phase keeps its connections in the order they entered it, so one timer, at the earliest
deadline, cuts every late one; and at the connection cap, `victim` names whom a newcomer cuts.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Protocol

HEAD_S, WRITE_S, IDLE_S = 5.0, 10.0, 30.0


# A connection's phase (plain ints: they index the phases' tables on every request).
HEAD = 0  # waiting for a request head
IDLE = 1  # between requests
WRITE = 2  # stalled on its answer (the client does not take it)
ANSWER = 3  # being answered: no deadline, never cut
Phase = int
TIMED = (HEAD, IDLE, WRITE)


class Timed(Protocol):
    """What the deadlines ask of a connection."""

    phase: Phase
    since: float  # when it entered its phase (of the deadlines' clock)
    whole: bool  # its whole first head came with it: not cut before it is answered

    @property
    def cuttable(self) -> bool: ...

    def cut(self) -> None:
        """Closed at once (which makes it `forget`-ten)."""

    def sent_more(self) -> bool:
        """Has the client sent more than it was answered (its next request is on its way)?"""


class Deadlines:
    """The connections in each timed phase, by when they entered it (oldest first), and the
    timer that cuts the late ones."""

    def __init__(
        self,
        clock: Callable[[], float],
        head_seconds: float = HEAD_S,
        write_seconds: float = WRITE_S,
        idle_seconds: float = IDLE_S,
    ) -> None:
        self.clock = clock
        self.head_seconds, self.write_seconds = head_seconds, write_seconds
        self.idle_seconds = idle_seconds
        self.loop: asyncio.AbstractEventLoop | None = None  # (the server's, once started)
        self.closed = False  # no timer is armed any more
        self._waiting: tuple[dict[Timed, None], ...] = tuple({} for _ in TIMED)  # by phase
        self._sweep: asyncio.TimerHandle | None = None  # at the earliest deadline
        self._sweep_at = math.inf

    def deadline(self, phase: Phase) -> float:
        """Seconds a connection may stay in `phase`."""
        if phase == HEAD:
            return self.head_seconds
        if phase == IDLE:
            return self.idle_seconds
        return self.write_seconds if phase == WRITE else math.inf

    def enter(self, conn: Timed, phase: Phase) -> None:
        """`conn` enters `phase` now (and its deadline starts)."""
        if conn.phase != ANSWER:
            self._waiting[conn.phase].pop(conn, None)
        conn.phase, conn.since = phase, self.clock()
        if phase != ANSWER:
            waiting = self._waiting[phase]
            waiting[conn] = None
            if len(waiting) == 1:
                self._arm(conn.since + self.deadline(phase))

    def forget(self, conn: Timed) -> None:
        """`conn` is cut or gone: no phase, no deadline."""
        if conn.phase != ANSWER:
            self._waiting[conn.phase].pop(conn, None)
            conn.phase = ANSWER

    def victim(self) -> Timed | None:
        """At the cap, whom a newcomer whose whole request head is in may cut: of those waiting
        for a head or stalled on an answer, the one that has used the largest share of its
        deadline (never one whose whole head came with it), else the one idle the longest (a
        client that took its answers) but one whose next request is in already."""
        now = self.clock()
        victim, most = None, -1.0
        for phase in (HEAD, WRITE):
            for conn in self._waiting[phase]:  # the oldest that may be cut
                if conn.cuttable and not (phase == HEAD and conn.whole):
                    share = (now - conn.since) / self.deadline(phase)
                    if share > most:
                        victim, most = conn, share
                    break
        if victim is None:
            victim = next((c for c in self._waiting[IDLE] if not c.sent_more()), None)
        return victim

    def close(self) -> None:
        """No timer from now on (the server is closing: it cuts every connection itself)."""
        self.closed = True
        if self._sweep is not None:
            self._sweep.cancel()

    def _arm(self, at: float) -> None:
        if at < self._sweep_at and not self.closed:
            assert self.loop is not None, "the server is not started"
            if self._sweep is not None:
                self._sweep.cancel()
            self._sweep_at = at
            self._sweep = self.loop.call_later(max(0.0, at - self.clock()), self._cut_late)

    def _cut_late(self) -> None:
        """Cut every connection past its phase's deadline; then wait for the next one."""
        self._sweep, self._sweep_at = None, math.inf
        now, nearest = self.clock(), math.inf
        for phase, waiting in enumerate(self._waiting):
            limit = self.deadline(phase)
            while waiting:
                conn = next(iter(waiting))
                if now - conn.since < limit:
                    nearest = min(nearest, conn.since + limit)
                    break
                conn.cut()  # (which takes it out of `waiting`)
        if math.isfinite(nearest):
            self._arm(nearest)
