"""Accounting: every figure against a brute-force reference, and the watermark's rules."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import REASONS, Interval
from exporter.base.times import SECOND

from support.settings import default_settings
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
    acc = Accounting(
        NODES, default_settings(KINDS, max_request_us=MAX_REQ_CELLS * SECOND), origin_us=ORIGIN
    )
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
    acc = Accounting(NODES, default_settings(KINDS), origin_us=ORIGIN)
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
    acc = Accounting(NODES, default_settings(KINDS), origin_us=ORIGIN)
    snap = acc.snapshot()
    assert set(snap.mix_us) == {"idle", "extraction", "reconcile", "extraction+reconcile"}
    assert all(set(n.kinds) == {"extraction", "reconcile"} for n in snap.nodes)
    assert len(snap.concurrency_us) == len(NODES) + 1
