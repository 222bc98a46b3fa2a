"""llama-server start-ups from the parser's milestones: each one's phases, and the one in progress.

The parser turns every start-up line into a PHASE event (`records.MILESTONES`): systemd's
`Starting`/`Started` for the unit, then the server's `initializing`, `loading model`, `n_slots =
N`, `model loaded` and `listening on`. A `Tracker` (one per node) folds them into `Startup`s. A
sleeping server's wake-up is a start-up of its own kind (WAKE): from `exiting sleeping state`
through the reload's `loading model` to its `n_slots = N`, after which it serves (the request that
woke it waited that long). A start-up begins at systemd's start of the unit, or without one at the
first line of a server PID not seen starting before; it is done at `listening on`, and ends
unfinished when the unit goes down first (a stop, an exit, a failure: systemd's timeout included)
or a new PID starts over. Its phases run from milestone to milestone, each named by the milestone
that begins it (PHASES); a milestone the server did not log makes the phase before it longer, and
only the first of each milestone counts. Times: the server's milestones are placed by their log
prefix (the elapsed or wall-clock stamp, µs apart exactly), anchored where the journal saw them
soonest (a journal stamps a line when it reads it, never before it was written); systemd's at their
journal time.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from exporter.base.records import (
    MILESTONE_LISTENING,
    MILESTONE_SLOTS,
    MILESTONE_STARTED,
    MILESTONE_STARTING,
    MILESTONE_WAKING,
    MILESTONES,
    SERVER_MILESTONES,
    Event,
    EventKind,
)
from exporter.base.times import MAX_TIME_US, MIN_TIME_US, SECOND
from exporter.startup.phases import Phase, Timeline

UNIT_PHASE = "unit"  # systemd's start of the unit to the server's first line
WAKE_PHASE = "wake"  # a wake-up's first line to its reload's first
# the phase each of the server's milestones begins (its last, listening, ends the start-up)
PHASES = {
    "initializing": "initializing",
    "loading": "load_model",
    "slots": "init_slots",
    "loaded": "start_http",
}
# the kinds of start-up: the server's start, and a sleeping server's wake-up (which is done at
# its `n_slots = N`: it logs no `listening on`)
START, WAKE = "start", "wake"
LAST_MILESTONE = {START: MILESTONE_LISTENING, WAKE: MILESTONE_SLOTS}
# how a start-up ended: done, or before listening; or that it had not ended yet
DONE, STOPPED, REPLACED, RUNNING = "listening", "stopped", "replaced", "starting"
SERVER_ROLE, UNIT_ROLE = "server", "systemd"  # (the table's role column: 7 wide)


@dataclass(frozen=True, slots=True)
class Startup:
    """One start-up of a node's llama-server, as its lines told it."""

    node: str
    pid: int  # the server's (0: it logged no line)
    start_us: int  # systemd's start of the unit, else the server's first line
    # (milestone, time): systemd's first when there, in order
    milestones: tuple[tuple[str, int], ...]
    end: str  # DONE, or why it ended before listening: STOPPED, REPLACED
    end_us: int  # when it was listening, or when it ended
    kind: str = START  # START, or WAKE (a sleeping server's wake-up)

    @property
    def done(self) -> bool:
        return self.end == DONE

    @property
    def seconds(self) -> float:
        return (self.end_us - self.start_us) / SECOND

    def phases(self) -> list[tuple[str, int, int]]:
        """(phase, start, end) from milestone to milestone; an unfinished start-up's last phase
        runs to its end."""
        out: list[tuple[str, int, int]] = []
        server = [(m, t) for m, t in self.milestones if m in SERVER_MILESTONES]
        if len(server) < len(self.milestones):  # (systemd started it, or a wake-up)
            first = WAKE_PHASE if self.kind == WAKE else UNIT_PHASE
            out.append((first, self.start_us, server[0][1] if server else self.end_us))
        last = LAST_MILESTONE[self.kind]
        for i, (milestone, t) in enumerate(server):
            if milestone in (last, MILESTONE_LISTENING):
                break
            end = server[i + 1][1] if i + 1 < len(server) else self.end_us
            out.append((PHASES[milestone], t, end))
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
        """Its fields in order; a wake-up's kind after them (a start's is left out)."""
        milestones = [list(m) for m in self.milestones]
        state = [self.pid, self.start_us, milestones, self.end, self.end_us]
        return state if self.kind == START else [*state, self.kind]

    @classmethod
    def from_state(cls, node: str, saved: list[Any]) -> Startup:
        """(One saved before the wake kind has five items: a start.)"""
        pid, start_us, milestones, end, end_us, *kind = saved
        if end not in (DONE, STOPPED, REPLACED, RUNNING):
            raise ValueError(f"a start-up that ended {str(end)[:20]!r}")
        return cls(
            node,
            _int(pid),
            _time(start_us),
            tuple((_milestone(m), _time(t)) for m, t in milestones),
            end,
            _time(end_us),
            _kind(kind),
        )


