"""Pure, exact accounting: intervals and events in, every number the exporter shows out.

No clock and no I/O: whoever drives it passes `now_us`. All times are integer microseconds.
Per-request counters count when the request's timing line arrives. The timeline figures (each
node's busy seconds, seconds with exactly k nodes busy, seconds per mix of kinds) are final up
to the watermark (docs/design.md, "The watermark") and are swept exactly, segment by
segment, from the intervals that reach past it; the part of an interval behind the watermark
when it arrives is late and counted apart.

The two hot paths, `add_all` (every request brings an interval and, on servers that log launch
lines, a STARTED event) and the sweep of `advance_to`, run compiled
(exporter/compiled/_accounting.c) where that is built; `add_all_reference` and
`advance_to_reference` are the Python code that stays their specification (a test holds
the two to the same state), and does whatever the compiled code leaves to it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, cast

from exporter.base.kinds import Kinds
from exporter.base.records import LOST_REASON, REASONS, Event, EventKind, Interval, Record
from exporter.base.times import fits, iso
from exporter.compiled.switch import accounting as compiled
from exporter.parse.parser import OTHER_MODELS
from exporter.startup.llama import Startup, Tracker
from exporter.startup.phases import Figures

SECOND = 1_000_000
START_MARGIN_US = SECOND  # a launch line is logged up to ~1 ms after end - duration
CAUGHT_UP_SLACK_US = 2 * SECOND  # node clocks and poll/SSH delays
# A node's journal time further ahead of the exporter's now than this is clock skew (a node's
# clock, or a corrupted entry), shown as such.
CLOCK_ALLOWANCE_US = 5 * SECOND
HOLD_US = 60 * SECOND  # figures this far behind now (beyond a node's usual trail) are held
# seconds: from a fast node's 50 ms (a real 3-slot run's requests all took under a second),
# through the seed's 2-15 s reconcile and 20-60 s extraction calls, to half an hour
DEFAULT_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0)
DEFAULT_BUCKETS_S += (60.0, 120.0, 300.0, 600.0, 1800.0)
KIND_CACHE_TOKENS = 1 << 16  # the compiled add_all remembers the kind of fewer tokens than this
KIND_OF_MAX = 1 << 14  # token counts whose kind is remembered (then forgotten all at once)
MAX_MODELS = 64  # model instances counted per node under their own name (a router serves a few)


@dataclass(slots=True)
class KindCounters:
    requests: int = 0
    request_us: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prompt_us: int = 0
    generation_us: int = 0
    buckets: list[int] = field(default_factory=list)  # per bucket, not cumulative; last is +Inf
    histogram_us: int = 0  # the durations the buckets hold (request_us since they last changed)

    def copy(self) -> KindCounters:
        c = KindCounters(
            self.requests,
            self.request_us,
            self.tokens,
            self.prompt_tokens,
            self.generated_tokens,
            self.prompt_us,
            self.generation_us,
        )
        c.buckets = list(self.buckets)
        c.histogram_us = self.histogram_us
        return c


@dataclass(slots=True)
class NodeState:
    """Everything known of one node."""

    newest_us: int  # journal time of the newest entry read (in line with the clocks)
    up: bool = False
    caught_up: bool = False
    down_since_us: int | None = None
    behind_since_us: int | None = None  # since when it has not been caught up (down or not)
    behind_newest_us: int = 0  # its newest entry's time when that was last looked at
    start_lines: bool = False  # this llama-server logs launch lines
    # (slot, task) -> start; (slot, task, model) for a model instance's in router mode
    in_flight: dict[tuple[int, int] | tuple[int, int, str], int] = field(default_factory=dict)
    busy_us: int = 0
    slot_busy_us: int = 0
    last_end_us: int | None = None
    end_in_line_us: int | None = None  # last_end_us as the last batch in line left it
    entries: int = 0
    # occupancies without a timing block by reason: [count, microseconds]
    untimed: dict[str, list[int]] = field(
        default_factory=lambda: {reason: [0, 0] for reason in REASONS}
    )
    slots: int | None = None  # what the server said it has
    server_up: int | None = None  # its llama-server runs (1) or not (0); None: not known
    models: dict[str, list[int]] = field(default_factory=dict)  # [requests, us, tokens]
    aborted: int = 0
    restarts: int = 0
    parse_errors: int = 0
    late: int = 0
    reconnects: int = 0
    gaps: int = 0
    lag_us: int = 0
    clock_skew_us: int = 0  # how far ahead of now its newest entry was, beyond the allowance
    kinds: dict[str, KindCounters] = field(default_factory=dict)
    startups: Tracker = field(default_factory=lambda: Tracker(""))  # its server's start-ups


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    name: str
    kinds: dict[str, KindCounters]
    busy_us: int
    slot_busy_us: int
    in_flight: int
    oldest_in_flight_us: int | None
    last_end_us: int | None
    up: bool
    lag_us: int
    clock_skew_us: int
    entries: int
    untimed: dict[str, tuple[int, int]]  # reason -> (count, microseconds)
    slots: int | None
    server_up: int | None
    models: dict[str, tuple[int, int, int]]  # model -> (requests, microseconds, tokens)
    aborted: int
    restarts: int
    parse_errors: int
    late: int
    reconnects: int
    gaps: int
    startup: Startup | None = None  # its llama-server's last start-up that reached listening
    starting_since_us: int | None = None  # when the start-up in progress began (None: none)
    starting_us: int = 0  # how long it has run, as of the latest `advance`
    last_start_us: int | None = None  # when the newest start-up began


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent copy of every figure, for scrapes and reports."""

    nodes: tuple[NodeSnapshot, ...]
    kind_names: tuple[str, ...]
    buckets_us: tuple[int, ...]
    concurrency_us: tuple[int, ...]  # index k: exactly k nodes busy
    mix_us: dict[str, int]
    watermark_us: int
    start_timeout_us: int = 90 * SECOND  # the unit's TimeoutStartSec, as configured
    slow_start_us: int = 72 * SECOND  # the share of it past which a start-up is slow
    init_timelines: tuple[Figures, ...] = ()  # the init-timeline nodes', as last read

    @property
    def nodes_busy(self) -> int:
        return sum(1 for n in self.nodes if n.in_flight)


