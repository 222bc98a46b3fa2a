"""exporter.accounting.watermark: each node's bound, the least of them, stalls and late requests."""

from __future__ import annotations

import pytest

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Event, EventKind, Interval
from exporter.base.times import SECOND

from support.settings import default_settings

KINDS = Kinds(DEFAULT_RULES)
ORIGIN = 1_790_000_000 * SECOND
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
    acc = Accounting(["n"], default_settings(KINDS, max_request_us=600 * S), origin_us=ORIGIN)
    setup(acc)  # type: ignore[operator]
    assert acc.node_bound("n", now) == expected


def test_watermark_is_least_bound_and_never_goes_back() -> None:
    acc = Accounting(["a", "b"], default_settings(KINDS, max_request_us=10 * S), origin_us=ORIGIN)
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