@dataclass(slots=True)
class _Open:
    """A start-up in progress: its milestones as they came, (milestone, journal time, the
    line's clock)."""

    start_us: int
    pid: int = 0
    milestones: list[tuple[str, int, int | None]] = field(default_factory=list)
    kind: str = START

    def has(self, milestone: str) -> bool:
        return any(m == milestone for m, _, _ in self.milestones)

    def placed(self, node: str, end: str, end_us: int | None = None) -> Startup:
        """The start-up it was, its milestones placed (see the module docstring)."""
        clocked = [t - clock for _, t, clock in self.milestones if clock is not None]
        anchor = min(clocked) if clocked else None
        milestones: list[tuple[str, int]] = []
        # (a wake-up begins at its first line: placed by its prefix like the rest)
        low = self.start_us if self.kind == START else MIN_TIME_US
        for milestone, t, clock in self.milestones:
            at = t if clock is None or anchor is None else anchor + clock
            at = max(min(at, t), low)
            milestones.append((milestone, at))
            low = at
        begin = self.start_us if self.kind == START or not milestones else milestones[0][1]
        if end == DONE:
            end_us = milestones[-1][1]
        assert end_us is not None
        start = Startup(node, self.pid, begin, tuple(milestones), end, max(end_us, low))
        return start if self.kind == START else replace(start, kind=self.kind)

    def state(self) -> list[Any]:
        state = [self.start_us, self.pid, [list(m) for m in self.milestones]]
        return state if self.kind == START else [*state, self.kind]

    @classmethod
    def from_state(cls, saved: list[Any]) -> _Open:
        """(One saved before the wake kind has three items: a start.)"""
        start_us, pid, milestones, *kind = saved
        return cls(
            _time(start_us),
            _int(pid),
            [(_milestone(m), _time(t), None if c is None else _int(c)) for m, t, c in milestones],
            _kind(kind),
        )