_STARTED = EventKind.STARTED  # (member lookups are slow)


class Accounting:
    """Owns every number; see the module docstring."""

    def __init__(
        self,
        nodes: Sequence[str],
        kinds: Kinds,
        *,
        origin_us: int,
        max_request_us: int = 600 * SECOND,
        stall_us: int = 300 * SECOND,
        buckets_s: Sequence[float] = DEFAULT_BUCKETS_S,
        clock_allowance_us: int = CLOCK_ALLOWANCE_US,
        start_timeout_us: int = 90 * SECOND,
        slow_start_share: float = 0.8,
        startups: list[Startup] | None = None,
    ) -> None:
        """`startups`, when given, receives every start-up as it ends (the report's)."""
        self.kinds = kinds
        self.start_timeout_us = start_timeout_us
        self.slow_start_us = round(start_timeout_us * slow_start_share)
        self.startups = startups
        self.now_us = origin_us  # the latest `advance`'s now (a start-up's age runs to it)
        self.init_timelines: dict[str, Figures] = {}  # by node: set as their files are read
        self.kind_names = kinds.names
        self._kind_of: dict[int | None, str] = {}  # token count -> kind, as the rules say
        self._sorted_kinds = tuple(sorted(self.kind_names))
        self._kind_index = {k: i for i, k in enumerate(self._sorted_kinds)}
        self._kind_bit = {k: 1 << i for k, i in self._kind_index.items()}
        self._mix_by_mask = _mix_labels_by_mask(sorted(self.kind_names))
        self.origin_us = origin_us
        self.max_request_us = max_request_us
        self.stall_us = stall_us
        self.clock_allowance_us = clock_allowance_us
        self.buckets_us = tuple(round(b * SECOND) for b in buckets_s)
        self.node_names = tuple(nodes)
        self._node_index = {n: i for i, n in enumerate(self.node_names)}
        self.nodes = {n: self._new_node(n, origin_us) for n in self.node_names}
        self.watermark_us = origin_us
        self.concurrency_us = [0] * (len(self.node_names) + 1)
        self.mix_us = dict.fromkeys(kinds.mix_labels(), 0)
        # intervals reaching past the watermark: (start, end, node index, kind bit)
        self._pending: list[tuple[int, int, int, int]] = []
        # the copies of the per-kind counters the last snapshot holds, kept until they change:
        # successive snapshots share what did not change (and a renderer can tell by identity)
        self._copies: dict[tuple[str, str], KindCounters] = {}
        # the compiled add_all's copy of `_kind_of` (whose entries never change), by token
        # count: 1 + the kind's index in `_sorted_kinds`, 0 when not known yet
        self._kind_cache = bytearray(KIND_CACHE_TOKENS if compiled is not None else 0)

    def _new_node(self, name: str, newest_us: int) -> NodeState:
        zero = len(self.buckets_us) + 1
        return NodeState(
            newest_us=newest_us,
            kinds={k: KindCounters(buckets=[0] * zero) for k in self.kind_names},
            startups=Tracker(name),
        )

    # -- input ------------------------------------------------------------------------------

    def add(self, rec: Record, *, count: bool = True) -> None:
        """Take one parser record. `count=False` places an interval on the timeline only."""
        if type(rec) is Interval:
            self._interval(rec, count)
        else:
            assert isinstance(rec, Event)
            self._event(rec)

    def add_all(self, recs: Iterable[Record]) -> None:
        """`add` each record, counted (the ingest path: one loop for a whole batch). Compiled
        where it is built, for a list or tuple: that takes the intervals and STARTED events it
        can take exactly and leaves each other record to the Python code, in order."""
        if compiled is None or (type(recs) is not list and type(recs) is not tuple):
            self.add_all_reference(recs)
            return
        seq = cast("list[Record] | tuple[Record, ...]", recs)
        take = compiled.add_all
        n = len(seq)
        i = 0
        while i < n:
            i = take(
                seq,
                i,
                Interval,
                Event,
                _STARTED,
                self.nodes,
                self._node_index,
                self._kind_of,
                self._kind_bit,
                self.buckets_us,
                self.origin_us,
                self.watermark_us,
                self._pending,
                self._sorted_kinds,
                self._kind_cache,
            )
            if i < n:  # (a token count not seen before, an unusual record: the Python code's)
                rec = seq[i]
                if type(rec) is Interval:
                    self._interval(rec, True)
                else:
                    self._event(cast(Event, rec))
                i += 1

    def add_all_reference(self, recs: Iterable[Record]) -> None:
        """`add_all` in Python: the specification of the compiled path."""
        interval = self._interval
        event: Callable[[Any], None] = self._event  # (what is no Interval is an Event)
        for rec in recs:
            if type(rec) is Interval:
                interval(rec, True)
            else:
                event(rec)

    def line_read(
        self,
        node: str,
        time_us: int | None,
        entries: int = 1,
        *,
        now_us: int | None = None,
        ended_us: int | None = None,
    ) -> None:
        """The source read `entries` entries, the newest at journal time `time_us`; `ended_us`:
        the latest request end the batch brought, if it brought one. Given `now_us`, a time
        more than `clock_allowance_us` ahead of it is the node's `clock_skew_us` (0 once a
        batch's times are in line again), and moves neither the node's newest entry (nor so
        the watermark) nor its last request end: an entry the exporter cannot believe vouches
        for no time (the requests are counted as they are): the last request end is the
        latest one in line (see `_end_in_line`)."""
        ns = self.nodes[node]
        ns.entries += entries
        if now_us is not None:
            limit = now_us + self.clock_allowance_us
            times = [t for t in (time_us, ended_us) if t is not None]
            if times:
                newest = max(times)
                ns.clock_skew_us = newest - now_us if newest > limit else 0
            if ended_us is not None and ended_us > limit:  # (it is the node's last_end_us)
                # what starts beyond now is no busy time that can be accounted (it would wait
                # years in the pending list, and the checkpoint)
                self._pending = [p for p in self._pending if p[0] <= limit]
                ns.last_end_us = self._end_in_line(node, limit)
            if time_us is not None and time_us > limit:
                time_us = None
        ns.end_in_line_us = ns.last_end_us
        if time_us is not None:
            ns.newest_us = max(ns.newest_us, time_us)

    def _end_in_line(self, node: str, limit_us: int) -> int | None:
        """The node's last request end up to `limit_us`: where the last batch in line left
        it, or a later end still pending (the batch's requests in line with the clocks). (Only
        when an entry stamped beyond it came: rare.)"""
        index = self._node_index[node]
        ends = [e for _, e, n, _ in self._pending if n == index and e <= limit_us]
        before = self.nodes[node].end_in_line_us
        return max(ends if before is None else [*ends, before], default=None)

    def read_until(self, node: str, now_us: int) -> int:
        """The journal time up to which `node` has nothing unread: the newest entry read, or
        now - 2 s while its source is connected and caught up."""
        ns = self.nodes[node]
        if ns.up and ns.caught_up:
            return max(ns.newest_us, now_us - CAUGHT_UP_SLACK_US)
        return ns.newest_us

    def source_state(
        self, node: str, *, up: bool, caught_up: bool, now_us: int, lag_us: int = 0
    ) -> None:
        """What the node's source is doing now (connected? read all its journal held?). The lag
        is the lag of a source that reads: 0 while it is caught up, and while it is down."""
        ns = self.nodes[node]
        if up:
            ns.down_since_us = None
        elif ns.up or ns.down_since_us is None:
            ns.down_since_us = now_us
        ns.up, ns.caught_up = up, up and caught_up
        if ns.caught_up:
            ns.behind_since_us = None
        elif ns.behind_since_us is None or (up and ns.newest_us > ns.behind_newest_us):
            # a source that reads on through its journal's time is catching up: the stall
            # limit counts from its last step forward (what reads without end makes none)
            ns.behind_since_us = now_us
        ns.behind_newest_us = ns.newest_us
        ns.lag_us = max(0, lag_us) if up and not caught_up else 0

    def source_reconnected(self, node: str) -> None:
        self.nodes[node].reconnects += 1

    def source_gap(self, node: str) -> None:
        self.nodes[node].gaps += 1

    def _interval(self, iv: Interval, count: bool) -> None:
        (
            node,
            start_us,
            end_us,
            tokens,
            p_tokens,
            g_tokens,
            p_us,
            g_us,
            slot,
            task,
            _,
            why,
            model,
        ) = iv
        ns = self.nodes[node]
        if why:
            self._untimed(ns, iv, count)
            return
        if model:
            self._model(ns, iv, count)
        kind = self._kind_of.get(tokens)
        if kind is None:  # a token count not seen before: the rules decide once
            if len(self._kind_of) >= KIND_OF_MAX:  # (bounded: it only saves a lookup)
                self._kind_of.clear()
            kind = self._kind_of[tokens] = self.kinds.classify(tokens)
        if slot is not None and task is not None and ns.in_flight:  # (its model's key if any)
            ns.in_flight.pop((slot, task, model) if model else (slot, task), None)
        if count:
            duration_us = end_us - start_us
            c = ns.kinds[kind]
            c.requests += 1  # (which tells a snapshot's copy of `c` is stale: see `_copy`)
            c.request_us += duration_us
            if tokens:
                c.tokens += tokens
            if p_tokens:
                c.prompt_tokens += p_tokens
            if g_tokens:
                c.generated_tokens += g_tokens
            if p_us:
                c.prompt_us += p_us
            if g_us:
                c.generation_us += g_us
            c.buckets[bisect.bisect_left(self.buckets_us, duration_us)] += 1
            c.histogram_us += duration_us
            if ns.last_end_us is None or end_us > ns.last_end_us:
                ns.last_end_us = end_us
        start = start_us if start_us > self.origin_us else self.origin_us
        watermark = self.watermark_us
        if start < watermark:
            if count:
                ns.late += 1
            start = watermark
        if end_us > start:
            self._pending.append((start, end_us, self._node_index[node], self._kind_bit[kind]))

    def _untimed(self, ns: NodeState, iv: Interval, count: bool) -> None:
        """An occupancy without a timing block: busy (and slot and concurrency) time of no
        kind, counted by its reason."""
        start_us, end_us = iv.start_us, iv.end_us
        if iv.slot is not None and iv.task is not None and ns.in_flight:
            key = (iv.slot, iv.task, iv.model) if iv.model else (iv.slot, iv.task)
            ns.in_flight.pop(key, None)
        start = max(start_us, self.origin_us)
        late = start < self.watermark_us
        if late:
            start = self.watermark_us
        if count:
            figures = ns.untimed.get(iv.reason) or ns.untimed["untimed"]
            figures[0] += 1
            figures[1] += end_us - start_us
            if ns.last_end_us is None or end_us > ns.last_end_us:
                ns.last_end_us = end_us
            ns.late += late
        if end_us > start:
            self._pending.append((start, end_us, self._node_index[iv.node], 0))

    def _model(self, ns: NodeState, iv: Interval, count: bool) -> None:
        """A timed request of a model instance (router mode): its own figures too, under its
        name for the node's first MAX_MODELS models, under OTHER_MODELS for the rest (so the
        models' figures always add up to the node's)."""
        if count:
            figures = _model_figures(ns.models, iv.model)
            figures[0] += 1
            figures[1] += iv.end_us - iv.start_us
            figures[2] += iv.tokens or 0

    def _event(self, ev: Event) -> None:
        node, time_us, kind, _, slot, task, _, model = ev
        ns = self.nodes[node]
        key: tuple[int, int] | tuple[int, int, str] | None = None
        if slot is not None and task is not None:  # (a model instance's have its name)
            key = (slot, task, model) if model else (slot, task)
        if kind is _STARTED:
            if key is not None:
                ns.start_lines = True
                ns.in_flight[key] = time_us
        elif kind is EventKind.LOST:  # (the parser saw its slot taken: its end never came)
            if key is not None:
                ns.in_flight.pop(key, None)
            ns.untimed[LOST_REASON][0] += 1
        elif kind is EventKind.ABORTED:  # in flight when its server exited
            if key is not None:
                ns.in_flight.pop(key, None)
            ns.aborted += 1
        elif kind is EventKind.SLOTS:
            ns.slots = slot
        elif kind is EventKind.PHASE:
            self._startup(ns, ev)
        elif kind is EventKind.SERVER_UP or kind is EventKind.SERVER_DOWN:
            ns.server_up = 1 if kind is EventKind.SERVER_UP else 0
            if kind is EventKind.SERVER_DOWN:
                self._startup(ns, ev)
        elif kind is EventKind.RESTART:  # (the old server's requests end when it has gone)
            ns.restarts += 1
            if not model:  # (a router's model instance is the router's build: it logs them)
                ns.start_lines = False
        elif kind is EventKind.PARSE_ERROR:
            ns.parse_errors += 1

    def add_startup(self, ev: Event) -> None:
        """A start-up line's PHASE event, or the server's going down, for the start-ups only
        (the report's, from beyond its window: a start-up that began in it ends there)."""
        self._startup(self.nodes[ev.node], ev)

    def _startup(self, ns: NodeState, ev: Event) -> None:
        ended = ns.startups.add(ev)
        if ended is not None and self.startups is not None:
            self.startups.append(ended)

    # -- the watermark ----------------------------------------------------------------------

    def node_bound(self, node: str, now_us: int) -> int:
        """No request of `node` that covers a time before this can still be unseen."""
        ns = self.nodes[node]
        newest = self.read_until(node, now_us)
        if not ns.start_lines:
            return newest - self.max_request_us
        if not ns.in_flight:
            return newest
        return max(min(ns.in_flight.values()) - START_MARGIN_US, newest - self.max_request_us)

    def advance(self, now_us: int) -> None:
        """Move the watermark as far as every node that still holds it allows."""
        self.now_us = max(self.now_us, now_us)
        bounds = [
            self.node_bound(n, now_us)
            for n, ns in self.nodes.items()
            if not self._stalled(ns, now_us)
        ]
        if bounds:
            self.advance_to(min(bounds))

    def holder(self, now_us: int) -> tuple[str, str, str] | None:
        """The node that holds the cluster figures back more than HOLD_US behind now, beyond
        what it always trails by: (node, what it waits for: `source down`, `backlog`,
        `request in flight`, and the words for the log, with until when), else None."""
        held = [
            (self.node_bound(n, now_us), n, ns)
            for n, ns in self.nodes.items()
            if not self._stalled(ns, now_us)
        ]
        if not held:
            return None
        bound, name, ns = min(held, key=lambda b: b[0])
        if bound > now_us - HOLD_US:
            return None
        until = iso(self._stalls_at(ns))
        if ns.down_since_us is not None:
            return (
                name,
                "source down",
                f"its source is down (since {iso(ns.down_since_us)}): the figures wait for it "
                f"until {until}, then go on without it",
            )
        if not ns.caught_up:
            return (
                name,
                "backlog",
                f"its journal is being read, at {iso(ns.newest_us)}: the figures follow it until "
                f"{until}, then go on without it if it has not caught up (stall_seconds)",
            )
        if ns.start_lines and ns.in_flight:
            since = min(ns.in_flight.values())
            until = iso(since + self.max_request_us)
            return (
                name,
                "request in flight",
                f"a request in flight since {iso(since)}: the figures wait for its end, at "
                f"most until {until} (max_request_seconds)",
            )
        return None

    def _stalls_at(self, ns: NodeState) -> int:
        """When the node stops holding the watermark unless it catches up first."""
        sinces = [t for t in (ns.down_since_us, ns.behind_since_us) if t is not None]
        return min(sinces, default=self.now_us) + self.stall_us

    def _stalled(self, ns: NodeState, now_us: int) -> bool:
        """Down, or not caught up (whatever it reads), for longer than `stall_us`: the node no
        longer holds the watermark (its requests that come after are late)."""
        return (ns.down_since_us is not None or ns.behind_since_us is not None) and (
            now_us > self._stalls_at(ns)
        )

    def advance_to(self, until_us: int) -> None:
        """Make the timeline figures final up to `until_us` (the report's end of window).
        Compiled where it is built, unless a figure would not fit in 64 bits (or the pending
        intervals are not what this class keeps): then in Python."""
        lo = self.watermark_us
        if until_us <= lo:
            return
        if compiled is not None:
            swept = compiled.sweep(
                self._pending, lo, until_us, len(self.node_names), len(self._kind_bit)
            )
            if swept is not None:
                self._pending, conc_us, mix_by_mask, node_busy, slot_busy = swept
                self.watermark_us = until_us
                conc = self.concurrency_us
                for k, us in enumerate(conc_us):
                    if us:
                        conc[k] += us
                self._add_swept(mix_by_mask, node_busy, slot_busy)
                return
        self.advance_to_reference(until_us)

    def advance_to_reference(self, until_us: int) -> None:
        """`advance_to` in Python: the specification of the compiled sweep."""
        lo = self.watermark_us
        if until_us <= lo:
            return
        events: list[tuple[int, int, int, int]] = []
        keep: list[tuple[int, int, int, int]] = []
        slot_busy = [0] * len(self.node_names)  # (each occupancy's time: the slots' sum)
        for p in self._pending:
            s, e, n, bit = p
            if s < until_us:
                events.append((s, 1, n, bit))
                events.append((min(e, until_us), -1, n, bit))
                slot_busy[n] += min(e, until_us) - s
            if e > until_us:
                keep.append((until_us if s < until_us else s, e, n, bit))
        self._pending = keep
        self.watermark_us = until_us
        self._sweep(lo, until_us, events, slot_busy)

    def _sweep(
        self, lo: int, hi: int, events: list[tuple[int, int, int, int]], slot_busy: list[int]
    ) -> None:
        events.sort()
        n_nodes = len(self.node_names)
        node_count = [0] * n_nodes
        node_since = [0] * n_nodes
        node_busy = [0] * n_nodes
        kind_count = dict.fromkeys(self._kind_bit.values(), 0)
        mix_by_mask = [0] * len(self._mix_by_mask)  # microseconds per mix, by mask
        conc = self.concurrency_us
        busy_nodes = 0
        mask = 0
        t_prev = lo
        for t, delta, n, bit in events:
            if t != t_prev:
                conc[busy_nodes] += t - t_prev
                mix_by_mask[mask] += t - t_prev
                t_prev = t
            if delta > 0:
                if node_count[n] == 0:
                    busy_nodes += 1
                    node_since[n] = t
                node_count[n] += 1
                if not bit:  # (an occupancy without timing: busy, of no kind)
                    continue
                if kind_count[bit] == 0:
                    mask |= bit
                kind_count[bit] += 1
            else:
                node_count[n] -= 1
                if node_count[n] == 0:
                    busy_nodes -= 1
                    node_busy[n] += t - node_since[n]
                if not bit:
                    continue
                kind_count[bit] -= 1
                if kind_count[bit] == 0:
                    mask &= ~bit
        conc[0] += hi - t_prev
        mix_by_mask[0] += hi - t_prev
        self._add_swept(mix_by_mask, node_busy, slot_busy)

    def _add_swept(
        self, mix_by_mask: Sequence[int], node_busy: Sequence[int], slot_busy: Sequence[int]
    ) -> None:
        """Add what a sweep found to the mix and busy figures."""
        mix = self.mix_us
        for m, label in enumerate(self._mix_by_mask):
            if mix_by_mask[m]:
                mix[label] += mix_by_mask[m]
        for i, name in enumerate(self.node_names):
            ns = self.nodes[name]
            ns.busy_us += node_busy[i]
            ns.slot_busy_us += slot_busy[i]

    # -- output -----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The figures now. Snapshots share the per-kind counters that did not change between
        them: never change a snapshot."""
        nodes = tuple(
            NodeSnapshot(
                name=name,
                kinds={k: self._copy(name, k, c) for k, c in ns.kinds.items()},
                busy_us=ns.busy_us,
                slot_busy_us=ns.slot_busy_us,
                in_flight=len(ns.in_flight),
                oldest_in_flight_us=min(ns.in_flight.values()) if ns.in_flight else None,
                last_end_us=ns.last_end_us,
                up=ns.up,
                lag_us=ns.lag_us,
                clock_skew_us=ns.clock_skew_us,
                entries=ns.entries,
                untimed={r: (n, us) for r, (n, us) in ns.untimed.items()},
                slots=ns.slots,
                server_up=ns.server_up,
                models={m: (n, us, t) for m, (n, us, t) in ns.models.items()},
                aborted=ns.aborted,
                restarts=ns.restarts,
                parse_errors=ns.parse_errors,
                late=ns.late,
                reconnects=ns.reconnects,
                gaps=ns.gaps,
                **self._startup_figures(ns),
            )
            for name, ns in self.nodes.items()
        )
        return Snapshot(
            nodes=nodes,
            kind_names=self.kind_names,
            buckets_us=self.buckets_us,
            concurrency_us=tuple(self.concurrency_us),
            mix_us=dict(self.mix_us),
            watermark_us=self.watermark_us,
            start_timeout_us=self.start_timeout_us,
            slow_start_us=self.slow_start_us,
            init_timelines=tuple(self.init_timelines.values()),
        )

    def _startup_figures(self, ns: NodeState) -> dict[str, Any]:
        """A node's start-up figures. A start-up in progress whose server has served a request
        since it began is no longer starting (a build that logs no `listening on`)."""
        tracker = ns.startups
        last = tracker.last
        current = tracker.current
        since = None if current is None else current.start_us
        if since is not None and (
            (ns.last_end_us is not None and ns.last_end_us >= since)
            or any(t >= since for t in ns.in_flight.values())
        ):
            since = None
        newest = current if current is not None else last
        return {
            "startup": last,
            "starting_since_us": since,
            # (while its source catches up, as far as its journal was read)
            "starting_us": 0
            if since is None
            else max(0, (self.now_us if ns.caught_up else ns.newest_us) - since),
            "last_start_us": None if newest is None else newest.start_us,
        }

    def _copy(self, node: str, kind: str, c: KindCounters) -> KindCounters:
        copy = self._copies.get((node, kind))
        if copy is None or copy.requests != c.requests:  # every change counts a request
            copy = self._copies[node, kind] = c.copy()
        return copy


def _model_figures(models: dict[str, list[int]], model: str) -> list[int]:
    """The [requests, us, tokens] a request of `model` counts in: its own while the node has
    fewer than MAX_MODELS models of their own, else OTHER_MODELS'."""
    figures = models.get(model)
    if figures is None:
        own = len(models) - (OTHER_MODELS in models)
        name = model if own < MAX_MODELS else OTHER_MODELS
        figures = models.get(name)
        if figures is None:
            figures = models[name] = [0, 0, 0]
    return figures


