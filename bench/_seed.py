"""The seed's timeline.py figures, by its own 0.5 s sampling loop, for bench/report.py to time.

Its reading of the `total time` lines (its regex, its datetime parsing) and its figures, by the
sampling loop that checks every request at every step.

Only the figures are made here (requests, busy time, concurrency and kind shares, the kinds'
sums and upper-middle medians), not the seed's printed table; the sampling loop, which is
where its time goes, is the seed's own (`r[0] <= t < r[1]`, the histogram capped at 3).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

LINE = re.compile(r"^(\S+)\s.*total time =\s+([\d.]+) ms /\s+(\d+) tokens")
STEP_S = 0.5  # the seed's sampling step
CAP = 3  # the seed's histogram: 0, 1, 2, 3 or more requests at once
PROGRESS_EVERY = 0x2000  # steps between two calls of the progress callback
Request = tuple[float, float, int]  # (start, end, tokens), as the seed's fetch() returns
Progress = Callable[[float, float], None]  # (seconds of the window sampled, the window's)


def window(since: str, until: str) -> tuple[float, float]:
    """The seed's t0 and t1 for its --since and --until (UTC, as it reads them)."""
    t0 = datetime.fromisoformat(since + "+00:00").timestamp()
    return t0, datetime.fromisoformat(until + "+00:00").timestamp()


def fetch(dump: str) -> list[Request]:
    """The seed's requests from the text of a short-iso-precise dump (its `| grep 'total
    time'`, its regex, its timestamps)."""
    out: list[Request] = []
    for line in dump.splitlines():
        m = LINE.match(line) if "total time" in line else None
        if m:
            end = datetime.fromisoformat(m.group(1).replace("+0000", "+00:00")).timestamp()
            out.append((end - float(m.group(2)) / 1000.0, end, int(m.group(3))))
    return out


def median(reqs: list[Request]) -> float | None:
    """The seed's median duration (the upper middle), None where it has none."""
    return sorted(e - s for s, e, _ in reqs)[len(reqs) // 2] if reqs else None


@dataclass
class Figures:
    """What the seed computes of a window."""

    requests: dict[str, tuple[int, int, int]]  # node -> (all, extraction, reconcile)
    busy: dict[str, float]  # node -> the sum of its durations
    hist: list[float]  # seconds with k requests running, k capped at CAP
    kinds: dict[str, float]  # extract-only, reconcile-only, mixed: seconds
    ext: list[Request]
    rec: list[Request]
    ext_s: float
    rec_s: float


def figures(
    nodes: Mapping[str, list[Request]],
    t0: float,
    t1: float,
    split_tokens: int,
    progress: Progress | None = None,
) -> Figures:
    """The seed's figures of [t0, t1); `progress` is told now and then how far the sampling
    is (the loop is quadratic)."""
    hist = [0.0] * (CAP + 1)
    kinds = {"extract-only": 0.0, "reconcile-only": 0.0, "mixed": 0.0}
    t, steps = t0, 0
    while t < t1:
        active = [r for reqs in nodes.values() for r in reqs if r[0] <= t < r[1]]
        hist[min(len(active), CAP)] += STEP_S
        if active:
            ext_on = any(r[2] >= split_tokens for r in active)
            rec_on = any(r[2] < split_tokens for r in active)
            share = "mixed" if ext_on and rec_on else "extract-only" if ext_on else "reconcile-only"
            kinds[share] += STEP_S
        t += STEP_S
        steps += 1
        if progress is not None and not steps % PROGRESS_EVERY:
            progress(t - t0, t1 - t0)
    every = [r for reqs in nodes.values() for r in reqs]
    ext = [r for r in every if r[2] >= split_tokens]
    rec = [r for r in every if r[2] < split_tokens]
    return Figures(
        requests={
            n: (
                len(rs),
                sum(r[2] >= split_tokens for r in rs),
                sum(r[2] < split_tokens for r in rs),
            )
            for n, rs in nodes.items()
        },
        busy={n: sum(e - s for s, e, _ in rs) for n, rs in nodes.items()},
        hist=hist,
        kinds=kinds,
        ext=ext,
        rec=rec,
        ext_s=sum(e - s for s, e, _ in ext),
        rec_s=sum(e - s for s, e, _ in rec),
    )
