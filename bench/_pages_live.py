"""The daemon's event loop on a built fleet, with the real HTTP server, scraped and reloaded from
other processes, for bench/pages.py; and what held each slow scrape up.

`run_live` runs, in this process's event loop, what the daemon runs: the workload applied
every STEP_S with the tick (`Fleet.step`), and every PUBLISH_S `Publisher.checkpoint_then_
publish` (the snapshot, the state and the view taken on the loop, the checkpoint written in a
worker thread, then the snapshot published with new Pages unless the ones served are recent),
served by `web/server.HttpServer` on the fleet's `Site`. A scraper process fetches /metrics
for the whole run; the run alternates windows without and with a reloader process (HALVES
of each). Meanwhile `watch` records, on the monotonic clock (the scraper's too), when each of
these ran: each page's making (the pages' thread), the snapshot, the state and the view (the
loop), the checkpoint's encoding and write (a worker thread), and each full collection of the
garbage collector (generation 2: it holds the interpreter lock throughout). A scrape is
`held` by whichever of them overlapped it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import signal
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from _pages_fleet import Fleet

from exporter.base.times import SECOND
from exporter.daemon.daemon import tune_threads
from exporter.daemon.publish import View
from exporter.ingest.memory import tune_gc
from exporter.web.routes import Page
from exporter.web.server import HttpServer

T = TypeVar("T")
Span = tuple[float, float]  # (start, end), time.monotonic()
PAGES = ("/", "/api/status")
# what may hold a scrape up: where it runs
CAUSES = {
    "full collection": "any thread",
    "/": "the pages' thread",
    "/api/status": "the pages' thread",
    "snapshot": "the loop",
    "state": "the loop",
    "view": "the loop",
    "checkpoint": "a worker thread",
}
HALVES = 3  # each condition's windows, alternating
SKIP = 1.0  # s at the start of a window not counted (a reloader starting or a page finishing)
WARMUP = 3.0  # s of the live loop before the first window
STEP_S = 0.25  # the workload applied and the tick this often
PUBLISH_S = 1.0  # and a checkpoint, then a publish, this often (the daemon's default)


@dataclass
class Live:
    """What a live run saw: each scrape (its start and its seconds, NaN if it failed), the
    windows without and with the pages reloaded, the pages fetched, and the spans of each of
    CAUSES."""

    scrapes: list[tuple[float, float]] = field(default_factory=list)
    quiet: list[Span] = field(default_factory=list)
    loud: list[Span] = field(default_factory=list)
    reloads: int = 0
    spans: dict[str, list[Span]] = field(default_factory=lambda: {c: [] for c in CAUSES})

    def taken(self, windows: Sequence[Span]) -> list[tuple[float, float]]:
        """The scrapes that began in `windows` (SKIP after each start): (start, ms)."""
        return [
            (t, s * 1000)
            for t, s in self.scrapes
            if any(a + SKIP <= t < b for a, b in windows) and not math.isnan(s)
        ]

    def latencies(self, windows: Sequence[Span]) -> list[float]:
        return [ms for _, ms in self.taken(windows)]

    def failed(self) -> int:
        return sum(math.isnan(s) for _, s in self.scrapes)

    def held(self, windows: Sequence[Span], over_ms: float) -> tuple[int, Counter[str]]:
        """The scrapes in `windows` slower than `over_ms`, and how many of them each cause
        overlapped."""
        slow = [(t, t + ms / 1000) for t, ms in self.taken(windows) if ms > over_ms]
        causes: Counter[str] = Counter()
        for a, b in slow:
            for cause, spans in self.spans.items():
                if any(s < b and a < e for s, e in spans):
                    causes[cause] += 1
        return len(slow), causes

    def durations_ms(self, cause: str) -> list[float]:
        return [(e - s) * 1000 for s, e in self.spans[cause]]


def _spanned(fn: Callable[..., T], into: list[Span]) -> Callable[..., T]:
    """`fn`, each call's span appended to `into`."""

    def run(*args: Any) -> T:
        began = time.monotonic()
        try:
            return fn(*args)
        finally:
            into.append((began, time.monotonic()))

    return run


