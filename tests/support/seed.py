"""The seed's timeline.py (shared/seeds/000_ea0a9e426640964a.txt), ported: what `report` must
reproduce, line for line.

The port keeps the seed's arithmetic verbatim: its regex and timestamp handling, its f-strings,
its 0.5 s sampling loop with `r[0] <= t < r[1]`, its histogram capped at 3, its summed
durations and upper-middle medians. Only its `fetch()` (ssh, journalctl, grep) becomes
`seed_fetch` over a dump's text, keeping the entries `journalctl --since --until` would give;
and where the seed dies (the median of no extraction call: IndexError) the port notes it and
carries on, to learn what the seed would print next had it skipped that line.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

SEED_LINE = re.compile(r"^(\S+)\s.*total time =\s+([\d.]+) ms /\s+(\d+) tokens")
SeedRequest = tuple[float, float, int]  # (start, end, tokens), as the seed's fetch() returns
Progress = Callable[[float, float], None]  # (seconds of the window sampled, the window's)


def seed_window(since: str, until: str) -> tuple[float, float]:
    """The seed's t0 and t1 for its --since and --until (UTC, as it reads them)."""
    t0 = datetime.fromisoformat(since + "+00:00").timestamp()
    t1 = datetime.fromisoformat(until + "+00:00").timestamp()
    return t0, t1


def seed_fetch(dump: str, since: str | None = None, until: str | None = None) -> list[SeedRequest]:
    """The seed's fetch() on the text of a short-iso-precise dump instead of `ssh node
    journalctl ... | grep 'total time'`; with `since` and `until`, only the entries that
    `journalctl --since --until` gives."""
    window = seed_window(since, until) if since is not None and until is not None else None
    out: list[SeedRequest] = []
    for line in dump.splitlines():
        if "total time" not in line:  # | grep 'total time'
            continue
        m = SEED_LINE.match(line)
        if not m:
            continue
        end = datetime.fromisoformat(m.group(1).replace("+0000", "+00:00"))
        if window is not None and not window[0] <= end.timestamp() <= window[1]:
            continue
        dur = float(m.group(2)) / 1000.0
        out.append((end.timestamp() - dur, end.timestamp(), int(m.group(3))))
    return out


@dataclass
class SeedRun:
    """What the seed prints, and the numbers it prints them from."""

    lines: list[str]  # what it prints, up to its crash if it crashes
    crashed: bool  # IndexError on the median of no extraction calls
    after_crash: list[str]  # what it would print next, had it skipped the extraction line
    nodes: dict[str, list[SeedRequest]]
    wall: float
    requests: dict[str, tuple[int, int, int]]  # node -> (all, extraction, reconcile)
    busy: dict[str, float]  # node -> the sum of its durations
    hist: list[float]  # seconds with k requests running, k capped at 3
    kinds: dict[str, float]  # extract-only, reconcile-only, mixed
    ext: list[SeedRequest]
    rec: list[SeedRequest]
    ext_s: float
    rec_s: float
    ideal: float


def seed_median(reqs: list[SeedRequest]) -> float | None:
    """The seed's median duration (the upper middle), None where it has none."""
    return sorted(e - s for s, e, _ in reqs)[len(reqs) // 2] if reqs else None


def seed_timeline(
    nodes: Mapping[str, list[SeedRequest]],
    t0: float,
    t1: float,
    split_tokens: int = 600,
    progress: Progress | None = None,
) -> SeedRun:
    """The seed's main() after fetch(), statement for statement, printing into a buffer;
    `progress` is told now and then how far the sampling loop is (it is quadratic)."""
    out = io.StringIO()
    wall = t1 - t0
    requests: dict[str, tuple[int, int, int]] = {}

    print(f"window {wall / 60:.1f} min\n", file=out)
    print("  node    requests  extract  reconcile  busy time   busy %", file=out)
    busy_by_node: dict[str, float] = {}
    for name, reqs in nodes.items():
        ext = [r for r in reqs if r[2] >= split_tokens]
        rec = [r for r in reqs if r[2] < split_tokens]
        busy = sum(e - s for s, e, _ in reqs)
        busy_by_node[name] = busy
        requests[name] = (len(reqs), len(ext), len(rec))
        print(
            f"  {name}  {len(reqs):8d} {len(ext):8d} {len(rec):10d} "
            f"{busy / 60:7.1f} min {100 * busy / wall:7.1f}%",
            file=out,
        )

    # Concurrency over time, sampled every 0.5 s.
    step = 0.5
    hist = [0.0, 0.0, 0.0, 0.0]
    kinds = {"extract-only": 0.0, "reconcile-only": 0.0, "mixed": 0.0}
    t = t0
    steps = 0
    while t < t1:
        active = [r for reqs in nodes.values() for r in reqs if r[0] <= t < r[1]]
        hist[min(len(active), 3)] += step
        if active:
            ext_on = any(r[2] >= split_tokens for r in active)
            rec_on = any(r[2] < split_tokens for r in active)
            kinds[
                "mixed" if ext_on and rec_on else "extract-only" if ext_on else "reconcile-only"
            ] += step
        t += step
        steps += 1
        if progress is not None and not steps & 0x1FFF:
            progress(t - t0, wall)

    print("\n  nodes working at once    share of wall time", file=out)
    for k, v in enumerate(hist):
        bar = "#" * int(round(40 * v / wall))  # noqa: RUF046 (verbatim)
        print(
            f"        {k}                {100 * v / wall:5.1f}%  {v / 60:5.1f} min  {bar}", file=out
        )

    all_reqs = [r for reqs in nodes.values() for r in reqs]
    ext = [r for r in all_reqs if r[2] >= split_tokens]
    rec = [r for r in all_reqs if r[2] < split_tokens]
    ext_s = sum(e - s for s, e, _ in ext)
    rec_s = sum(e - s for s, e, _ in rec)
    crashed, before = False, ""
    try:
        print(
            f"\n  extraction: {len(ext)} calls, {ext_s / 60:.1f} node-min, "
            f"median {sorted(e - s for s, e, _ in ext)[len(ext) // 2]:.1f} s",
            file=out,
        )
    except IndexError:  # where the seed dies; carry on to learn what it would print next
        crashed, before, out = True, out.getvalue(), io.StringIO()
    if rec:
        print(
            f"  reconcile:  {len(rec)} calls, {rec_s / 60:.1f} node-min, "
            f"median {sorted(e - s for s, e, _ in rec)[len(rec) // 2]:.1f} s",
            file=out,
        )
    print(
        f"  wall time with only reconcile running: {kinds['reconcile-only'] / 60:.1f} min", file=out
    )

    ideal = (ext_s + rec_s) / 3
    print(
        f"\n  total node-work {(ext_s + rec_s) / 60:.1f} node-min; "
        f"spread perfectly over 3 nodes that is {ideal / 60:.1f} min "
        f"against {wall / 60:.1f} min actual",
        file=out,
    )
    text = out.getvalue()
    return SeedRun(
        lines=(before if crashed else text).splitlines(),
        crashed=crashed,
        after_crash=text.splitlines() if crashed else [],
        nodes=dict(nodes),
        wall=wall,
        requests=requests,
        busy=busy_by_node,
        hist=hist,
        kinds=kinds,
        ext=ext,
        rec=rec,
        ext_s=ext_s,
        rec_s=rec_s,
        ideal=ideal,
    )
