"""exporter.accounting.lanes: the recent rings, the report window's exact and binned forms, and the
concurrency step function against brute force."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting.accounting import Accounting
from exporter.accounting.lanes import (
    OUTCOME_NAMES,
    OUTCOMES,
    RING_BUDGET,
    RING_MIN,
    RING_SIZE,
    Recent,
    Step,
    Window,
    binned_steps,
    concurrency,
    ring_size,
    union,
)
from exporter.base.kinds import Kinds, split_rules
from exporter.base.records import Event, EventKind, Interval
from exporter.base.times import SECOND

from support.settings import default_settings
from support.tools import examples

T0 = 1_790_000_000 * SECOND
KINDS = Kinds(split_rules(600))


def iv(node: str, start: int, end: int, reason: str = "", tokens: int | None = 100) -> Interval:
    return Interval(node, start, end, tokens if not reason else None, reason=reason)


# -- Recent ------------------------------------------------------------------------------------


def test_recent_keeps_the_last_size_intervals_of_each_known_node_in_order() -> None:
    recent = Recent(["a", "b"], size=3)
    a = [iv("a", T0 + i, T0 + i + 1) for i in range(5)]
    b = [iv("b", T0 + i, T0 + i + 2) for i in range(2)]
    recent.add_all([a[0], Event("a", T0, EventKind.STARTED, slot=0, task=1), b[0], *a[1:3]])
    recent.add_all([iv("zz", T0, T0 + 1), iv("a", T0, T0 + 9, "lost"), b[1], *a[3:]])
    got = recent.copy()
    assert got == {"a": tuple(a[2:]), "b": tuple(b)}
    recent.add_all([iv("a", T0 + 10, T0 + 11)])
    assert got["a"] == tuple(a[2:])  # a copy: later intervals do not change it
    assert recent.copy()["a"] == (a[3], a[4], iv("a", T0 + 10, T0 + 11))


def test_recent_keeps_no_interval_that_ended_before_since() -> None:
    """A backlog's intervals older than the pages' window are not kept: they would push the
    newest out of the ring, and the next copy would drop them (the end is what counts)."""
    recent = Recent(["a"], size=3)
    newest = [iv("a", T0 - 5, T0), iv("a", T0 + 1, T0 + 2)]
    recent.add_all([*newest, iv("a", T0 - 9, T0 - 1)], since_us=T0)
    recent.add_all([iv("a", T0 - 3, T0 - 2) for _ in range(5)], since_us=T0)
    assert recent.copy() == {"a": tuple(newest)}
    recent.add_all([iv("a", T0 - 3, T0 - 2)])  # (no since: every interval)
    assert recent.copy()["a"][-1] == iv("a", T0 - 3, T0 - 2)


def test_recent_keep_adds_new_nodes_drops_removed_and_keeps_the_rest() -> None:
    recent = Recent(["a", "b"], size=4)
    kept = [iv("a", T0, T0 + 1), iv("a", T0 + 2, T0 + 3)]
    recent.add_all([*kept, iv("b", T0, T0 + 1)])
    recent.keep(["c", "a"])
    assert recent.copy() == {"c": (), "a": tuple(kept)}
    recent.add_all([iv("b", T0, T0 + 1), iv("c", T0, T0 + 5)])
    assert recent.copy() == {"c": (iv("c", T0, T0 + 5),), "a": tuple(kept)}
    recent.add_all(iv("a", T0 + i, T0 + i) for i in range(10))
    assert len(recent.copy()["a"]) == 4  # (the kept ring keeps its bound)


def test_the_rings_of_a_large_fleet_share_a_bound_and_follow_its_size_at_reload() -> None:
    """A ring holds RING_SIZE intervals, fewer a node in a fleet so large that all would hold
    more than RING_BUDGET (but never fewer than RING_MIN); a reload that grows or shrinks the
    fleet sizes the rings again, keeping the newest."""
    assert ring_size(1) == ring_size(RING_BUDGET // RING_SIZE) == RING_SIZE
    assert ring_size(2000) == RING_BUDGET // 2000 < RING_SIZE
    assert ring_size(10**7) == RING_MIN
    many = [f"n{i}" for i in range(2000)]
    recent = Recent(many)
    assert recent.size == RING_BUDGET // 2000
    recent.add_all(iv("n0", T0 + i, T0 + i + 1) for i in range(RING_SIZE))
    assert len(recent.copy()["n0"]) == recent.size
    recent.keep(["n0", "n1"])  # (the fleet shrank: a ring keeps more again)
    assert recent.size == RING_SIZE
    recent.add_all(iv("n0", T0 + i, T0 + i + 1) for i in range(RING_SIZE, RING_SIZE + 10))
    assert len(recent.copy()["n0"]) == RING_BUDGET // 2000 + 10
    recent.keep(many)  # (and grew again: the newest kept)
    newest = recent.copy()["n0"]
    assert len(newest) == RING_BUDGET // 2000 and newest[-1].end_us == T0 + RING_SIZE + 10


def test_outcomes_name_every_reason_but_lost() -> None:
    assert OUTCOMES == {
        "": "timed",
        "cancelled": "cancelled",
        "error": "error",
        "untimed": "untimed",
    }
    assert set(OUTCOME_NAMES) == set(OUTCOMES.values())


# -- the step function ---------------------------------------------------------------------------

spans_st = st.lists(
    st.lists(st.tuples(st.integers(-5, 60), st.integers(-5, 60)), max_size=8), max_size=5
)


def brute_counts(per_node: list[list[tuple[int, int]]], lo: int, hi: int) -> list[int]:
    """Per unit [t, t + 1) of [lo, hi): how many nodes have a span covering it."""
    return [
        sum(1 for spans in per_node if any(s <= t < e for s, e in spans)) for t in range(lo, hi)
    ]


@settings(max_examples=examples(400), deadline=None)
@given(per_node=spans_st, lo=st.integers(-5, 30), width=st.integers(0, 40))
def test_concurrency_is_the_brute_force_count(
    per_node: list[list[tuple[int, int]]], lo: int, width: int
) -> None:
    hi = lo + width
    steps = concurrency(per_node, lo, hi)
    if hi <= lo:
        assert steps == []
        return
    assert steps[0].start_us == lo and steps[-1].end_us == hi
    assert all(a.end_us == b.start_us for a, b in itertools.pairwise(steps))
    assert all(a.nodes != b.nodes for a, b in itertools.pairwise(steps))
    assert all(s.start_us < s.end_us for s in steps)
    unrolled = [s.nodes for s in steps for _ in range(s.start_us, s.end_us)]
    assert unrolled == brute_counts(per_node, lo, hi)


@settings(max_examples=200, deadline=None)
@given(spans=spans_st.map(lambda p: [s for n in p for s in n]), lo=st.integers(-5, 30))
def test_union_is_the_covered_units(spans: list[tuple[int, int]], lo: int) -> None:
    hi = lo + 30
    merged = union(spans, lo, hi)
    assert all(s < e for s, e in merged)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(merged))  # apart, sorted
    covered = {t for s, e in merged for t in range(s, e)}
    assert covered == {t for s, e in spans for t in range(max(s, lo), min(e, hi))}


@settings(max_examples=200, deadline=None)
@given(per_node=spans_st, bins=st.integers(1, 12))
def test_binned_steps_are_each_bins_mean(per_node: list[list[tuple[int, int]]], bins: int) -> None:
    lo, hi = 0, 50
    w = Window(["x"], lo, hi, bins=bins)
    means = binned_steps(concurrency(per_node, lo, hi), w)
    counts = brute_counts(per_node, lo, hi)
    unrolled = [s.nodes for s in means for _ in range(s.start_us, s.end_us)]
    expect = [
        sum(counts[w.bin_start(b) : w.bin_end(b)]) / (w.bin_end(b) - w.bin_start(b))
        for b in range(w.bins)
        for _ in range(w.bin_start(b), w.bin_end(b))
    ]
    assert unrolled == expect


# -- Window ---------------------------------------------------------------------------------------


def test_window_takes_what_the_report_draws() -> None:
    since, until = T0, T0 + 100 * SECOND
    w = Window(["a"], since, until, bins=10)
    inside = iv("a", since + 5 * SECOND, since + 7 * SECOND)
    from_before = iv("a", since - 5 * SECOND, since + 1 * SECOND, "cancelled")
    at_since = iv("a", since - 2 * SECOND, since)  # (the report counts it: its end is inside)
    past_end = iv("a", until - SECOND, until + 9 * SECOND, "error")
    ignored = [
        iv("a", since - 9 * SECOND, since - 1),  # ends before
        iv("a", until, until + SECOND),  # starts at the end
        iv("a", until + 1, until + 2),
        iv("b", since + 1, since + 2),  # a node it does not know
        iv("a", since + 1, since + 2, "lost"),
    ]
    w.add_all([inside, Event("a", since, EventKind.STARTED), from_before, at_since, *ignored])
    w.add(past_end)
    assert w.kept() == {"a": [inside, from_before, at_since, past_end]}
    assert w.intervals == 4 and not w.binned
    lane = w.lanes["a"]
    assert w.requests() == 3  # past_end is drawn, not counted
    assert lane.ended["timed"][0] == 2 and lane.ended["cancelled"][0] == 1
    assert sum(lane.ended["error"]) == 0
    assert lane.occupancy_us[0] == 3 * SECOND  # 2 s + the 1 s inside of from_before
    assert lane.occupancy_us[9] == SECOND  # past_end, clipped


def random_intervals(
    rng: random.Random, nodes: list[str], since: int, until: int, n: int
) -> list[Interval]:
    reasons = ["", "", "", "cancelled", "error", "untimed"]
    span = until - since
    out = []
    for _ in range(n):
        s = since - span // 10 + rng.randrange(span + span // 5)
        out.append(iv(rng.choice(nodes), s, s + rng.randrange(span // 20), rng.choice(reasons)))
    return out


def clipped_in_bin(w: Window, ivs: list[Interval], node: str, b: int) -> int:
    lo, hi = w.bin_start(b), w.bin_end(b)
    return sum(max(0, min(i.end_us, hi) - max(i.start_us, lo)) for i in ivs if i.node == node)


def test_window_binned_agrees_with_exact_and_drops_the_intervals() -> None:
    rng = random.Random(7)
    nodes = ["a", "b", "c"]
    since, until = T0, T0 + 7 * 86400 * SECOND
    ivs = random_intervals(rng, nodes, since, until, 3000)
    exact = Window(nodes, since, until, max_rects=len(ivs), bins=50)
    binned = Window(nodes, since, until, max_rects=500, bins=50)
    for i in range(0, len(ivs), 97):  # in batches, as the Builder hands them over
        exact.add_all(ivs[i : i + 97])
        binned.add_all(ivs[i : i + 97])
    belongs = [i for i in ivs if since <= i.end_us <= until or i.start_us < until < i.end_us]
    assert not exact.binned and binned.binned
    assert exact.intervals == binned.intervals == len(belongs)
    assert [i for n in nodes for i in exact.kept()[n]] == sorted(
        belongs, key=lambda i: nodes.index(i.node)
    )
    assert binned.kept() == {n: [] for n in nodes}  # the exact list is dropped
    counted = [i for i in ivs if since <= i.end_us <= until]
    assert exact.requests() == binned.requests() == len(counted)
    for n in nodes:
        e, b = exact.lanes[n], binned.lanes[n]
        assert e.occupancy_us == b.occupancy_us and e.busy_us == b.busy_us and e.ended == b.ended
        assert e.occupancy_us == [clipped_in_bin(exact, belongs, n, k) for k in range(exact.bins)]
        for outcome in OUTCOME_NAMES:
            assert sum(b.ended[outcome]) == sum(
                1 for i in counted if i.node == n and OUTCOMES[i.reason] == outcome
            )
    # binned for good: more intervals keep nothing exact
    binned.add_all(random_intervals(rng, nodes, since, until, 100))
    assert binned.kept() == {n: [] for n in nodes}
    assert all(len(lane.occupancy_us) == binned.bins == 50 for lane in binned.lanes.values())


@settings(max_examples=150, deadline=None)
@given(
    per_node=st.lists(
        st.lists(st.tuples(st.integers(-20, 220), st.integers(0, 60)), max_size=12),
        min_size=1,
        max_size=3,
    ),
    bins=st.integers(1, 9),
    order=st.sampled_from(["start", "end", "shuffled"]),
    seed=st.integers(0, 99),
)
def test_window_busy_is_the_union_in_start_order_and_a_lower_bound_else(
    per_node: list[list[tuple[int, int]]], bins: int, order: str, seed: int
) -> None:
    since, until = 0, 200
    nodes = [f"n{i}" for i in range(len(per_node))]
    ivs = [iv(n, s, s + d) for n, spans in zip(nodes, per_node, strict=True) for s, d in spans]
    if order == "start":
        ivs.sort(key=lambda i: (i.start_us, i.end_us))
    elif order == "end":
        ivs.sort(key=lambda i: i.end_us)
    else:
        random.Random(seed).shuffle(ivs)
    w = Window(nodes, since, until, max_rects=0, bins=bins)  # (binned at once)
    w.add_all(ivs)
    for n in nodes:
        mine = [(i.start_us, i.end_us) for i in ivs if i.node == n]
        for b in range(w.bins):
            lo, hi = w.bin_start(b), w.bin_end(b)
            covered = sum(e - s for s, e in union(mine, lo, hi))
            busy = w.lanes[n].busy_us[b]
            assert busy <= covered <= w.lanes[n].occupancy_us[b]
            if order == "start":
                assert busy == covered
    means = w.concurrency()
    assert means[0].start_us == since and means[-1].end_us == until
    for s in means:
        assert 0 <= s.nodes <= len(nodes)


def test_window_busy_matches_the_accounting_for_one_slot_nodes_in_end_order() -> None:
    """One request at a time per node (the seed's data), handed over as the parser does (by
    end): the binned busy seconds are the accounting's busy seconds, and the binned
    concurrency's mean is its node-seconds."""
    rng = random.Random(3)
    nodes = ["a", "b", "c", "d"]
    since, until = T0, T0 + 86400 * SECOND
    ivs = []
    for n in nodes:
        t = since - 300 * SECOND
        while t < until + 300 * SECOND:
            d = rng.randrange(SECOND, 120 * SECOND)
            ivs.append(iv(n, t, t + d, rng.choice(["", "", "cancelled"])))
            t += d + rng.randrange(0, 200 * SECOND)
    ivs.sort(key=lambda i: i.end_us)
    w = Window(nodes, since, until, max_rects=100)
    w.add_all(ivs)
    acc = Accounting(nodes, default_settings(KINDS), origin_us=since)
    for i in ivs:
        if i.start_us < until:
            acc.add(i, count=since <= i.end_us <= until)
    acc.advance_to(until)
    snap = acc.snapshot()
    assert w.binned
    assert [sum(w.lanes[n].busy_us) for n in nodes] == [n.busy_us for n in snap.nodes]
    node_us = sum(s.nodes * (s.end_us - s.start_us) for s in w.concurrency())
    assert abs(node_us - sum(n.busy_us for n in snap.nodes)) < 1
    assert sum(k * us for k, us in enumerate(snap.concurrency_us)) == sum(
        n.busy_us for n in snap.nodes
    )


