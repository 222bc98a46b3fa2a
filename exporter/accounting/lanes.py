"""Intervals kept for drawing: each node's recent ring, and a report window's rects or bins.

Pure: no clock, no I/O; times are integer microseconds since the epoch, as everywhere.

- `Recent` keeps each node's last RING_SIZE finished intervals, for the status page.
- `Window` keeps what a report window draws in bounded memory: the exact intervals while there
  are at most `max_rects` of them, and always, per node and per bin (the window cut into
  `bins` equal bins), the slot-seconds in the bin, the busy (union) seconds in the bin and the
  requests ending in it by outcome. Past `max_rects` it drops the exact intervals (`binned`)
  and holds O(nodes x bins).
- `concurrency` is the step function "how many nodes are busy" over [lo, hi], exact; `union`
  is one node's busy stretches.

Binned, a node's busy seconds in a bin are swept with a frontier: an interval adds what it
covers after the latest end of the node's intervals seen before it. That is the exact union
when a node's intervals arrive in the order of their starts or never overlap (one slot), and
a lower bound otherwise (an interval that starts before an earlier-arrived one's start and
ends after it misses the gap in between); it never exceeds the bin. The binned concurrency is
then the mean number of nodes busy in each bin: the sum over nodes of busy seconds / bin width.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from exporter.base.records import (
    CANCELLED,
    ERROR_REASON,
    I_END_US,
    I_NODE,
    I_REASON,
    I_START_US,
    LOST_REASON,
    UNTIMED,
    Interval,
    Record,
)
from exporter.compiled import switch

_compiled = switch.accounting  # (None: the Python reference runs)

# Intervals kept per node for the status page: RING_SIZE, or fewer in a large fleet, so that all
# the rings hold RING_BUDGET at most (an interval costs about 200 bytes; 2,000 nodes at 4,096
# each held 1.6 GB), but never fewer than RING_MIN.
RING_SIZE, RING_BUDGET, RING_MIN = 4096, 131_072, 32


def ring_size(nodes: int) -> int:
    """The intervals each node's ring keeps, in a fleet of `nodes`."""
    return max(RING_MIN, min(RING_SIZE, RING_BUDGET // max(1, nodes)))


MAX_RECTS = 4000  # exact intervals a Window keeps before it bins
BINS = 600  # bins of a Window

# Interval.reason -> what the pages call its outcome (data-outcome)
OUTCOMES = {"": "timed", CANCELLED: "cancelled", ERROR_REASON: "error", UNTIMED: "untimed"}
OUTCOME_NAMES = tuple(OUTCOMES.values())


class Step(NamedTuple):
    """`nodes` nodes busy during [start_us, end_us): a count, or a bin's mean when binned."""

    start_us: int
    end_us: int
    nodes: float


def outcome(iv: Interval) -> str:
    """The outcome of an interval (an unknown reason is `untimed`)."""
    return OUTCOMES.get(iv.reason, "untimed")


class Recent:
    """Each known node's most recent intervals, oldest first, at most `size` a node (by default
    `ring_size` of the nodes known, again at each `keep`)."""

    def __init__(self, nodes: Iterable[str], size: int | None = None) -> None:
        names = list(dict.fromkeys(nodes))
        self._fixed = size
        self.size = size if size is not None else ring_size(len(names))
        self.rings: dict[str, deque[Interval]] = {n: deque(maxlen=self.size) for n in names}
        # per node, the last copy: (its newest interval, the tuple)
        self._copies: dict[str, tuple[Interval | None, tuple[Interval, ...]]] = {}

    def add_all(self, recs: Iterable[Record], since_us: int | None = None) -> None:
        """Keep the intervals (in the order given), but none of reason `lost` (its end is not
        known), none of a node not known and, with `since_us`, none that ended before it (the
        pages' window: a backlog's older intervals would only push the newest out, and be
        dropped by the next copy); events are ignored. (Compiled where it is built, for a list
        or tuple: every batch's records pass here.)"""
        if _compiled is not None and (type(recs) is list or type(recs) is tuple):
            _compiled.keep_recent(self.rings, recs, Interval, LOST_REASON, since_us)
            return
        self.add_all_reference(recs, since_us)

    def add_all_reference(self, recs: Iterable[Record], since_us: int | None = None) -> None:
        """`add_all` in Python: the specification of the compiled `keep_recent`."""
        rings = self.rings
        for rec in recs:
            if (
                type(rec) is Interval
                and rec[I_REASON] != LOST_REASON
                and (since_us is None or rec[I_END_US] >= since_us)
            ):
                ring = rings.get(rec[I_NODE])
                if ring is not None:
                    ring.append(rec)

    def keep(self, nodes: Iterable[str]) -> None:
        """After a config reload: rings for new nodes, none for removed ones, the others kept."""
        wanted = list(dict.fromkeys(nodes))
        old = self.rings
        size = self._fixed if self._fixed is not None else ring_size(len(wanted))
        if size != self.size:  # (the fleet grew or shrank: each ring to its new share)
            self.size = size
            old = {n: deque(ring, maxlen=size) for n, ring in old.items()}
            self._copies.clear()
        self.rings = {n: old[n] if n in old else deque(maxlen=self.size) for n in wanted}

    def copy(
        self, since_us: int | None = None, newest: int | None = None
    ) -> dict[str, tuple[Interval, ...]]:
        """Each node's ring as it is (its intervals ending at `since_us` or later: the older
        ones, oldest first, are dropped from the ring now), or only its `newest` intervals. A
        ring that did not change since the last whole copy costs nothing: its tuple is the
        last one."""
        out = {}
        for n, ring in self.rings.items():
            if since_us is not None:
                while ring and ring[0][I_END_US] < since_us:
                    ring.popleft()
            if newest is not None and len(ring) > newest:
                out[n] = tuple(ring[-k] for k in range(newest, 0, -1))
                continue
            last = self._copies.get(n)
            if (
                last is None
                or len(last[1]) != len(ring)
                or last[0] is not (ring[-1] if ring else None)
            ):
                last = self._copies[n] = (ring[-1] if ring else None, tuple(ring))
            out[n] = last[1]
        return out

    def counts(self, since_us: int) -> dict[str, int]:
        """Each node's intervals ending at `since_us` or later (the older ones are dropped)."""
        out = {}
        for n, ring in self.rings.items():
            while ring and ring[0][I_END_US] < since_us:
                ring.popleft()
            out[n] = len(ring)
        return out


def union(spans: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The spans clipped to [lo, hi], merged: sorted, disjoint, none empty (touching ones are
    merged too)."""
    clipped = sorted((max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo))
    out: list[tuple[int, int]] = []
    for s, e in clipped:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def concurrency(per_node: Iterable[Iterable[tuple[int, int]]], lo: int, hi: int) -> list[Step]:
    """How many nodes are busy over [lo, hi]: steps in order that cover it exactly, each of
    another count than the one before (0 included); none when hi <= lo. A node is busy where
    any of its spans is (its spans' union), whatever its slots."""
    if hi <= lo:
        return []
    edges: list[tuple[int, int]] = []
    for spans in per_node:
        for s, e in union(spans, lo, hi):
            edges += ((s, 1), (e, -1))
    edges.sort()
    out: list[Step] = []
    count, t = 0, lo
    for x, delta in edges:
        if x > t:
            _step(out, t, x, count)
            t = x
        count += delta
    if hi > t:
        _step(out, t, hi, count)
    return out


def _step(out: list[Step], start: int, end: int, count: float) -> None:
    if out and out[-1].nodes == count:
        out[-1] = Step(out[-1].start_us, end, count)
    else:
        out.append(Step(start, end, count))


class Lane:
    """One node's part of a Window. Per bin: slot (occupancy) microseconds, busy microseconds
    (see the module docstring) and requests ended by outcome. It keeps the bin its last
    counted interval ended in at hand ([lo, hi) of bin `cb`): a node's requests come in time
    order, and most fall in the bin of the one before."""

    __slots__ = (
        "bin_us",
        "busy_us",
        "cb",
        "covered_us",
        "ended",
        "hi",
        "kept",
        "last",
        "lo",
        "occupancy_us",
        "since_us",
        "timed",
        "until_us",
    )

    def __init__(self, bins: int, start_us: int, until_us: int, bin_us: int) -> None:
        self.occupancy_us = [0] * bins
        self.busy_us = [0] * bins
        self.ended = {o: [0] * bins for o in OUTCOME_NAMES}
        self.timed = self.ended["timed"]
        self.covered_us = start_us  # the frontier of the busy sweep
        self.kept: list[Interval] = []  # the exact intervals, in the order added (not binned)
        self.since_us, self.until_us, self.bin_us, self.last = start_us, until_us, bin_us, bins - 1
        self.cb, self.lo, self.hi = 0, start_us, start_us  # the bin at hand (none yet)

    def requests(self, b: int) -> int:
        """Requests that ended in bin `b`."""
        return sum(counts[b] for counts in self.ended.values())

    def add(self, s: int, e: int, reason: str) -> bool:
        """An interval [s, e) of the node's (not `lost`): counted in the bin it ends in if it
        ends in the window, drawn where it covers the window; False when it is not the
        window's (ended before it, or starts at or after its end)."""
        if self.lo <= s <= e < self.hi:  # (nearly always: inside the bin at hand, counted)
            b = self.cb
            (self.ended[OUTCOMES.get(reason, UNTIMED)] if reason else self.timed)[b] += 1
            self.occupancy_us[b] += e - s
            frontier = self.covered_us
            if e > frontier:  # (the frontier, if past s, is in this bin too)
                self.busy_us[b] += e - (s if s > frontier else frontier)
                self.covered_us = e
            return True
        return self._place(s, e, reason)

    def _place(self, s: int, e: int, reason: str) -> bool:
        """`add` of an interval outside the bin at hand: the bin it ends in becomes the one at
        hand; its part in the window is spread over the bins it covers."""
        since, until, bin_us = self.since_us, self.until_us, self.bin_us
        if e > until:
            if s >= until:
                return False
        elif e < since:
            return False
        else:  # (it ends in the window: counted)
            b = min((e - since) // bin_us, self.last)
            self.cb, self.lo = b, since + b * bin_us
            self.hi = min(self.lo + bin_us, until)
            self.ended[OUTCOMES.get(reason, UNTIMED)][b] += 1
        cs = s if s > since else since
        ce = e if e < until else until
        if ce > cs:
            _spread(self.occupancy_us, cs, ce, since, bin_us)
            if ce > self.covered_us:
                frontier = self.covered_us
                _spread(self.busy_us, cs if cs > frontier else frontier, ce, since, bin_us)
                self.covered_us = ce
        return True


class Window:
    """What a report draws of [since_us, until_us]; see the module docstring. An interval
    belongs to it if it ends in the window (the report counts it) or runs past its end from
    inside it (only its part in the window is drawn)."""

    def __init__(
        self,
        nodes: Iterable[str],
        since_us: int,
        until_us: int,
        max_rects: int = MAX_RECTS,
        bins: int = BINS,
    ) -> None:
        self.nodes = tuple(dict.fromkeys(nodes))
        self.since_us, self.until_us = since_us, max(until_us, since_us)
        span = self.until_us - since_us
        self.bin_us = max(1, -(-span // max(1, bins)))
        self.bins = max(1, -(-span // self.bin_us))
        self.max_rects = max_rects
        self.lanes = {n: Lane(self.bins, since_us, self.until_us, self.bin_us) for n in self.nodes}
        self.intervals = 0  # every interval taken, binned or not
        self.binned = False

    def bin_start(self, b: int) -> int:
        return self.since_us + b * self.bin_us

    def bin_end(self, b: int) -> int:
        return min(self.until_us, self.since_us + (b + 1) * self.bin_us)

    def add(self, iv: Interval) -> None:
        self.add_all((iv,))

    def add_all(self, recs: Iterable[Record]) -> None:
        """Take the intervals of `recs` that belong to the window (events, intervals of reason
        `lost` and those of nodes not known are ignored). On the report's path: one loop, with
        the lane of the node before at hand (a batch is one node's)."""
        lanes, max_rects = self.lanes, self.max_rects
        taken, binned = self.intervals, self.binned
        node: str | None = None
        add: Callable[[int, int, str], bool] | None = None  # (the lane's; None: not known)
        kept: list[Interval] = []
        for rec in recs:
            if type(rec) is not Interval:
                continue
            if rec[I_NODE] is not node:
                node = rec[I_NODE]
                lane = lanes.get(node)
                add, kept = (None, kept) if lane is None else (lane.add, lane.kept)
            reason = rec[I_REASON]
            if (
                add is None
                or reason == LOST_REASON
                or not add(rec[I_START_US], rec[I_END_US], reason)
            ):
                continue
            taken += 1
            if not binned:
                kept.append(rec)
                binned = taken > max_rects and self._bin()
        self.intervals, self.binned = taken, binned

    def _bin(self) -> bool:
        """Past `max_rects`: the exact intervals are dropped, the bins hold it all (True)."""
        for lane in self.lanes.values():
            lane.kept = []
        return True

    def kept(self) -> dict[str, list[Interval]]:
        """Per node, the exact intervals in the order added; empty lists once binned."""
        return {n: lane.kept for n, lane in self.lanes.items()}

    def requests(self) -> int:
        """Requests (any outcome) that ended in the window."""
        return sum(sum(counts) for lane in self.lanes.values() for counts in lane.ended.values())

    def concurrency(self) -> list[Step]:
        """How many nodes are busy over the window: exact (`concurrency`) while the exact
        intervals are kept, else per bin the mean number of nodes busy (module docstring)."""
        if not self.binned:
            spans = [[(iv.start_us, iv.end_us) for iv in lane.kept] for lane in self.lanes.values()]
            return concurrency(spans, self.since_us, self.until_us)
        out: list[Step] = []
        for b in range(self.bins):
            width = self.bin_end(b) - self.bin_start(b)
            if width <= 0:  # (an empty window)
                continue
            busy = sum(lane.busy_us[b] for lane in self.lanes.values()) / width
            _step(out, self.bin_start(b), self.bin_end(b), busy)
        return out


def binned_steps(steps: Sequence[Step], w: Window) -> list[Step]:
    """Steps that cover w's window in order (`concurrency`), as each of w's bins' mean."""
    out: list[Step] = []
    i, n = 0, len(steps)
    for b in range(w.bins):
        s, e = w.bin_start(b), w.bin_end(b)
        if e <= s:
            continue
        while i < n and steps[i].end_us <= s:
            i += 1
        total = 0.0
        j = i
        while j < n and steps[j].start_us < e:
            step = steps[j]
            total += max(0, min(step.end_us, e) - max(step.start_us, s)) * step.nodes
            j += 1
        _step(out, s, e, total / (e - s))
    return out


def _spread(into: list[int], start: int, end: int, since: int, bin_us: int) -> None:
    """Add [start, end) to the bins it covers (start < end, both within the window)."""
    b = (start - since) // bin_us
    while start < end:
        edge = since + (b + 1) * bin_us
        stop = end if end < edge else edge
        into[b] += stop - start
        start = stop
        b += 1
