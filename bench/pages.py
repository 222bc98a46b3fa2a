"""Benchmark the status pages of 200 and 1,000 nodes busy all hour, and /metrics meanwhile.

    .venv/bin/python bench/pages.py                    # 200 and 1,000 nodes, medians of 3
    .venv/bin/python bench/pages.py --nodes 200 --seconds 15
    .venv/bin/python bench/pages.py --profile          # and where the pages' time goes

For each fleet size, N nodes are built in the daemon's own parts, in this process
(`_pages_fleet`): a `Core` on a config of N `file` nodes (their sources never start), each
node busy all hour with 1-3 slots (about 1.2 requests a second a node: its ring, 4,096
intervals or its share of the fleet's 131,072, is full), fed as the ingest loop feeds it, a
second of journal time a step, through `Accounting.add_all` and `Recent.add_all`, then the
tick's `Accounting.advance` (which takes the history's sample every 10 s).

1. The pages made from that hour: `Publisher.view()` (it runs on the event loop at every
   publish), then `status_page.status_html` (`/`) and `status_json` (`/api/status`) as the
   published `Page`s make them, each timed (the median of `--repeat`, a second more of the
   workload applied before each), its size, and the peak of the memory its making allocates
   (tracemalloc, in a run of its own).
2. /metrics while the pages are asked for: the real HTTP server (`web/server.py`) on the real
   `Site`, in an event loop that goes on as the daemon's does: the workload applied every
   0.25 s with the tick, and every second a checkpoint written and the snapshot published
   (`Publisher.checkpoint_then_publish`: new Pages, made when next asked for, unless the pages
   served were made less than `publish.PAGES_EVERY_S` ago). A scraper in another process
   fetches /metrics 10 times a second, at random points (gzip accepted, as Prometheus does).
   Half the time a third process reloads `/` and `/api/status` in turn, 10 a second (a page
   made anew is asked for at once; `--reload-every 0`: as fast as they come); the halves
   alternate (3 of each). The first second of each half is not counted. What ran meanwhile
   (each page's making, the snapshot, state and view taken on the loop, the checkpoint, each
   full collection of the garbage collector) is timed; each scrape slower than the p99
   without the pages reloaded says which of them overlapped it (`_pages_live`).

Goals (exit 1 on a FAIL): each page made in under 250 ms and under 2 MB (its size); /metrics
p99 with the pages reloaded no more than 1.5x its p99 without. Checks: every node's ring full,
no interval late.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import signal
import statistics
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _common import machine, profile, tuned_gc
from _daemon import scrape
from _pages_fleet import Fleet
from _pages_live import CAUSES, HALVES, PAGES, SKIP, Live, run_live

from exporter.accounting.lanes import ring_size
from exporter.base.times import SECOND
from exporter.web.routes import Page

GOAL_MS = 250.0  # a page made in under this
GOAL_BYTES = 2_000_000  # and under this size
GOAL_RATIO = 1.5  # /metrics p99 with the pages reloaded, at most this times its p99 without
SCRAPE_EVERY = 0.1  # s: the scraper's pace
RELOAD_EVERY = 0.1  # s: the reloader's (a page made anew is asked for at once)
END_S = 1_800_000_000  # the hour built ends here (2027-01-15): any fixed time will do
MB = 1_000_000


# -- the daemon's side: the fleet and its pages ----------------------------------


@dataclass
class PageCost:
    """One page: its making's seconds (each run), size, and peak allocation."""

    seconds: list[float] = field(default_factory=list)
    size: int = 0
    peak: int = 0

    @property
    def ms(self) -> float:
        return statistics.median(self.seconds) * 1000


@dataclass
class Result:
    nodes: int
    requests: int
    build_s: float
    ring_min: int
    late: int
    view_ms: float
    html: PageCost
    api: PageCost
    live: Live


def fleet_for(nodes: int, directory: Path, seed: int) -> tuple[Fleet, float]:
    fleet = Fleet(nodes, directory, END_S, seed)
    began = time.perf_counter()
    fleet.build()
    return fleet, time.perf_counter() - began


def pages_once(fleet: Fleet) -> tuple[float, Page, Page]:
    """A second more of the workload, then the view and the pages published: (the view's
    seconds, the new `/` and `/api/status` pages, not made yet)."""
    t = fleet.read_us + SECOND
    fleet.clock.set(t / SECOND)
    fleet.step(t)
    fleet.site.status = fleet.site.api = None  # (new pages, however recent the last ones)
    gc.collect()
    began = time.perf_counter()
    view = fleet.publisher.view()
    seconds = time.perf_counter() - began
    fleet.publisher.publish(view)
    site = fleet.site
    assert site.status is not None and site.api is not None
    return seconds, site.status, site.api