def _mix_labels_by_mask(sorted_kinds: Sequence[str]) -> list[str]:
    """Mix label of every bit mask over the sorted kind names (bit i = sorted_kinds[i])."""
    return [
        "+".join(k for i, k in enumerate(sorted_kinds) if mask >> i & 1) or "idle"
        for mask in range(1 << len(sorted_kinds))
    ]


# -- checkpoints -------------------------------------------------------------------------------

_NODE_COUNTERS = (
    "newest_us",
    "busy_us",
    "slot_busy_us",
    "last_end_us",
    "entries",
    "aborted",
    "restarts",
    "parse_errors",
    "late",
    "reconnects",
    "gaps",
)
_KIND_COUNTERS = (
    "requests",
    "request_us",
    "tokens",
    "prompt_tokens",
    "generated_tokens",
    "prompt_us",
    "generation_us",
)


_node_counters = attrgetter(*_NODE_COUNTERS)
_kind_counters = attrgetter(*_KIND_COUNTERS)


def state_of(acc: Accounting) -> dict[str, Any]:
    """Every number `acc` holds (not what its sources are doing now), as JSON-ready values,
    fresh: nothing in them changes with `acc` after (they may be encoded in another thread)."""
    kinds_by_bit = {1 << i: k for i, k in enumerate(sorted(acc.kind_names))}
    kinds_by_bit[0] = ""  # (an occupancy without timing)
    return {
        "origin_us": acc.origin_us,
        "watermark_us": acc.watermark_us,
        "kinds": [[r.name, r.min_tokens, r.max_tokens] for r in acc.kinds.rules],
        "buckets_us": list(acc.buckets_us),
        "concurrency_us": list(acc.concurrency_us),
        "mix_us": dict(acc.mix_us),
        "pending": [[s, e, acc.node_names[n], kinds_by_bit[bit]] for s, e, n, bit in acc._pending],
        "nodes": {
            name: {
                **dict(zip(_NODE_COUNTERS, _node_counters(ns), strict=True)),
                "start_lines": ns.start_lines,
                "in_flight": [[*key, t] for key, t in ns.in_flight.items()],
                "untimed": {r: list(v) for r, v in ns.untimed.items()},
                "slots": ns.slots,
                "server_up": ns.server_up,
                "models": {m: list(v) for m, v in ns.models.items()},
                "startups": ns.startups.state(),
                "kinds": {
                    k: [*_kind_counters(c), list(c.buckets), c.histogram_us]
                    for k, c in ns.kinds.items()
                },
            }
            for name, ns in acc.nodes.items()
        },
    }