def watch(fleet: Fleet, live: Live) -> Callable[[str, dict[str, int]], None]:
    """Record the spans of CAUSES in `live` (the fleet's parts wrapped, on the instances);
    returns the garbage collector's callback, installed (remove it after)."""
    spans, publisher, acc = live.spans, fleet.publisher, fleet.core.acc
    acc.snapshot = _spanned(acc.snapshot, spans["snapshot"])  # type: ignore[method-assign]
    publisher.state = _spanned(publisher.state, spans["state"])  # type: ignore[method-assign]
    publisher.view = _spanned(publisher.view, spans["view"])  # type: ignore[method-assign]
    publisher._write = _spanned(publisher._write, spans["checkpoint"])  # type: ignore[method-assign]
    publish = publisher.publish
    watched: weakref.WeakSet[Page] = weakref.WeakSet()

    def published(view: View | None = None) -> None:
        publish(view)
        for path, page in zip(PAGES, (fleet.site.status, fleet.site.api), strict=True):
            if page is not None and page not in watched:  # (a new one, not the one served on)
                page.make = _spanned(page.make, spans[path])
                watched.add(page)

    publisher.publish = published  # type: ignore[method-assign]
    collecting = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                collecting[0] = time.monotonic()
            else:
                spans["full collection"].append((collecting[0], time.monotonic()))

    gc.callbacks.append(collected)
    return collected


async def run_live(
    fleet: Fleet, seconds: float, reload_every: float, client: Callable[..., list[str]]
) -> Live:
    """The daemon's loop on `fleet` (the module docstring) for `seconds` without the pages
    reloaded and `seconds` with; `client("--scrape", URL, "--seconds", S)` and
    `client("--reload", URL, "--reload-every", S)` are the commands of the scraper and the
    reloader (a page every `reload_every` seconds)."""
    tune_gc()  # (as the daemon's run_until_signalled tunes its process)
    tune_threads()
    live = Live()
    collected = watch(fleet, live)
    fleet.clock.live()
    server = HttpServer(fleet.site, "127.0.0.1", 0)
    _, port = await server.start()
    url = f"http://127.0.0.1:{port}"
    stop = asyncio.Event()

    async def ingest() -> None:
        while not stop.is_set():
            fleet.step(int(fleet.clock() * SECOND))
            await asyncio.sleep(STEP_S)

    async def publish() -> None:
        while not stop.is_set():
            began = time.monotonic()
            await fleet.publisher.checkpoint_then_publish()
            await asyncio.sleep(max(0.0, PUBLISH_S - (time.monotonic() - began)))

    half = seconds / HALVES
    total = WARMUP + 2 * seconds + 1
    tasks = [asyncio.create_task(ingest()), asyncio.create_task(publish())]
    scraper = await asyncio.create_subprocess_exec(
        *client("--scrape", url + "/metrics", "--seconds", str(total)),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        await asyncio.sleep(WARMUP)
        for _ in range(HALVES):
            began = time.monotonic()
            await asyncio.sleep(half)
            live.quiet.append((began, time.monotonic()))
            reloader = await asyncio.create_subprocess_exec(
                *client("--reload", url, "--reload-every", str(reload_every)),
                stdout=asyncio.subprocess.PIPE,
            )
            began = time.monotonic()
            await asyncio.sleep(half)
            live.loud.append((began, time.monotonic()))
            reloader.send_signal(signal.SIGTERM)
            out, _ = await reloader.communicate()
            live.reloads += int(out or b"0")
        out, _ = await scraper.communicate()
        live.scrapes = [(t, math.nan if s is None else s) for t, s in json.loads(out)]
    finally:
        gc.callbacks.remove(collected)
        if scraper.returncode is None:
            scraper.kill()
            await scraper.wait()
        stop.set()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await server.close()
    return live
