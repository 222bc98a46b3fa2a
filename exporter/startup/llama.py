"""llama-server start-ups from the parser's marks: each one's phases, and the one in progress.

The parser turns every start-up line into a PHASE event (`logline.MARKS`): systemd's
`Starting`/`Started` for the unit, then the server's `initializing`, `loading model`,
`n_slots = N`, `model loaded` and `listening on`. A `Tracker` (one per node) folds them into
`Startup`s. A start-up begins at systemd's start of the unit, or without one at the first line
of a server PID not seen starting before; it is done at `listening on`, and ends unfinished when
the unit goes down first (a stop, an exit, a failure: systemd's timeout included) or a new PID
starts over. Its phases run from mark to mark, each named by the mark that begins it (PHASES);
a mark the server did not log makes the phase before it longer, and only the first of each
mark counts. Times: the server's marks are placed by their log prefix (the elapsed or
wall-clock stamp, µs apart exactly), anchored where the journal saw them soonest (a journal
stamps a line when it reads it, never before it was written); systemd's at their journal time.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.base.records import (
    MARK_LISTENING,
    MARK_STARTED,
    MARK_STARTING,
    SERVER_MARKS,
    Event,
    EventKind,
)
from exporter.base.times import MAX_TIME_US, MIN_TIME_US, SECOND
from exporter.startup.phases import Phase, Timeline

UNIT_PHASE = "unit"  # systemd's start of the unit to the server's first line
# the phase each of the server's marks begins (its last, listening, ends the start-up)
PHASES = {
    "initializing": "initializing",
    "loading": "load_model",
    "slots": "init_slots",
    "loaded": "start_http",
}
# how a start-up ended: done, or before listening; or that it had not ended yet
DONE, STOPPED, REPLACED, RUNNING = "listening", "stopped", "replaced", "starting"
SERVER_ROLE, UNIT_ROLE = "server", "systemd"  # (the table's role column: 7 wide)


@dataclass(frozen=True, slots=True)
class Startup:
    """One start-up of a node's llama-server, as its lines told it."""

    node: str
    pid: int  # the server's (0: it logged no line)
    start_us: int  # systemd's start of the unit, else the server's first line
    marks: tuple[tuple[str, int], ...]  # (mark, time): systemd's first when there, in order
    end: str  # DONE, or why it ended before listening: STOPPED, REPLACED
    end_us: int  # when it was listening, or when it ended

    @property
    def done(self) -> bool:
        return self.end == DONE

    @property
    def seconds(self) -> float:
        return (self.end_us - self.start_us) / SECOND

    def phases(self) -> list[tuple[str, int, int]]:
        """(phase, start, end) from mark to mark; an unfinished start-up's last phase runs to
        its end."""
        out: list[tuple[str, int, int]] = []
        server = [(m, t) for m, t in self.marks if m in SERVER_MARKS]
        if len(server) < len(self.marks):  # (systemd started it)
            out.append((UNIT_PHASE, self.start_us, server[0][1] if server else self.end_us))
        for i, (mark, t) in enumerate(server):
            if mark == MARK_LISTENING:
                break
            end = server[i + 1][1] if i + 1 < len(server) else self.end_us
            out.append((PHASES[mark], t, end))
        return out

    def timeline(self) -> Timeline:
        """The start-up as an init timeline (the seed's table and timeouts): systemd's phase
        of no stage, the server's of stage 0, as the single stage it is."""
        phases = [
            Phase(
                name,
                start / SECOND,
                end / SECOND,
                None if name == UNIT_PHASE else 0,
                0,
                1 if name == UNIT_PHASE else self.pid,
                UNIT_ROLE if name == UNIT_PHASE else SERVER_ROLE,
            )
            for name, start, end in self.phases()
        ]
        return Timeline.of(self.start_us / SECOND, self.end_us / SECOND, phases)

    def state(self) -> list[Any]:
        return [self.pid, self.start_us, [list(m) for m in self.marks], self.end, self.end_us]

    @classmethod
    def from_state(cls, node: str, saved: list[Any]) -> Startup:
        pid, start_us, marks, end, end_us = saved
        if end not in (DONE, STOPPED, REPLACED, RUNNING):
            raise ValueError(f"a start-up that ended {str(end)[:20]!r}")
        return cls(
            node,
            _int(pid),
            _time(start_us),
            tuple((_mark(m), _time(t)) for m, t in marks),
            end,
            _time(end_us),
        )


@dataclass(slots=True)
class _Open:
    """A start-up in progress: its marks as they came, (mark, journal time, the line's clock)."""

    start_us: int
    pid: int = 0
    marks: list[tuple[str, int, int | None]] = field(default_factory=list)

    def has(self, mark: str) -> bool:
        return any(m == mark for m, _, _ in self.marks)

    def placed(self, node: str, end: str, end_us: int | None = None) -> Startup:
        """The start-up it was, its marks placed (see the module docstring)."""
        clocked = [t - clock for _, t, clock in self.marks if clock is not None]
        anchor = min(clocked) if clocked else None
        marks: list[tuple[str, int]] = []
        low = self.start_us
        for mark, t, clock in self.marks:
            at = t if clock is None or anchor is None else anchor + clock
            at = max(min(at, t), low)
            marks.append((mark, at))
            low = at
        if end == DONE:
            end_us = marks[-1][1]
        assert end_us is not None
        return Startup(node, self.pid, self.start_us, tuple(marks), end, max(end_us, low))

    def state(self) -> list[Any]:
        return [self.start_us, self.pid, [list(m) for m in self.marks]]

    @classmethod
    def from_state(cls, saved: list[Any]) -> _Open:
        start_us, pid, marks = saved
        return cls(
            _time(start_us),
            _int(pid),
            [(_mark(m), _time(t), None if c is None else _int(c)) for m, t, c in marks],
        )


