"""exporter.web.deadlines: each phase's deadline cuts, oldest first, on one timer; at the cap the
most overdue is the victim, a whole head is never one, and an idle one only last."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from exporter.web.deadlines import ANSWER, HEAD, IDLE, WRITE, Deadlines


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Timers:
    """The loop's call_later on `clock`, kept to be run by hand."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.armed: list[tuple[float, Callable[[], None], Handle]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        handle = Handle()
        self.armed.append((self.clock.now + delay, callback, handle))
        return handle

    def fire(self) -> float:
        """Run the one timer still armed, the clock moved on to when it is due (if it is not
        past it already); when that is."""
        live = [(at, c) for at, c, h in self.armed if not h.cancelled]
        assert len(live) == 1, live
        self.armed = []
        at, callback = live[0]
        self.clock.now = max(self.clock.now, at)
        callback()
        return at


class Handle:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Conn:
    def __init__(self, deadlines: Deadlines, *, whole: bool = False, more: bool = False) -> None:
        self.deadlines = deadlines
        self.phase, self.since = ANSWER, 0.0
        self.whole, self.more, self.gone = whole, more, False

    @property
    def cuttable(self) -> bool:
        return not self.gone

    def cut(self) -> None:
        self.gone = True
        self.deadlines.forget(self)

    def sent_more(self) -> bool:
        return self.more


def deadlines(clock: Clock, timers: Timers) -> Deadlines:
    d = Deadlines(clock, head_seconds=5, write_seconds=10, idle_seconds=30)
    d.loop = cast(asyncio.AbstractEventLoop, cast(Any, timers))
    return d


def test_deadlines_by_phase() -> None:
    d = Deadlines(Clock(), head_seconds=1, write_seconds=2, idle_seconds=3)
    assert [d.deadline(p) for p in (HEAD, IDLE, WRITE, ANSWER)] == [1, 3, 2, float("inf")]


def test_late_connections_are_cut_oldest_first_on_one_timer() -> None:
    clock = Clock()
    timers = Timers(clock)
    d = deadlines(clock, timers)
    a, b, idle = Conn(d), Conn(d), Conn(d)
    d.enter(a, HEAD)  # due at 105
    clock.now += 2
    d.enter(b, HEAD)  # due at 107
    d.enter(idle, IDLE)  # due at 132
    assert timers.fire() == 105
    assert a.gone and not b.gone
    assert timers.fire() == 107
    assert b.gone and not idle.gone and b.phase == ANSWER
    assert timers.fire() == 132
    assert idle.gone


def test_a_connection_being_answered_is_never_cut() -> None:
    clock = Clock()
    timers = Timers(clock)
    d = deadlines(clock, timers)
    conn = Conn(d)
    d.enter(conn, HEAD)
    d.enter(conn, ANSWER)
    clock.now += 1000
    timers.fire()  # (the one armed for its head: nothing to cut)
    assert not conn.gone and timers.armed == []
    assert d.victim() is None


def test_the_cap_cuts_the_largest_share_of_a_deadline_then_the_longest_idle() -> None:
    clock = Clock()
    timers = Timers(clock)
    d = deadlines(clock, timers)
    whole = Conn(d, whole=True)
    d.enter(whole, HEAD)  # never a victim while its head is being answered
    assert d.victim() is None
    idle_busy, idle = Conn(d, more=True), Conn(d)
    d.enter(idle_busy, IDLE)  # its next request is in: passed over
    d.enter(idle, IDLE)
    assert d.victim() is idle
    head, write = Conn(d), Conn(d)
    d.enter(head, HEAD)
    d.enter(write, WRITE)
    clock.now += 3  # head: 3 of 5 s, write: 3 of 10 s
    assert d.victim() is head
    d.enter(head, ANSWER)
    assert d.victim() is write


def test_closed_arms_no_timer() -> None:
    clock = Clock()
    timers = Timers(clock)
    d = deadlines(clock, timers)
    d.close()
    d.enter(Conn(d), HEAD)
    assert timers.armed == []


def test_one_late_sweep_cuts_every_connection_past_its_deadline() -> None:
    clock = Clock()
    timers = Timers(clock)
    d = deadlines(clock, timers)
    late = [Conn(d) for _ in range(3)]
    for conn in late:
        d.enter(conn, HEAD)  # due at 105
    clock.now += 4
    kept = Conn(d)
    d.enter(kept, HEAD)  # due at 109
    clock.now = 106  # (the loop ran late)
    timers.fire()
    assert all(conn.gone for conn in late) and not kept.gone
    assert timers.fire() == 109 and kept.gone
