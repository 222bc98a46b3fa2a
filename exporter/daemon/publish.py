"""Checkpoint, then publish: scrapes and the status pages only ever show values a checkpoint holds.

The loop takes a snapshot and the state together; a task beside it writes the state (encoded in
a worker thread: a slow disk never holds the reading up), and only then is the snapshot
published, rendered once, when first scraped, and read from memory after. States are numbered
as they are taken: one taken earlier never replaces a newer one on disk. A failed write counts
in `smllm_checkpoint_errors_total`, and the last checkpointed values stay served.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from exporter.accounting.figures import Snapshot
from exporter.accounting.history import Sample
from exporter.base.records import Interval
from exporter.checkpoint import codec
from exporter.checkpoint.store import Checkpoint
from exporter.daemon.core import Core
from exporter.daemon.logger import log
from exporter.daemon.resume import state_steps, state_values
from exporter.exposition.published import Published
from exporter.exposition.render import Renderer
from exporter.web import status_api, status_page, status_timeline
from exporter.web.fleet import StatusView
from exporter.web.routes import Page, Site

# what the status pages show besides the snapshot, taken with it: when, each node's recent
# intervals and how many the window holds, its requests in flight (their starts), its
# source's error, the history's samples and their nodes
View = tuple[
    int,
    dict[str, tuple[Interval, ...]],
    dict[str, int],
    dict[str, tuple[int, ...]],
    dict[str, str],
    tuple[Sample, ...],
    tuple[str, ...],
]


PAGES_EVERY_S = 5.0  # a status page made less long ago is served on (it refreshes every 10 s)
# Taking a checkpoint's state, its snapshot and the pages' view holds the event loop for a time
# that grows with the fleet: the checkpoints are spaced so that it holds it at most 1/LOOP_PACE
# of the time (a second apart at 200 nodes, a few at thousands).
LOOP_PACE = 20.0


def pace(due_s: float, took_s: float) -> float:
    """The time between checkpoints: `due_s`, or longer when taking the last one's state held
    the loop `took_s` (at most 1/LOOP_PACE of the loop's time goes to it)."""
    return max(due_s, LOOP_PACE * took_s)


def fresh_page(page: Page | None, make: Callable[[], bytes], content_type: str) -> Page:
    """The page to serve from now on: the one served, if made less than PAGES_EVERY_S ago
    (however often a client reloads, the pages' thread makes a page at most that often: the
    interpreter lock it holds meanwhile is not taken from scrapes every second), else a new
    one of the snapshot just published, made when first asked for."""
    made = None if page is None else page.made_at
    if page is not None and made is not None and time.monotonic() - made < PAGES_EVERY_S:
        return page
    return Page(make, content_type)


class Publisher:
    """Writes `core`'s state to `checkpoint`, then publishes its snapshot on `site`; calls
    `on_publish` after each publish (systemd's STATUS=)."""

    def __init__(
        self,
        core: Core,
        checkpoint: Checkpoint,
        site: Site,
        version: str,
        *,
        publish_seconds: float,
        on_publish: Callable[[], None],
    ) -> None:
        self.core = core
        self.checkpoint = checkpoint
        self.site = site
        self.version = version
        self.renderer = Renderer(version)
        self.publish_seconds = publish_seconds
        self.on_publish = on_publish
        self.checkpoint_errors = 0
        self.took_s = 0.0  # how long taking the last checkpoint's state held the loop
        self.served: Snapshot = core.acc.snapshot()  # the last checkpointed snapshot
        self.served_view: View | None = None  # what the status pages showed with it
        self._failing = False
        # states in the order they were taken, and the newest written: a write that took its
        # state earlier but reaches the disk later (a worker thread still encoding when the
        # final write runs) never replaces a newer checkpoint
        self._taken = itertools.count(1)
        self._written = 0
        self._write_lock = threading.Lock()
        self._encoder = codec.Encoder()  # (a node idle since the last checkpoint: not encoded)
        # clear while a checkpoint's state is being taken: the ingest loop waits for it
        self.free = asyncio.Event()
        self.free.set()

    def state(self) -> dict[str, Any]:
        """Everything to resume from, as fresh JSON-ready values (see `resume.state_values`)."""
        return state_values(self.core, self.checkpoint_errors)

    def serve_now(self) -> None:
        """The accounting's figures as they are, served from the next publish on (after a
        resume or a reload: values a checkpoint holds)."""
        self.served, self.served_view = self.core.acc.snapshot(), None

    def final(self) -> None:
        """The last checkpoint, of everything applied (after the one being written, if any:
        `Checkpoint.write` takes its lock)."""
        try:
            self._write(self.state(), next(self._taken))
        except OSError as e:
            log.error("final checkpoint %s failed: %s", self.checkpoint.path, e)

    def _write(self, state: dict[str, Any], taken: int) -> None:
        """Write `state`, the `taken`-th taken, unless a newer one is on disk already."""
        data = self._encoder.encode(state)
        with self._write_lock:
            if taken > self._written:
                self.checkpoint.write(data)
                self._written = taken

    async def taken(self) -> tuple[Snapshot, dict[str, Any], View]:
        """The snapshot, the state and the view, taken together while the ingest loop waits
        (`free`): the state a few nodes at a time, the loop free for scrapes between them."""
        self.free.clear()
        try:
            snapshot = self.core.acc.snapshot()
            steps = state_steps(self.core, self.checkpoint_errors)
            while True:
                await asyncio.sleep(0)
                try:
                    next(steps)
                except StopIteration as done:
                    state: dict[str, Any] = done.value
                    break
            return snapshot, state, self.view()
        finally:
            self.free.set()

    async def checkpoint_then_publish(self) -> None:
        """Scrapes only ever see values a checkpoint holds: write it, then publish them."""
        began = time.monotonic()
        snapshot, state, view = await self.taken()
        self.took_s = time.monotonic() - began
        try:
            await asyncio.to_thread(self._write, state, next(self._taken))
        except OSError as e:
            self.checkpoint_errors += 1
            if not self._failing:
                log.error(
                    "checkpoint %s failed: %s; serving the last checkpointed values and "
                    "retrying every %.1f s",
                    self.checkpoint.path,
                    e,
                    self.publish_seconds,
                )
            self._failing = True
            await self._publish(self.served_view)  # the same values, with the error counted
            self.on_publish()
            return
        if self._failing:
            log.info("checkpoint %s written again", self.checkpoint.path)
            self._failing = False
        self.served, self.served_view = snapshot, view
        await self._publish(view)
        self.on_publish()

    def publish(self, view: View | None = None) -> None:
        """Publish the last checkpointed snapshot: scrapes show it (rendered when the first of
        them asks) until the next, and the status pages with it (with the recent intervals and
        requests in flight as of that snapshot: `view`)."""
        site = self.site
        site.metrics = Published(self.renderer, self.served, self.checkpoint_errors, site.metrics)
        now_us, recent, in_window, in_flight, errors, samples, sample_nodes = (
            view if view is not None else self.view()
        )
        status = StatusView(
            now_us=now_us,
            snapshot=self.served,
            kinds=self.core.config.kinds,
            recent=recent,
            in_window=in_window,
            in_flight=in_flight,
            errors=errors,
            version=self.version,
            samples=samples,
            sample_nodes=sample_nodes,
        )
        site.status = fresh_page(
            site.status,
            functools.partial(status_page.status_html, status),
            "text/html; charset=utf-8",
        )
        site.api = fresh_page(
            site.api, functools.partial(status_api.status_json, status), "application/json"
        )

    def view(self) -> View:
        """What the status pages show besides the snapshot, taken with it (the rings' part
        older than the page's hour dropped: a ring that did not change is not copied; when
        the page draws the hour in bins, only each node's newest intervals, for /api/status)."""
        core = self.core
        now_us = core.now_us()
        in_flight = {n: tuple(ns.in_flight.values()) for n, ns in core.acc.nodes.items()}
        since_us = now_us - StatusView.window_us
        in_window = core.recent.counts(since_us)
        exact = status_timeline.drawn_exactly(in_window)
        newest = None if exact else max(1, status_api.API_REQUESTS // max(1, len(in_window)))
        recent = core.recent.copy(since_us=since_us, newest=newest)
        errors = {n.name: n.down_reason for n in core.nodes.values() if n.down_reason is not None}
        history = core.acc.history
        samples = () if history is None else tuple(history.samples)
        nodes = () if history is None else history.nodes
        return now_us, recent, in_window, in_flight, errors, samples, nodes

    async def _publish(self, view: View | None = None) -> None:
        """`publish`; and if the last one was scraped, whoever scrapes that often finds this one
        rendered already (in a worker thread: scrapes are answered meanwhile)."""
        previous = self.site.metrics
        self.publish(view)
        published = self.site.metrics
        if previous is not None and published is not None and previous.scraped is not None:
            await asyncio.to_thread(published.prepare_like, previous)