def timed_make(page: Page) -> float:
    gc.collect()
    began = time.perf_counter()
    page.make()
    return time.perf_counter() - began


def peak_of(page: Page) -> tuple[int, int]:
    """The page's size, and the peak of what its making allocated (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        body = page.make()
        return len(body), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure_pages(fleet: Fleet, repeat: int) -> tuple[float, PageCost, PageCost]:
    views: list[float] = []
    html, api = PageCost(), PageCost()
    for _ in range(repeat):
        view_s, status, data = pages_once(fleet)
        views.append(view_s)
        html.seconds.append(timed_make(status))
        api.seconds.append(timed_make(data))
    _, status, data = pages_once(fleet)
    html.size, html.peak = peak_of(status)
    api.size, api.peak = peak_of(data)
    return statistics.median(views) * 1000, html, api


def profile_pages(fleet: Fleet) -> str:
    """cProfile of each page's making, and of what a publish takes on the loop."""
    _, status, data = pages_once(fleet)
    acc, publisher, n = fleet.core.acc, fleet.publisher, len(fleet.names)
    return (
        profile(status.make, f"{n} nodes: /")
        + profile(data.make, f"{n} nodes: /api/status")
        + profile(
            lambda: (acc.snapshot(), publisher.state(), publisher.view()),
            f"{n} nodes: a publish's snapshot, state and view, on the loop",
        )
    )


