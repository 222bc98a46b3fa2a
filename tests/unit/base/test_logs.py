"""The logs as an operator reads them: priorities under journald, ISO times elsewhere, quiet
libraries, and one line each when a node starts and stops holding the cluster figures back."""

from __future__ import annotations

from exporter.accounting.accounting import Accounting
from exporter.accounting.watermark import HOLD_US
from exporter.base import logs
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.times import SECOND, iso

from support.settings import default_settings


def test_priorities_of_every_level() -> None:
    assert [logs.priority(level) for level in (10, 15, 20, 30, 40, 50, 60)] == [7, 6, 6, 4, 3, 2, 2]


KINDS = Kinds(DEFAULT_RULES)


def test_the_node_that_holds_the_figures_back_says_what_for_and_until_when() -> None:
    now = 1_790_000_000 * SECOND
    acc = Accounting(
        ["a", "b"], default_settings(KINDS, stall_us=300 * SECOND), origin_us=now - 10 * 60 * SECOND
    )
    for node in ("a", "b"):
        acc.source_state(node, up=True, caught_up=True, now_us=now)
    acc.advance(now)
    assert acc.holder(now) is None  # (both caught up: the figures are at now - 2 s)
    acc.source_state("b", up=False, caught_up=False, now_us=now)
    acc.line_read("b", now - 2 * HOLD_US)  # (what it read last)
    later = now + SECOND
    holder = acc.holder(later)
    assert holder is not None and holder[:2] == ("b", "source down")
    assert iso(now + 300 * SECOND) in holder[2] and iso(now) in holder[2]
    # once it has been down longer than stall_seconds it holds nothing
    assert acc.holder(now + 301 * SECOND) is None
    acc.source_state("b", up=True, caught_up=True, now_us=later)
    assert acc.holder(later) is None
