"""exporter.accounting.intake: what each record does: kinds, buckets, in flight, untimed."""

from __future__ import annotations

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds
from exporter.base.records import Event, EventKind, Interval
from exporter.base.times import SECOND

from support.settings import default_settings

KINDS = Kinds(DEFAULT_RULES)
ORIGIN = 1_790_000_000 * SECOND
S = SECOND


def started(node: str, t: int, slot: int, task: int) -> Event:
    return Event(node, t, EventKind.STARTED, 1, slot, task)


def test_histogram_buckets_are_le() -> None:
    acc = Accounting(["n"], default_settings(KINDS, buckets_s=(1.0, 2.0)), origin_us=ORIGIN)
    for ms in (500, 1000, 1001, 2000, 2500):
        acc.add(Interval("n", ORIGIN, ORIGIN + ms * 1000, 10))
    assert acc.snapshot().nodes[0].kinds["reconcile"].buckets == [2, 2, 1]


def test_unknown_tokens_take_first_rule_that_needs_none() -> None:
    assert KINDS.classify(None) == "reconcile"
    strict = Kinds((KindRule("big", min_tokens=600), KindRule("small", max_tokens=599)))
    assert strict.classify(None) == "unknown"
    assert strict.names == ("big", "small", "unknown")
    assert len(strict.mix_labels()) == 8


def test_events_in_flight_cancel_restart_errors() -> None:
    acc = Accounting(["n"], default_settings(KINDS), origin_us=ORIGIN)
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
    acc = Accounting(["n", "m"], default_settings(KINDS), origin_us=ORIGIN)
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