def test_window_exact_concurrency_is_the_step_function_of_its_intervals() -> None:
    since, until = T0, T0 + 1000
    ivs = [iv("a", T0 + 10, T0 + 50), iv("a", T0 + 40, T0 + 60), iv("b", T0 - 5, T0 + 45)]
    w = Window(["a", "b"], since, until)
    w.add_all(ivs)
    assert w.concurrency() == [
        Step(T0, T0 + 10, 1),
        Step(T0 + 10, T0 + 45, 2),
        Step(T0 + 45, T0 + 60, 1),
        Step(T0 + 60, until, 0),
    ]


def test_an_empty_window() -> None:
    w = Window(["a"], T0, T0)
    w.add_all([iv("a", T0 - 5, T0), iv("a", T0, T0)])
    assert w.requests() == 2 and w.concurrency() == []
    binned = Window(["a"], T0, T0, max_rects=0)
    binned.add_all([iv("a", T0 - 5, T0)])
    assert binned.binned and binned.requests() == 1 and binned.concurrency() == []


def test_a_ring_copy_drops_what_is_older_than_asked_and_reuses_an_unchanged_one() -> None:
    recent = Recent(["a", "b"], size=5)
    recent.add_all([Interval("a", t, t + 10) for t in range(0, 100, 10)])
    first = recent.copy()
    assert [iv.start_us for iv in first["a"]] == [50, 60, 70, 80, 90] and first["b"] == ()
    again = recent.copy()
    assert again["a"] is first["a"] and again["b"] is first["b"]  # (nothing new: no copy)
    pruned = recent.copy(since_us=75)  # ends at 75 or later: 70..80 on
    assert [iv.start_us for iv in pruned["a"]] == [70, 80, 90]
    assert len(recent.rings["a"]) == 3  # dropped from the ring itself (memory)
    recent.add_all([Interval("a", 100, 110)])
    newer = recent.copy()
    assert newer["a"] is not pruned["a"] and newer["a"][-1].start_us == 100