def restore(acc: Accounting, state: dict[str, Any]) -> list[str]:
    """Put a checkpointed state back into a fresh `acc` built from today's config; returns what
    changed since (nodes added or dropped, kinds or buckets changed), for the log. Raises
    KeyError, TypeError or ValueError on a state that does not fit."""
    notes: list[str] = []
    same_kinds = state["kinds"] == [[r.name, r.min_tokens, r.max_tokens] for r in acc.kinds.rules]
    same_buckets = state["buckets_us"] == list(acc.buckets_us)
    if not same_kinds:
        notes.append("the kinds changed: per-kind and mix counters start again from 0")
    elif not same_buckets:
        notes.append(
            "duration_buckets changed: the duration histograms (buckets, count and sum) start "
            "again from 0"
        )
    acc.origin_us = _time(state["origin_us"], "origin_us")
    acc.watermark_us = _time(state["watermark_us"], "watermark_us")
    saved_conc = [int(v) for v in state["concurrency_us"]]
    acc.concurrency_us = (saved_conc + [0] * len(acc.concurrency_us))[: len(acc.concurrency_us)]
    if len(saved_conc) != len(acc.concurrency_us):
        notes.append(
            f"the number of nodes changed from {len(saved_conc) - 1} to "
            f"{len(acc.concurrency_us) - 1}"
        )
    if same_kinds:
        acc.mix_us.update({k: int(v) for k, v in state["mix_us"].items() if k in acc.mix_us})
    for name, saved in state["nodes"].items():
        ns = acc.nodes.get(name)
        if ns is None:
            notes.append(f"node {name} is no longer configured: its counters are dropped")
            continue
        for f in _NODE_COUNTERS:
            if f == "slot_busy_us" and f not in saved:  # (a checkpoint from before slots)
                continue
            value = saved[f]
            # only last_end_us may be None (no request yet): int(None) refuses the rest
            if value is None and f == "last_end_us":
                setattr(ns, f, None)
            elif f in _NODE_TIMES:
                setattr(ns, f, _time(value, f"nodes.{name}.{f}"))
            else:
                setattr(ns, f, _count(value, f"nodes.{name}.{f}"))
        ns.end_in_line_us = ns.last_end_us
        ns.start_lines = bool(saved["start_lines"])
        ns.in_flight = {}
        for s, t, *rest in saved["in_flight"]:
            *model, at = rest
            key = (int(s), int(t), str(model[0])) if model else (int(s), int(t))
            ns.in_flight[key] = _time(at, f"nodes.{name}.in_flight")
        if "cancelled" in saved:  # (a checkpoint from before the reasons: its cancels)
            ns.untimed["cancelled"][0] = _count(saved["cancelled"], f"nodes.{name}.cancelled")
        for reason, (n, us) in saved.get("untimed", {}).items():
            if reason in ns.untimed:
                ns.untimed[reason] = [
                    _count(n, f"nodes.{name}.untimed"),
                    _count(us, f"nodes.{name}.untimed"),
                ]
        slots, up = saved.get("slots"), saved.get("server_up")
        ns.slots = None if slots is None else _count(slots, f"nodes.{name}.slots")
        ns.server_up = None if up is None else int(bool(_count(up, f"nodes.{name}.server_up")))
        if saved.get("startups") is not None:  # (a checkpoint from before start-ups: none)
            ns.startups = Tracker.from_state(name, saved["startups"])
        for model, values in saved.get("models", {}).items():
            figures = _model_figures(ns.models, str(model))
            for i, v in enumerate(values[:3]):
                figures[i] += _count(v, f"nodes.{name}.models")
        if same_kinds:
            for k, values in saved["kinds"].items():
                c = ns.kinds[k]
                for f, v in zip(_KIND_COUNTERS, values, strict=False):
                    setattr(c, f, int(v))
                if same_buckets:
                    c.buckets = [int(b) for b in values[len(_KIND_COUNTERS)]]
                    # (a checkpoint from before the histogram kept its own sum: all of them)
                    extra = values[len(_KIND_COUNTERS) + 1 :]
                    c.histogram_us = int(extra[0]) if extra else c.request_us
    for name in acc.nodes.keys() - state["nodes"].keys():
        notes.append(f"node {name} is new: it starts at `since`")
    acc._copies.clear()
    catch_all = acc.kinds.classify(None)
    for s, e, name, kind in state["pending"]:
        if name in acc.nodes:
            bit = 0 if kind == "" else 1 << acc._kind_index.get(kind, acc._kind_index[catch_all])
            start, end = _time(s, "pending"), _time(e, "pending")
            acc._pending.append((start, end, acc._node_index[name], bit))
    return notes


_NODE_TIMES = {"newest_us", "last_end_us"}
_MAX_COUNT = 2**63 - 1  # (what the compiled sweep and the renderer hold)


def _time(value: Any, what: str) -> int:
    """A saved journal time; ValueError naming it when it is no int or outside what the
    exporter can represent (times.MIN_TIME_US..MAX_TIME_US)."""
    if type(value) is not int or not fits(value):
        raise ValueError(f"{what} is {str(value)[:40]}: not a time the exporter can represent")
    return value


def _count(value: Any, what: str) -> int:
    """A saved counter: a non-negative int that fits in 64 bits; ValueError naming it else."""
    if type(value) is not int or not 0 <= value <= _MAX_COUNT:
        raise ValueError(f"{what} is {str(value)[:40]}: not a counter")
    return value
