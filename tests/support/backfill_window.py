"""The backfill tests' window: three nodes of two slots over five hours, as their journals say."""

from __future__ import annotations

import random

from exporter.base.records import LogLine
from exporter.base.times import SECOND

from support.workload import generate, journal

SINCE = 1_790_000_000 * SECOND
UNTIL = SINCE + 5 * 3600 * SECOND  # (three blocks of promtool's two hours)
STEP = 15 * SECOND
NODES = ("a", "b", "c")
QUIET = 15 * 60 * SECOND


def lines_of() -> dict[str, list[LogLine]]:
    """Three nodes of two slots with launch lines, cancels and errors; node b restarts (a new
    PID) half-way; the last QUIET of the window idle (so that the watermark reaches until)."""
    reqs = [
        r
        for r in generate(random.Random(18), NODES, SINCE, UNTIL, slots=2, gap_s=30)
        if r.start_us < UNTIL - QUIET
    ]
    out = {n: journal(n, [r for r in reqs if r.node == n]) for n in NODES}
    half = SINCE + (UNTIL - SINCE) // 2
    out["b"] = [ln._replace(pid=4343) if ln.time_us >= half else ln for ln in out["b"]]
    # what a source reads of the window: from since (and on past until, as report reads)
    return {n: [ln for ln in ls if ln.time_us >= SINCE] for n, ls in out.items()}
