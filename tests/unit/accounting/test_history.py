"""The history's samples and the idle rule, against brute force over second-long cells.

Requests are whole seconds on a grid; busy seconds, the shares and the idle condition are
counted cell by cell here, not with the exporter's sweep.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting import idle
from exporter.accounting.accounting import Accounting
from exporter.accounting.history import History
from exporter.base.records import Interval
from exporter.base.times import SECOND

from support.settings import default_settings
from support.tools import examples

T0 = 1_790_000_000 * SECOND  # (a multiple of the bin)
NODES = ("a", "b", "c", "d")


def accounting(bin_s: int = 10, span_s: int = 3600) -> Accounting:
    acc = Accounting(NODES, default_settings(), origin_us=T0)
    acc.history = History(NODES, bin_s * SECOND, span_s * SECOND)
    for n in NODES:
        acc.source_state(n, up=True, caught_up=True, now_us=T0)
    return acc


def busy_cells(reqs: list[tuple[int, int, int]], node: int, lo: int, hi: int) -> int:
    """Seconds in [lo, hi) during which `node` had a request (brute force)."""
    return sum(1 for t in range(lo, hi) if any(n == node and s <= t < e for n, s, e in reqs))


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 170), st.integers(1, 40)), max_size=25),
    st.lists(st.integers(1, 60), min_size=1, max_size=8),
)
def test_samples_hold_each_nodes_busy_seconds_at_each_bin(
    raw: list[tuple[int, int, int]], steps: list[int]
) -> None:
    reqs = [(n, s, s + d) for n, s, d in raw]
    acc = accounting()
    acc.add_all([Interval(NODES[n], T0 + s * SECOND, T0 + e * SECOND, 700) for n, s, e in reqs])
    t = 0
    for step in steps:  # the watermark moved in steps that do not fall on the bins
        t += step
        acc.advance_to(T0 + t * SECOND)
    history = acc.history
    assert history is not None
    times = [s.at_us for s in history.samples]
    assert times == [T0 + b * 10 * SECOND for b in range(1, t // 10 + 1)]
    for sample in history.samples:
        at = (sample.at_us - T0) // SECOND
        assert list(sample.busy_us) == [
            busy_cells(reqs, i, 0, at) * SECOND for i in range(len(NODES))
        ]
        assert sum(k * us for k, us in enumerate(sample.concurrency_us)) == sample.total_busy_us


def test_samples_change_no_figure() -> None:
    """A sweep cut at every bin gives the figures of one sweep, compiled and in Python."""
    rng = random.Random(5)
    ivs = []
    for _ in range(300):
        n = rng.choice(NODES)
        s = T0 + rng.randrange(0, 3000) * SECOND + rng.randrange(SECOND)
        ivs.append(Interval(n, s, s + rng.randrange(1, 90 * SECOND), rng.choice((5, 700))))
    plain = Accounting(NODES, default_settings(), origin_us=T0)
    sampled, reference = accounting(), accounting()
    for acc in (plain, sampled, reference):
        acc.add_all(ivs)
    for t in (777, 1500, 3100, 3333):
        plain.advance_to(T0 + t * SECOND)
        sampled.advance_to(T0 + t * SECOND)
        reference.advance_to_reference(T0 + t * SECOND)
    figures = [
        ([n.busy_us for n in a.nodes.values()], a.concurrency_us, a.mix_us, a.pending)
        for a in (plain, sampled, reference)
    ]
    assert figures[0] == figures[1] == figures[2]
    assert sampled.history is not None and reference.history is not None
    assert list(sampled.history.samples) == list(reference.history.samples)


def test_only_the_span_is_kept() -> None:
    acc = accounting(bin_s=10, span_s=120)
    acc.advance_to(T0 + 1000 * SECOND)  # (one jump: only the last span's samples)
    assert acc.history is not None
    assert [s.at_us - T0 for s in acc.history.samples] == [b * SECOND for b in range(880, 1001, 10)]


def idle_run(
    others_share: float, down: frozenset[str] = frozenset(), stopped: frozenset[str] = frozenset()
) -> Accounting:
    """30 minutes: `a` idle after minute 5; the others busy `others_share` of each minute;
    `down` nodes' journals not followed, `stopped` nodes' servers stopped."""
    acc = accounting()
    busy_s = round(60 * others_share)
    ivs = [Interval("a", T0, T0 + 300 * SECOND, 700)]
    for n in NODES[1:]:
        for m in range(30):
            if busy_s:
                s = T0 + m * 60 * SECOND
                ivs.append(Interval(n, s, s + busy_s * SECOND, 700))
    acc.add_all(ivs)
    for n in down:
        acc.source_state(n, up=False, caught_up=False, now_us=T0)
    for n in stopped:
        acc.nodes[n].server_up = 0
    acc.advance_to(T0 + 1800 * SECOND)
    return acc


def marked(acc: Accounting) -> list[str]:
    assert acc.history is not None and acc.history.latest is not None
    last = acc.history.latest
    return [
        n
        for n, since in zip(acc.history.nodes, last.idle_since_us, strict=True)
        if idle.firing(since, last.at_us)
    ]


def test_the_idle_node_is_marked_while_the_others_work() -> None:
    acc = idle_run(0.6)
    assert marked(acc) == ["a"]
    assert acc.history is not None
    last = acc.history.latest
    assert last is not None
    # its 5-minute share falls under 5% (15 s) once the window starts past 285 s: at the
    # sample of 590 s, the first after 585 s
    assert last.idle_since_us[0] == T0 + 590 * SECOND


def test_the_others_are_the_known_nodes() -> None:
    """Two of the others down or stopped: the third's 60% is the others' mean (the old rule
    divided by every node and found 20%)."""
    assert marked(idle_run(0.6, down=frozenset({"b", "c"}))) == ["a"]
    assert marked(idle_run(0.6, stopped=frozenset({"b", "c"}))) == ["a"]
    assert marked(idle_run(0.4)) == []  # (others under half busy)
    assert marked(idle_run(0.6, stopped=frozenset({"a"}))) == []  # (a stopped server is not idle)
    assert marked(idle_run(0.6, down=frozenset({"a"}))) == []
    assert marked(idle_run(0.6, down=frozenset({"b", "c", "d"}))) == []  # (no known other)


def test_the_mark_waits_for_the_whole_for() -> None:
    acc = accounting()
    acc.add_all([Interval("a", T0, T0 + 300 * SECOND, 700)])
    acc.add_all([Interval(n, T0, T0 + 1800 * SECOND, 700) for n in NODES[1:]])
    acc.advance_to(T0 + (590 + 590) * SECOND)  # the condition holds from 590 s: 590 s
    assert marked(acc) == []
    acc.advance_to(T0 + (590 + 600) * SECOND)
    assert marked(acc) == ["a"]


def test_a_backlog_older_than_the_span_takes_no_samples() -> None:
    """A daemon reading days of backlog samples only the last span before now."""
    acc = accounting(bin_s=10, span_s=120)
    acc.now_us = T0 + 86400 * SECOND  # (now, as the daemon's latest `advance` said)
    for t in range(600, 86400 + 1, 600):  # the backlog read in steps of ten minutes
        acc.advance_to(T0 + t * SECOND)
    assert acc.history is not None
    assert [s.at_us - T0 for s in acc.history.samples] == [
        b * SECOND for b in range(86280, 86401, 10)
    ]
