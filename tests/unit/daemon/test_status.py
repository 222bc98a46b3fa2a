"""exporter.daemon.status: systemd's STATUS= line from a snapshot."""

from __future__ import annotations

from exporter.accounting.accounting import Accounting
from exporter.base.records import Interval
from exporter.base.times import SECOND, parse_time_us
from exporter.config.schema import Config
from exporter.daemon.status import status_line
from exporter.ingest.settings import settings

T0 = 1_790_000_000_000_000


def test_the_line_counts_sources_up_busy_nodes_requests_and_the_watermark() -> None:
    acc = Accounting(["a", "b", "c"], settings(Config()), origin_us=T0)
    acc.add(Interval("a", T0, T0 + SECOND, 700, slot=0, task=1))
    acc.add(Interval("b", T0, T0 + SECOND, 10, slot=0, task=2))
    for node in ("a", "b"):
        acc.source_state(node, up=True, caught_up=True, now_us=T0)
    assert status_line(acc.snapshot()) == (
        "2/3 sources up, 0 nodes busy, 2 requests, accounted until 2026-09-21T14:13:20+00:00"
    )
    assert acc.watermark_us == T0 == parse_time_us("2026-09-21T14:13:20Z")