@dataclass(slots=True)
class Tracker:
    """One node's start-ups: the newest done (`last`) and the one in progress (`current`)."""

    node: str
    last: Startup | None = None
    current: _Open | None = None
    last_wake: Startup | None = None  # the newest wake-up done
    last_pid: int = 0  # the PID whose start-up was the newest (its later lines start none)
    # the newest start-up began at systemd's `Starting`: its `Started` may come after it is done
    started_due: bool = False

    def add(self, ev: Event) -> Startup | None:
        """A PHASE event, or the server's going down; returns the start-up this ended."""
        if ev.model:  # (a router's instance: the server's own start-up is the router's)
            return None
        if ev.kind is EventKind.SERVER_DOWN:
            return None if self.current is None else self._end(STOPPED, ev.time_us)
        if ev.kind is not EventKind.PHASE:
            return None
        if ev.detail in (MILESTONE_STARTING, MILESTONE_STARTED):
            return self._unit(ev.detail, ev.time_us)
        if ev.detail == MILESTONE_WAKING:
            return self._wake(ev)
        if ev.detail in SERVER_MILESTONES:
            return self._server(ev)
        return None

    def _wake(self, ev: Event) -> Startup | None:
        """A sleeping server wakes: a wake-up begins (ending the start-up in progress, if
        any); returns the start-up this ended."""
        ended = None if self.current is None else self._end(REPLACED, ev.time_us)
        cur = self._open(ev.time_us)
        cur.kind, cur.pid = WAKE, ev.pid
        cur.milestones.append((MILESTONE_WAKING, ev.time_us, ev.task))
        return ended

    def _unit(self, milestone: str, t: int) -> Startup | None:
        """systemd's `Starting` or `Started` of the unit; returns the start-up this ended."""
        cur = self.current
        if cur is not None and (
            cur.pid or (milestone == MILESTONE_STARTING and cur.has(milestone))
        ):
            if milestone == MILESTONE_STARTED:  # (after the server's lines: Type=exec, notify)
                self.started_due = False
                return None
            replaced = self._end(REPLACED, t)
            self._open(t).milestones.append((milestone, t, None))
            self.started_due = True
            return replaced
        if cur is None:
            if milestone == MILESTONE_STARTED and self.started_due:
                self.started_due = False
                return None
            cur = self._open(t)
        self.started_due = milestone == MILESTONE_STARTING and not cur.pid
        cur.milestones.append((milestone, t, None))
        return None

    def _server(self, ev: Event) -> Startup | None:
        """One of the server's own start-up lines; returns the start-up this ended."""
        milestone, t, cur = ev.detail, ev.time_us, self.current
        ended: Startup | None = None
        if cur is not None and (
            (cur.pid and ev.pid and ev.pid != cur.pid)
            or (not ev.pid and milestone == SERVER_MILESTONES[0] and cur.has(milestone))
        ):  # (a new server's first line; without PIDs, its first milestone again)
            ended = self._end(REPLACED, t)
            cur = None
        if cur is None:
            # a new server's first line; without PIDs (a plain log file), its first milestone
            if ev.pid == self.last_pid if ev.pid else milestone != SERVER_MILESTONES[0]:
                return ended  # (a done server's line: no new start)
            cur = self._open(t)
        if not cur.pid and ev.pid:
            cur.pid = self.last_pid = ev.pid
        if not cur.has(milestone):
            cur.milestones.append((milestone, t, ev.task))
        if milestone in (LAST_MILESTONE[cur.kind], MILESTONE_LISTENING):
            return self._end(DONE)
        return ended

    def in_progress(self, read_us: int = 0) -> Startup | None:
        """The start-up in progress as it stands (RUNNING: up to `read_us`, how far its journal
        was read, or its newest milestone), if any."""
        cur = self.current
        if cur is None:
            return None
        newest = max([read_us, cur.start_us, *(t for _, t, _ in cur.milestones)])
        return cur.placed(self.node, RUNNING, newest)

    def _open(self, start_us: int) -> _Open:
        self.current = _Open(start_us)
        return self.current

    def _end(self, how: str, end_us: int | None = None) -> Startup:
        assert self.current is not None
        done = self.current.placed(self.node, how, end_us)
        self.current = None
        if done.done and done.kind == WAKE:
            self.last_wake = done
        elif done.done:
            self.last = done
        return done

    def state(self) -> dict[str, Any]:
        state = {
            "last": None if self.last is None else self.last.state(),
            "current": None if self.current is None else self.current.state(),
            "last_pid": self.last_pid,
            "started_due": self.started_due,
        }
        if self.last_wake is not None:  # (a server that never slept has none)
            state["last_wake"] = self.last_wake.state()
        return state

    @classmethod
    def from_state(cls, node: str, saved: dict[str, Any]) -> Tracker:
        """The tracker `state()` saved; KeyError, TypeError or ValueError when it does not fit."""
        last, current, wake = saved["last"], saved["current"], saved.get("last_wake")
        return cls(
            node,
            None if last is None else Startup.from_state(node, last),
            None if current is None else _Open.from_state(current),
            None if wake is None else Startup.from_state(node, wake),
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


def _milestone(value: Any) -> str:
    if value not in MILESTONES:
        raise ValueError(f"{str(value)[:40]} is not a start-up milestone")
    return str(value)


def _kind(saved: list[Any]) -> str:
    """A start-up's kind as saved after its other fields (none: a start)."""
    if not saved:
        return START
    if len(saved) > 1 or saved[0] not in (START, WAKE):
        raise ValueError(f"{str(saved)[:40]} is not a start-up kind")
    return str(saved[0])
