"""Accounting: every figure against a brute-force reference, and the watermark's rules."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting.accounting import SECOND, Accounting
from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds
from exporter.base.records import REASONS, Event, EventKind, Interval

from support.tools import examples

NODES = ("node0", "node1", "node2")
KINDS = Kinds(DEFAULT_RULES)
ORIGIN = 1_790_000_000 * SECOND
MAX_REQ_CELLS = 30  # longest request, in cells of one second


@dataclass(frozen=True)
class Req:
    node: int
    start: int  # cells after ORIGIN (may be negative: began before the origin)
    length: int
    tokens: int | None
    reason: str = ""  # an occupancy without timing (busy, of no kind) unless ""

    def interval(self) -> Interval:
        start = ORIGIN + self.start * SECOND
        end = start + self.length * SECOND
        if self.reason:
            return Interval(NODES[self.node], start, end, reason=self.reason)
        return Interval(NODES[self.node], start, end, self.tokens)


def brute_force(
    reqs: list[tuple[Req, int]], until: int
) -> tuple[list[int], dict[str, int], list[int], list[int]]:
    """Cell by cell over [0, until): (seconds with k nodes busy, seconds per mix, busy per node,
    slot busy per node: every occupancy's seconds). Each request counts from the larger of its
    start and the cell it was clipped to; one without timing is busy but of no kind."""
    conc = [0] * (len(NODES) + 1)
    mix: Counter[str] = Counter()
    busy = [0] * len(NODES)
    slot_busy = [0] * len(NODES)
    for cell in range(until):
        nodes: set[int] = set()
        kinds: set[str] = set()
        for r, clip in reqs:
            if max(r.start, clip) <= cell < r.start + r.length:
                nodes.add(r.node)
                slot_busy[r.node] += SECOND
                if not r.reason:
                    kinds.add(KINDS.classify(r.tokens))
        conc[len(nodes)] += SECOND
        mix["+".join(sorted(kinds)) or "idle"] += SECOND
        for n in nodes:
            busy[n] += SECOND
    return conc, dict(mix), busy, slot_busy


reqs_strategy = st.lists(
    st.builds(
        Req,
        node=st.integers(0, len(NODES) - 1),
        start=st.integers(-10, 150),
        length=st.integers(1, MAX_REQ_CELLS),
        tokens=st.one_of(st.none(), st.integers(0, 1500)),
        reason=st.sampled_from(("", "", "", "cancelled", "error", "untimed")),
    ),
    max_size=40,
)


def journal_order(reqs: list[Req], interleave: list[int]) -> list[Req]:
    """Each node's requests by end (as its journal logs them), nodes interleaved at random."""
    per_node = [
        sorted((r for r in reqs if r.node == n), key=lambda r: r.start + r.length)
        for n in range(len(NODES))
    ]
    out: list[Req] = []
    picks = iter(interleave)
    while any(per_node):
        live = [n for n in range(len(NODES)) if per_node[n]]
        out.append(per_node[live[next(picks, 0) % len(live)]].pop(0))
    return out


@settings(max_examples=examples(300), deadline=None)
@given(reqs=reqs_strategy, interleave=st.lists(st.integers(0, 5), max_size=60))
def test_live_watermark_matches_brute_force(reqs: list[Req], interleave: list[int]) -> None:
    """Streams arrive interleaved; the watermark moves after every line; nothing is late and
    every figure equals the brute-force count once the window is closed."""
    acc = Accounting(NODES, KINDS, origin_us=ORIGIN, max_request_us=MAX_REQ_CELLS * SECOND)
    for r in journal_order(reqs, interleave):
        iv = r.interval()
        acc.line_read(iv.node, iv.end_us)
        acc.add(iv)
        acc.advance(iv.end_us)
        snap = acc.snapshot()
        assert sum(snap.concurrency_us) == snap.watermark_us - ORIGIN
    until = 200
    acc.advance_to(ORIGIN + until * SECOND)
    snap = acc.snapshot()
    conc, mix, busy, slot_busy = brute_force([(r, 0) for r in reqs], until)
    assert list(snap.concurrency_us) == conc
    assert {k: v for k, v in snap.mix_us.items() if v} == mix
    assert [n.busy_us for n in snap.nodes] == busy
    assert [n.slot_busy_us for n in snap.nodes] == slot_busy
    assert all(n.late == 0 for n in snap.nodes)
    assert sum(k * v for k, v in enumerate(snap.concurrency_us)) == sum(busy)
    for i, n in enumerate(snap.nodes):
        assert n.untimed == {
            reason: (
                sum(1 for r in reqs if r.node == i and r.reason == reason),
                sum(r.length for r in reqs if r.node == i and r.reason == reason) * SECOND,
            )
            for reason in REASONS
        }
        mine = [r for r in reqs if r.node == i and not r.reason]
        for kind in KINDS.names:
            of_kind = [r for r in mine if KINDS.classify(r.tokens) == kind]
            c = n.kinds[kind]
            assert c.requests == len(of_kind)
            assert c.request_us == sum(r.length for r in of_kind) * SECOND
            assert c.tokens == sum(r.tokens or 0 for r in of_kind)
            assert sum(c.buckets) == len(of_kind)


@settings(max_examples=examples(300), deadline=None)
@given(reqs=reqs_strategy, moves=st.lists(st.integers(0, 200), max_size=40))
def test_late_intervals_count_only_after_the_watermark(reqs: list[Req], moves: list[int]) -> None:
    """The watermark jumps at random between arrivals: what arrives behind it is late, counts in
    the per-node counters, and enters the timeline only from the watermark on."""
    acc = Accounting(NODES, KINDS, origin_us=ORIGIN)
    clipped: list[tuple[Req, int]] = []
    late = [0] * len(NODES)
    watermark = 0
    for i, r in enumerate(reqs):
        if i < len(moves):
            acc.advance_to(ORIGIN + moves[i] * SECOND)
            watermark = max(watermark, moves[i])
        if max(r.start, 0) < watermark:  # (an occupancy without timing too: it is clipped)
            late[r.node] += 1
        clipped.append((r, watermark))
        acc.add(r.interval())
    until = 200
    acc.advance_to(ORIGIN + until * SECOND)
    snap = acc.snapshot()
    conc, mix, busy, slot_busy = brute_force(clipped, until)
    assert list(snap.concurrency_us) == conc
    assert {k: v for k, v in snap.mix_us.items() if v} == mix
    assert [n.busy_us for n in snap.nodes] == busy
    assert [n.slot_busy_us for n in snap.nodes] == slot_busy
    assert [n.late for n in snap.nodes] == late
    assert [
        sum(c.requests for c in n.kinds.values()) + sum(k for k, _ in n.untimed.values())
        for n in snap.nodes
    ] == [sum(1 for r in reqs if r.node == i) for i in range(len(NODES))]


def test_every_series_exists_from_start() -> None:
    acc = Accounting(NODES, KINDS, origin_us=ORIGIN)
    snap = acc.snapshot()
    assert set(snap.mix_us) == {"idle", "extraction", "reconcile", "extraction+reconcile"}
    assert all(set(n.kinds) == {"extraction", "reconcile"} for n in snap.nodes)
    assert len(snap.concurrency_us) == len(NODES) + 1


def test_histogram_buckets_are_le() -> None:
    acc = Accounting(["n"], KINDS, origin_us=ORIGIN, buckets_s=(1.0, 2.0))
    for ms in (500, 1000, 1001, 2000, 2500):
        acc.add(Interval("n", ORIGIN, ORIGIN + ms * 1000, 10))
    assert acc.snapshot().nodes[0].kinds["reconcile"].buckets == [2, 2, 1]


def test_unknown_tokens_take_first_rule_that_needs_none() -> None:
    assert KINDS.classify(None) == "reconcile"
    strict = Kinds((KindRule("big", min_tokens=600), KindRule("small", max_tokens=599)))
    assert strict.classify(None) == "unknown"
    assert strict.names == ("big", "small", "unknown")
    assert len(strict.mix_labels()) == 8


# -- the watermark -------------------------------------------------------------------------

S = SECOND


def started(node: str, t: int, slot: int, task: int) -> Event:
    return Event(node, t, EventKind.STARTED, 1, slot, task)


@pytest.mark.parametrize(
    ("setup", "now", "expected"),
    [
        # no start lines: newest journal time read minus max_request_seconds
        (lambda a: a.line_read("n", ORIGIN + 700 * S), 0, ORIGIN + 100 * S),
        # start lines, nothing in flight: the newest journal time read
        (
            lambda a: (
                a.add(started("n", ORIGIN + 5 * S, 0, 1)),
                a.add(Interval("n", ORIGIN + 5 * S, ORIGIN + 9 * S, 1, slot=0, task=1)),
                a.line_read("n", ORIGIN + 9 * S),
            ),
            0,
            ORIGIN + 9 * S,
        ),
        # start lines, in flight: its start minus the 1 s margin
        (
            lambda a: (a.add(started("n", ORIGIN + 5 * S, 0, 1)), a.line_read("n", ORIGIN + 9 * S)),
            0,
            ORIGIN + 4 * S,
        ),
        # in flight for longer than max_request_seconds: it stops holding the watermark
        (
            lambda a: (
                a.add(started("n", ORIGIN + 5 * S, 0, 1)),
                a.line_read("n", ORIGIN + 900 * S),
            ),
            0,
            ORIGIN + 300 * S,
        ),
        # caught up and connected: now - 2 s, even with nothing read
        (
            lambda a: (
                a.add(started("n", ORIGIN + 5 * S, 0, 1)),
                a.add(Interval("n", ORIGIN + 5 * S, ORIGIN + 9 * S, 1, slot=0, task=1)),
                a.source_state("n", up=True, caught_up=True, now_us=ORIGIN + 60 * S),
            ),
            ORIGIN + 60 * S,
            ORIGIN + 58 * S,
        ),
        # connected but catching up: stays at the newest journal time read
        (
            lambda a: (
                a.add(started("n", ORIGIN + 5 * S, 0, 1)),
                a.add(Interval("n", ORIGIN + 5 * S, ORIGIN + 9 * S, 1, slot=0, task=1)),
                a.line_read("n", ORIGIN + 9 * S),
                a.source_state("n", up=True, caught_up=False, now_us=ORIGIN + 60 * S),
            ),
            ORIGIN + 60 * S,
            ORIGIN + 9 * S,
        ),
        # a restart forgets that this server logs start lines
        (
            lambda a: (
                a.add(started("n", ORIGIN + 5 * S, 0, 1)),
                a.line_read("n", ORIGIN + 700 * S),
                a.add(Event("n", ORIGIN + 700 * S, EventKind.RESTART, 2)),
            ),
            0,
            ORIGIN + 100 * S,
        ),
    ],
)
def test_node_bound(setup: object, now: int, expected: int) -> None:
    acc = Accounting(["n"], KINDS, origin_us=ORIGIN, max_request_us=600 * S)
    setup(acc)  # type: ignore[operator]
    assert acc.node_bound("n", now) == expected


def test_watermark_is_least_bound_and_never_goes_back() -> None:
    acc = Accounting(["a", "b"], KINDS, origin_us=ORIGIN, max_request_us=10 * S)
    acc.line_read("a", ORIGIN + 100 * S)
    acc.line_read("b", ORIGIN + 50 * S)
    acc.advance(ORIGIN + 100 * S)
    assert acc.watermark_us == ORIGIN + 40 * S
    acc.source_state("b", up=False, caught_up=False, now_us=ORIGIN + 100 * S)
    acc.advance(ORIGIN + 100 * S)
    assert acc.watermark_us == ORIGIN + 40 * S  # a disconnected node holds it ...
    acc.advance(ORIGIN + 401 * S)
    assert acc.watermark_us == ORIGIN + 90 * S  # ... until it has been down stall_seconds
    acc.source_state("b", up=True, caught_up=False, now_us=ORIGIN + 402 * S)
    acc.advance(ORIGIN + 402 * S)
    assert acc.watermark_us == ORIGIN + 90 * S  # back and behind: it never goes back
    acc.add(Interval("b", ORIGIN + 60 * S, ORIGIN + 95 * S, 700))
    snap = acc.snapshot()
    assert snap.nodes[1].late == 1
    assert snap.nodes[1].kinds["extraction"].requests == 1


def test_events_in_flight_cancel_restart_errors() -> None:
    acc = Accounting(["n"], KINDS, origin_us=ORIGIN)
    acc.add(started("n", ORIGIN + 1 * S, 0, 1))
    acc.add(started("n", ORIGIN + 2 * S, 1, 2))
    acc.add(started("n", ORIGIN + 3 * S, 2, 3))
    snap = acc.snapshot()
    assert (snap.nodes[0].in_flight, snap.nodes[0].oldest_in_flight_us) == (3, ORIGIN + 1 * S)
    assert snap.nodes_busy == 1
    # (0, 1) was cancelled: an occupancy from its launch to its release
    acc.add(
        Interval("n", ORIGIN + 1 * S, ORIGIN + 4 * S, slot=0, task=1, pid=1, reason="cancelled")
    )
    acc.add(Interval("n", ORIGIN + 2 * S, ORIGIN + 5 * S, 10, slot=1, task=2))
    acc.add(Event("n", ORIGIN + 6 * S, EventKind.PARSE_ERROR, 1))
    snap = acc.snapshot()
    assert (snap.nodes[0].in_flight, snap.nodes[0].oldest_in_flight_us) == (1, ORIGIN + 3 * S)
    acc.add(Event("n", ORIGIN + 7 * S, EventKind.RESTART, 2))
    n = acc.snapshot().nodes[0]  # (the old server's request may still end: it has not gone)
    cancelled = n.untimed["cancelled"]
    assert (n.in_flight, cancelled, n.aborted, n.restarts, n.parse_errors) == (
        1,
        (1, 3 * S),
        0,
        1,
        1,
    )
    acc.add(Event("n", ORIGIN + 17 * S, EventKind.ABORTED, 1, 2, 3))  # it has
    n = acc.snapshot().nodes[0]
    assert (n.in_flight, n.untimed["cancelled"], n.aborted, n.restarts, n.parse_errors) == (
        0,
        (1, 3 * S),
        1,
        1,
        1,
    )
    assert n.oldest_in_flight_us is None
    assert n.last_end_us == ORIGIN + 5 * S
    assert sum(c.requests for c in n.kinds.values()) == 1  # (the cancel is of no kind)
    assert acc.snapshot().nodes_busy == 0


def test_untimed_occupancies_are_busy_of_no_kind_by_their_reason() -> None:
    acc = Accounting(["n", "m"], KINDS, origin_us=ORIGIN)
    for slot, (reason, start, end) in enumerate(
        [("cancelled", 1, 4), ("error", 2, 3), ("untimed", 10, 12), ("untimed", 11, 15)]
    ):
        acc.add(started("n", ORIGIN + start * S, slot, slot))
        acc.add(
            Interval("n", ORIGIN + start * S, ORIGIN + end * S, slot=slot, task=slot, reason=reason)
        )
    acc.add(started("n", ORIGIN + 20 * S, 0, 9))
    acc.add(Event("n", ORIGIN + 21 * S, EventKind.LOST, 1, 0, 9))  # its end never came
    acc.add(Interval("m", ORIGIN + 3 * S, ORIGIN + 13 * S, 700))  # a timed extraction
    acc.advance_to(ORIGIN + 30 * S)
    snap = acc.snapshot()
    n, m = snap.nodes
    assert n.in_flight == 0
    assert n.untimed == {
        "cancelled": (1, 3 * S),
        "error": (1, 1 * S),
        "untimed": (2, 6 * S),
        "lost": (1, 0),
    }
    assert all(c.requests == 0 for c in n.kinds.values())
    assert n.busy_us == (4 - 1 + 15 - 10) * S  # the union of its occupancies
    assert n.slot_busy_us == (3 + 1 + 2 + 4) * S  # their sum
    assert (m.busy_us, m.slot_busy_us) == (10 * S, 10 * S)
    assert n.last_end_us == ORIGIN + 15 * S
    # two nodes busy while both are, but the mix has only the timed extraction
    assert list(snap.concurrency_us) == [16 * S, 10 * S, 4 * S]
    assert {k: v for k, v in snap.mix_us.items() if v} == {
        "idle": 20 * S,
        "extraction": 10 * S,
    }