def measure(nodes: int, args: argparse.Namespace, directory: Path) -> Result:
    print(f"{nodes} nodes: building the hour", file=sys.stderr, flush=True)
    fleet, build_s = fleet_for(nodes, directory / str(nodes), args.random_seed)
    requests = fleet.workload.requests
    rings = [len(r) for r in fleet.core.recent.rings.values()]
    snap = fleet.core.acc.snapshot()
    late = sum(n.late for n in snap.nodes)
    print(
        f"  {requests:,} requests in {build_s:.1f} s; timing the pages",
        file=sys.stderr,
        flush=True,
    )
    view_ms, html, api = measure_pages(fleet, args.repeat)
    if args.profile:
        print(profile_pages(fleet))
    print(
        f"  / {html.ms:.0f} ms, /api/status {api.ms:.0f} ms; /metrics for {2 * args.seconds:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    live = asyncio.run(run_live(fleet, args.seconds, args.reload_every, _self))
    return Result(nodes, requests, build_s, min(rings), late, view_ms, html, api, live)


# -- the clients' side: processes of their own -------------------------------------------------


def _self(*args: str) -> list[str]:
    return [sys.executable, __file__, *args]


def scraper(url: str, seconds: float) -> int:
    """Scrape `url` SCRAPE_EVERY apart on average for `seconds`, each at a random point of its
    turn (the daemon publishes every second: scrapes at a fixed phase would meet its work
    always or never); print [[start, seconds or null], ...]."""
    out: list[tuple[float, float | None]] = []
    began = time.monotonic()
    k = 0
    while (now := time.monotonic()) < began + seconds:
        time.sleep(max(0.0, began + (k + random.random()) * SCRAPE_EVERY - now))
        k += 1
        t = time.monotonic()
        try:
            out.append((t, scrape(url).seconds))
        except OSError:
            out.append((t, None))
    print(json.dumps(out))
    return 0


def reloader(url: str, every: float) -> int:
    """Fetch `/` and `/api/status` in turn, one every `every` seconds (0: each as soon as the
    one before came), until SIGTERM (the fetch under way finished first); print how many
    were fetched."""
    done, stopped = 0, False

    def stop(*_: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    began = time.monotonic()
    while not stopped:
        with urllib.request.urlopen(url + PAGES[done % 2], timeout=30) as r:
            r.read()
        done += 1
        time.sleep(max(0.0, began + done * every - time.monotonic()))
    print(done)
    return 0


# -- the table -------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def rows(r: Result) -> Iterator[tuple[str, str, str, bool | None]]:
    """(what, value, goal, verdict or None)"""
    for name, cost in (("/", r.html), ("/api/status", r.api)):
        ok = cost.ms < GOAL_MS
        yield f"{name} made in, ms (median)", f"{cost.ms:.1f}", f"< {GOAL_MS:.0f}", ok
        yield f"{name} size, bytes", f"{cost.size:,}", "< 2 MB", cost.size < GOAL_BYTES
        yield f"{name} making's peak allocation, MB", f"{cost.peak / MB:.1f}", "", None
    yield "Publisher.view(), ms (median)", f"{r.view_ms:.2f}", "", None
    live = r.live
    quiet, loud = live.latencies(live.quiet), live.latencies(live.loud)
    p99q, p99l = percentile(quiet, 99), percentile(loud, 99)
    ratio = p99l / p99q
    both = f"{percentile(quiet, 50):.1f} / {p99q:.1f}"
    yield f"/metrics p50 / p99, ms ({len(quiet)} scrapes)", both, "", None
    both = f"{percentile(loud, 50):.1f} / {p99l:.1f}"
    yield f"  with the pages reloaded ({len(loud)} scrapes)", both, "", None
    yield "  p99 with / without", f"{ratio:.2f}x", f"<= {GOAL_RATIO}x", ratio <= GOAL_RATIO
    worst = f"{percentile(quiet, 100):.1f} / {percentile(loud, 100):.1f}"
    yield "  max without / with, ms", worst, "", None
    made = sum(len(live.spans[p]) for p in PAGES)
    yield "  pages fetched / made", f"{live.reloads:,} / {made}", "", None


def meanwhile(live: Live) -> Iterator[str]:
    """What ran during the live run, and what overlapped the slow scrapes."""
    yield f"{'what ran meanwhile, where':50} {'times':>6} {'ms, median / max':>18}"
    for cause, where in CAUSES.items():
        ms = live.durations_ms(cause)
        spread = f"{statistics.median(ms):.1f} / {max(ms):.1f}" if ms else "-"
        yield f"  {cause + ', ' + where:48} {len(ms):>6} {spread:>18}"
    over = percentile(live.latencies(live.quiet), 99)
    yield f"scrapes slower than the p99 without the pages reloaded ({over:.1f} ms), overlapping:"
    for label, windows in (("without", live.quiet), ("with", live.loud)):
        slow, causes = live.held(windows, over)
        during = ", ".join(f"{c} {k}" for c, k in causes.most_common()) or "none of these"
        yield f"  {label} the pages reloaded: {slow}" + (f"; {during}" if slow else "")


def table(r: Result) -> Iterator[str]:
    yield (
        f"{r.nodes:,} nodes busy all hour: {r.requests:,} requests, built in {r.build_s:.0f} s"
        f" (rings of {r.ring_min:,}+ intervals a node)"
    )
    yield f"{'':50} {'value':>16}  {'goal':>7}  verdict"
    for name, value, goal, ok in rows(r):
        yield f"{name:50} {value:>16}  {goal:>7}  {'' if ok is None else verdict(ok)}"
    yield from meanwhile(r.live)


def problems(r: Result) -> list[str]:
    out = [
        f"{r.nodes} nodes: {name.strip()}: {value}" for name, value, _, ok in rows(r) if ok is False
    ]
    if r.ring_min < ring_size(r.nodes):
        out.append(f"{r.nodes} nodes: a ring holds {r.ring_min}, not {ring_size(r.nodes)}")
    if r.late:
        out.append(f"{r.nodes} nodes: {r.late} intervals late")
    if r.live.failed():
        out.append(f"{r.nodes} nodes: {r.live.failed()} scrapes failed")
    if not r.live.reloads:
        out.append(f"{r.nodes} nodes: no page was fetched")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--nodes",
        default="200,1000",
        metavar="N,N",
        help="fleet sizes, comma-separated (default 200,1000)",
    )
    ap.add_argument(
        "--repeat", type=int, default=3, metavar="K", help="the median of K runs each (default 3)"
    )
    ap.add_argument(
        "--seconds",
        type=lambda text: max(float(text), 2 * HALVES * SKIP),
        default=60.0,
        metavar="S",
        help="/metrics scraped for S seconds without the pages reloaded and S with (default 60: "
        "the p99 of fewer scrapes is the noise of a few)",
    )
    ap.add_argument("--random-seed", type=int, default=1, metavar="S", help="workload seed")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="and where the time of the pages, and of a publish on the loop, goes (cProfile)",
    )
    ap.add_argument("--scrape", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument(
        "--reload-every",
        type=float,
        default=RELOAD_EVERY,
        metavar="S",
        help=f"the reloader fetches a page every S seconds, 0: back to back (default"
        f" {RELOAD_EVERY:g})",
    )
    ap.add_argument("--reload", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.scrape:
        return scraper(args.scrape, args.seconds)
    if args.reload:
        return reloader(args.reload, args.reload_every)
    sizes = [int(n) for n in args.nodes.split(",")]
    load = os.getloadavg()
    tuned_gc()  # (as the daemon, before anything is read)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        for n in sizes:
            results.append(measure(n, args, Path(tmp)))
            gc.collect()
    found: list[str] = []
    for r in results:
        print("\n".join(table(r)))
        print()
        found += problems(r)
    print(machine(load))
    for p in found:
        print(f"FAIL: {p}")
    print("FAIL" if found else "PASS")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
