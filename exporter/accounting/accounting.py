"""Pure, exact accounting: intervals and events in, every number the exporter shows out.

No clock and no I/O: whoever drives it passes `now_us`. All times are integer microseconds.
Per-request counters count when the request's timing line arrives. The timeline figures (each
node's busy seconds, seconds with exactly k nodes busy, seconds per mix of kinds) are final up
to the watermark (docs/design.md, "The watermark") and are swept exactly, segment by
segment, from the intervals that reach past it (`sweep.py`); the part of an interval behind the
watermark when it arrives is late and counted apart. Each node's bound on the watermark is
`watermark.py`'s; the figures and their snapshots are `figures.py`'s.

The two hot paths, `add_all` (every request brings an interval and, on servers that log launch
lines, a STARTED event) and the sweep of `advance_to`, run compiled
(exporter/compiled/_accounting.c) where that is built; `add_all_reference` and
`advance_to_reference` are the Python code that stays their specification (a test holds
the two to the same state), and does whatever the compiled code leaves to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import cast

from exporter.accounting import intake, watermark
from exporter.accounting.contract import RECORD_TYPES
from exporter.accounting.figures import KindCounters, NodeState, Snapshot, node_snapshot
from exporter.accounting.history import History
from exporter.accounting.settings import Settings
from exporter.accounting.sweep import P_START, Pending, mix_labels_by_mask, sweep
from exporter.base.records import Event, Interval, Record
from exporter.base.times import SECOND
from exporter.compiled import switch
from exporter.startup.llama import Startup, Tracker
from exporter.startup.phases import Figures

KIND_CACHE_TOKENS = 1 << 16  # the compiled add_all remembers the kind of fewer tokens than this
compiled = switch.accounting  # (None: the Python references run)


class Accounting:
    """Owns every number; see the module docstring."""

    def __init__(
        self,
        nodes: Sequence[str],
        settings: Settings,
        *,
        origin_us: int,
        startups: list[Startup] | None = None,
    ) -> None:
        """`startups`, when given, receives every start-up as it ends (the report's)."""
        self.settings = settings
        self.kinds = kinds = settings.kinds
        self.start_timeout_us = settings.start_timeout_us
        self.slow_start_us = round(settings.start_timeout_us * settings.slow_start_share)
        self.max_request_us = settings.max_request_us
        self.stall_us = settings.stall_us
        self.clock_allowance_us = settings.clock_allowance_us
        self.buckets_us = tuple(round(b * SECOND) for b in settings.buckets_s)
        self.prompt_buckets_us = tuple(round(b * SECOND) for b in settings.prompt_buckets_s)
        self.generation_buckets_us = tuple(round(b * SECOND) for b in settings.generation_buckets_s)
        self.startups = startups
        self.now_us = origin_us  # the latest `advance`'s now (a start-up's age runs to it)
        self.init_timelines: dict[str, Figures] = {}  # by node: set as their files are read
        self.kind_names = kinds.names
        self.kind_of: dict[int | None, str] = {}  # token count -> kind, as the rules say
        self.sorted_kinds = tuple(sorted(self.kind_names))
        self.kind_index = {k: i for i, k in enumerate(self.sorted_kinds)}
        self.kind_bit = {k: 1 << i for k, i in self.kind_index.items()}
        self.mix_by_mask = mix_labels_by_mask(self.sorted_kinds)  # each bit mask's mix label
        self.origin_us = origin_us
        self.node_names = tuple(nodes)
        self.node_index = {n: i for i, n in enumerate(self.node_names)}
        self.nodes = {n: self._new_node(n, origin_us) for n in self.node_names}
        self.watermark_us = origin_us
        self.concurrency_us = [0] * (len(self.node_names) + 1)
        self.mix_us = dict.fromkeys(kinds.mix_labels(), 0)
        # intervals reaching past the watermark: (start, end, node index, kind bit)
        self.pending: list[Pending] = []
        # the copies of the per-kind counters the last snapshot holds, kept until they change:
        # successive snapshots share what did not change (and a renderer can tell by identity)
        self._copies: dict[tuple[str, str], KindCounters] = {}
        # the compiled add_all's copy of `kind_of` (whose entries never change), by token
        # count: 1 + the kind's index in `sorted_kinds`, 0 when not known yet
        self.kind_cache = bytearray(KIND_CACHE_TOKENS if compiled is not None else 0)
        # the samples the status page reads (the daemon's: a report takes none)
        self.history: History | None = None

    def _new_node(self, name: str, newest_us: int) -> NodeState:
        return NodeState(
            newest_us=newest_us,
            kinds={k: self.new_counters() for k in self.kind_names},
            startups=Tracker(name),
        )

    def new_counters(self) -> KindCounters:
        """A kind's counters at 0, with a bucket for each bound and +Inf in each histogram."""
        return KindCounters(
            buckets=[0] * (len(self.buckets_us) + 1),
            prompt_buckets=[0] * (len(self.prompt_buckets_us) + 1),
            generation_buckets=[0] * (len(self.generation_buckets_us) + 1),
        )

    # -- input ------------------------------------------------------------------------------

    def add(self, rec: Record, *, count: bool = True) -> None:
        """Take one parser record. `count=False` places an interval on the timeline only."""
        if type(rec) is Interval:
            intake.interval(self, rec, count)
        else:
            intake.record(self, rec)

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
            i = take(seq, i, self, RECORD_TYPES)  # (it reads contract.ACCOUNTING_READS)
            if i < n:  # (a token count not seen before, an unusual record: the Python code's)
                intake.record(self, seq[i])
                i += 1

    def add_all_reference(self, recs: Iterable[Record]) -> None:
        """`add_all` in Python: the specification of the compiled path."""
        interval, other = intake.interval, intake.record
        for rec in recs:
            if type(rec) is Interval:
                interval(self, rec, True)
            else:
                other(self, rec)

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
                self.pending = [p for p in self.pending if p[P_START] <= limit]
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
        index = self.node_index[node]
        ends = [e for _, e, n, _ in self.pending if n == index and e <= limit_us]
        before = self.nodes[node].end_in_line_us
        return max(ends if before is None else [*ends, before], default=None)

    def source_state(
        self, node: str, *, up: bool, caught_up: bool, now_us: int, lag_us: int = 0
    ) -> None:
        """What the node's source is doing now (see `watermark.source_state`)."""
        watermark.source_state(
            self.nodes[node], up=up, caught_up=caught_up, now_us=now_us, lag_us=lag_us
        )

    def source_reconnected(self, node: str) -> None:
        self.nodes[node].reconnects += 1

    def source_gap(self, node: str) -> None:
        self.nodes[node].gaps += 1

    def add_startup(self, ev: Event) -> None:
        """A start-up line's PHASE event, or the server's going down, for the start-ups only
        (the report's, from beyond its window: a start-up that began in it ends there)."""
        intake.startup(self, self.nodes[ev.node], ev)

    # -- the watermark ----------------------------------------------------------------------

    def read_until(self, node: str, now_us: int) -> int:
        """The journal time up to which `node` has nothing unread (`watermark.read_until`)."""
        return watermark.read_until(self.nodes[node], now_us)

    def node_bound(self, node: str, now_us: int) -> int:
        """No request of `node` that covers a time before this can still be unseen."""
        return watermark.node_bound(self.nodes[node], now_us, self.max_request_us)

    def advance(self, now_us: int) -> None:
        """Move the watermark as far as every node that still holds it allows."""
        self.now_us = max(self.now_us, now_us)
        bounds = [
            watermark.node_bound(ns, now_us, self.max_request_us)
            for ns in self.nodes.values()
            if not watermark.stalled(ns, now_us, self.stall_us, self.now_us)
        ]
        if bounds:
            self.advance_to(min(bounds))

    def holder(self, now_us: int) -> tuple[str, str, str] | None:
        """The node that holds the cluster figures back, and why (`watermark.holder`)."""
        return watermark.holder(self.nodes, now_us, self.settings, self.now_us)

    def advance_to(self, until_us: int) -> None:
        """Make the timeline figures final up to `until_us` (the report's end of window),
        taking the history's samples on the way. Compiled where it is built, unless a figure
        would not fit in 64 bits (or the pending intervals are not what this class keeps):
        then in Python."""
        self._advance_to(until_us, self._sweep)

    def advance_to_reference(self, until_us: int) -> None:
        """`advance_to` in Python: the specification of the compiled sweep."""
        self._advance_to(until_us, self._sweep_reference)

    def _advance_to(self, until_us: int, sweep_to: Callable[[int], None]) -> None:
        history = self.history
        if history is not None:
            for at_us in history.due(self.watermark_us, until_us, self.now_us):
                sweep_to(at_us)
                self._sample(history, at_us)
        sweep_to(until_us)

    def _sweep(self, until_us: int) -> None:
        lo = self.watermark_us
        if until_us <= lo:
            return
        swept = None
        if compiled is not None:
            swept = compiled.sweep(
                self.pending, lo, until_us, len(self.node_names), len(self.kind_bit)
            )
        if swept is None:
            swept = sweep(self.pending, lo, until_us, len(self.node_names), len(self.kind_bit))
        self._add_swept(until_us, *swept)

    def _sweep_reference(self, until_us: int) -> None:
        lo = self.watermark_us
        if until_us <= lo:
            return
        swept = sweep(self.pending, lo, until_us, len(self.node_names), len(self.kind_bit))
        self._add_swept(until_us, *swept)

    def _sample(self, history: History, at_us: int) -> None:
        """The history's sample at `at_us` (the figures swept up to it)."""
        states = [self.nodes[n] for n in history.nodes]
        history.add(
            at_us,
            [ns.busy_us for ns in states],
            self.concurrency_us,
            [ns.up for ns in states],
            [ns.up and ns.server_up != 0 and ns.asleep_since_us is None for ns in states],
        )

    def _add_swept(
        self,
        until_us: int,
        keep: list[Pending],
        conc_us: Sequence[int],
        mix_by_mask: Sequence[int],
        node_busy: Sequence[int],
        slot_busy: Sequence[int],
    ) -> None:
        """Take what a sweep up to `until_us` found: the intervals still pending, the
        concurrency, mix and busy figures."""
        self.pending = keep
        self.watermark_us = until_us
        conc = self.concurrency_us
        for k, us in enumerate(conc_us):
            if us:
                conc[k] += us
        mix = self.mix_us
        for m, label in enumerate(self.mix_by_mask):
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
            node_snapshot(
                name, ns, {k: self._copy(name, k, c) for k, c in ns.kinds.items()}, self.now_us
            )
            for name, ns in self.nodes.items()
        )
        return Snapshot(
            nodes=nodes,
            kind_names=self.kind_names,
            buckets_us=self.buckets_us,
            prompt_buckets_us=self.prompt_buckets_us,
            generation_buckets_us=self.generation_buckets_us,
            histograms_per_node=self.settings.histograms_per_node,
            concurrency_us=tuple(self.concurrency_us),
            mix_us=dict(self.mix_us),
            watermark_us=self.watermark_us,
            start_timeout_us=self.start_timeout_us,
            slow_start_us=self.slow_start_us,
            init_timelines=tuple(self.init_timelines.values()),
        )

    def _copy(self, node: str, kind: str, c: KindCounters) -> KindCounters:
        copy = self._copies.get((node, kind))
        # every change counts a request, but a draft line's (which follows its request's)
        if copy is None or copy.requests != c.requests or copy.draft_tokens != c.draft_tokens:
            copy = self._copies[node, kind] = c.copy()
        return copy

    def drop_copies(self) -> None:
        """Forget the snapshot copies (the counters were replaced whole: a checkpoint restored)."""
        self._copies.clear()