@dataclass(slots=True)
class Tracker:
    """One node's start-ups: the newest done (`last`) and the one in progress (`current`)."""

    node: str
    last: Startup | None = None
    current: _Open | None = None
    last_pid: int = 0  # the PID whose start-up was the newest (its later lines start none)
    # the newest start-up began at systemd's `Starting`: its `Started` may come after it is done
    started_due: bool = False

    def add(self, ev: Event) -> Startup | None:
        """A PHASE event, or the server's going down; returns the start-up this ended."""
        if ev.model:  # (a router's instance: the server's own start-up is the router's)
            return None
        cur = self.current
        if ev.kind is EventKind.SERVER_DOWN:
            if cur is None:
                return None
            return self._end(STOPPED, ev.time_us)
        if ev.kind is not EventKind.PHASE:
            return None
        mark, t = ev.detail, ev.time_us
        if mark in (MARK_STARTING, MARK_STARTED):
            if cur is not None and (cur.pid or (mark == MARK_STARTING and cur.has(mark))):
                if mark == MARK_STARTED:  # (after the server's lines: Type=exec, notify)
                    self.started_due = False
                    return None
                replaced = self._end(REPLACED, t)
                self._open(t).marks.append((mark, t, None))
                self.started_due = True
                return replaced
            if cur is None:
                if mark == MARK_STARTED and self.started_due:
                    self.started_due = False
                    return None
                cur = self._open(t)
            self.started_due = mark == MARK_STARTING and not cur.pid
            cur.marks.append((mark, t, None))
            return None
        if mark not in SERVER_MARKS:
            return None
        ended: Startup | None = None
        if cur is not None and (
            (cur.pid and ev.pid and ev.pid != cur.pid)
            or (not ev.pid and mark == SERVER_MARKS[0] and cur.has(mark))
        ):  # (a new server's first line; without PIDs, its first mark again)
            ended = self._end(REPLACED, t)
            cur = None
        if cur is None:
            # a new server's first line; without PIDs (a plain log file), its first mark
            if ev.pid == self.last_pid if ev.pid else mark != SERVER_MARKS[0]:
                return ended  # (a done server's line: no new start)
            cur = self._open(t)
        if not cur.pid and ev.pid:
            cur.pid = self.last_pid = ev.pid
        if not cur.has(mark):
            cur.marks.append((mark, t, ev.task))
        if mark == MARK_LISTENING:
            return self._end(DONE)
        return ended

    def in_progress(self, read_us: int = 0) -> Startup | None:
        """The start-up in progress as it stands (RUNNING: up to `read_us`, how far its journal
        was read, or its newest mark), if any."""
        cur = self.current
        if cur is None:
            return None
        newest = max([read_us, cur.start_us, *(t for _, t, _ in cur.marks)])
        return cur.placed(self.node, RUNNING, newest)

    def _open(self, start_us: int) -> _Open:
        self.current = _Open(start_us)
        return self.current

    def _end(self, how: str, end_us: int | None = None) -> Startup:
        assert self.current is not None
        done = self.current.placed(self.node, how, end_us)
        self.current = None
        if done.done:
            self.last = done
        return done

    def state(self) -> dict[str, Any]:
        return {
            "last": None if self.last is None else self.last.state(),
            "current": None if self.current is None else self.current.state(),
            "last_pid": self.last_pid,
            "started_due": self.started_due,
        }

    @classmethod
    def from_state(cls, node: str, saved: dict[str, Any]) -> Tracker:
        """The tracker `state()` saved; KeyError, TypeError or ValueError when it does not fit."""
        last, current = saved["last"], saved["current"]
        return cls(
            node,
            None if last is None else Startup.from_state(node, last),
            None if current is None else _Open.from_state(current),
            _int(saved.get("last_pid", 0)),
            bool(saved.get("started_due", False)),
        )


def _int(value: Any) -> int:
    if type(value) is not int or not 0 <= value < 2**63:
        raise ValueError(f"{str(value)[:40]} is not a saved start-up value")
    return value


def _time(value: Any) -> int:
    if type(value) is not int or not MIN_TIME_US <= value <= MAX_TIME_US:
        raise ValueError(f"{str(value)[:40]} is not a saved start-up time")
    return value


def _mark(value: Any) -> str:
    if value not in (MARK_STARTING, MARK_STARTED, *SERVER_MARKS):
        raise ValueError(f"{str(value)[:40]} is not a start-up mark")
    return str(value)
