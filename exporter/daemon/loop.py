"""The ingest loop: batches applied, the watermark ticked, checkpoint-then-publish started when due.

Each turn applies what the sources queued (for at most `TURN_BUDGET_S`, so that every source
keeps polling), ticks every `tick_seconds` (every `TICK_BUSY_S` while batches come), feeds the
watchdog, begins a reload asked for, and at most once a `publish_seconds` starts a task that
checkpoints and then publishes (one at a time, beside the loop). Ticks and publishes run by the
monotonic clock: a wall clock stepped back an hour must not hold them for an hour. Cancelled,
it writes a last checkpoint of everything applied.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress

from exporter.base.records import Batch
from exporter.config.schema import Config
from exporter.daemon.apply import Applier
from exporter.daemon.core import Core
from exporter.daemon.notify import Notifier
from exporter.daemon.publish import Publisher, pace
from exporter.daemon.reload import Reloads

TURN_BUDGET_S = 0.05  # batches applied per ingest turn, at most this long (a scrape waits it)
TICK_BUSY_S = 0.05  # the watermark moved this often while batches come
# A tick is O(nodes): while batches come, ticks are spaced so that they take at most
# 1/TICK_PACE of the loop's time (every 50 ms at 200 nodes, less often at thousands).
TICK_PACE = 10.0


class IngestLoop:
    """See the module docstring; `turns` counts its turns (the heartbeat)."""

    def __init__(
        self,
        core: Core,
        applier: Applier,
        publisher: Publisher,
        reloads: Reloads,
        take_config: Callable[[Config], None],
        notifier: Notifier,
        queue: asyncio.Queue[Batch],
        tg: asyncio.TaskGroup,
        *,
        tick_seconds: float,
        publish_seconds: float,
        caught_up_publish_seconds: float,
    ) -> None:
        self.core = core
        self.applier = applier
        self.publisher = publisher
        self.reloads = reloads
        self.take_config = take_config
        self.notifier = notifier
        self.queue = queue
        self.tg = tg
        self.tick_seconds = tick_seconds
        self.publish_seconds = publish_seconds
        self.caught_up_publish_seconds = caught_up_publish_seconds
        self.turns = 0
        self._last_tick = self._last_publish = time.monotonic()
        self._publishing: asyncio.Task[None] | None = None
        self._tick_took_s = 0.0  # how long the last tick held the loop

    async def run(self) -> None:
        try:
            await self._loop()
        finally:  # cancelled: a last checkpoint of everything applied
            for node in self.core.nodes.values():
                node.repeats.flush(every=True)
            self.publisher.final()

    async def _loop(self) -> None:
        self._last_tick = self._last_publish = time.monotonic()
        while True:
            await self.publisher.free.wait()  # (a checkpoint's state is being taken)
            if self.reloads.due():
                self.reloads.start(self.tg, self.take_config)
            first = await self._first()
            now = self.core.now_us()
            if first is not None:
                self._apply_queued(first, now)
            mono = time.monotonic()
            # O(nodes): not every turn; but soon after batches came, so the intervals waiting
            # for the watermark stay few (a backlog would pile them up in every checkpoint)
            busy = max(TICK_BUSY_S, TICK_PACE * self._tick_took_s)
            if mono - self._last_tick >= (self.tick_seconds if first is None else busy):
                self._tick(now, mono)
            self.turns += 1
            self.notifier.heartbeat()
            self._publish_when_due(now, mono)
            await asyncio.sleep(0)

    def _tick(self, now_us: int, mono: float) -> None:
        self.applier.tick(now_us)
        self._last_tick = time.monotonic()
        self._tick_took_s = self._last_tick - mono

    async def _first(self) -> Batch | None:
        """The first batch queued, waiting no longer than a tick, nor than a publish that is due
        soon (after a source caught up, unless one is under way); None if none came."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        wait = self.tick_seconds
        publishing = self._publishing
        if self.applier.caught_up and (publishing is None or publishing.done()):
            due = self._last_publish + pace(self.caught_up_publish_seconds, self.publisher.took_s)
            wait = min(wait, max(0.0, due - time.monotonic()))
        with suppress(TimeoutError):
            async with asyncio.timeout(wait):
                return await self.queue.get()
        return None

    def _apply_queued(self, first: Batch, now_us: int) -> None:
        """`first` and what else is queued, for one turn's budget: a turn stays short, so that
        every source keeps polling (a caught-up source vouches for "nothing unread up to now -
        2 s" only while it is polled)."""
        queue, apply = self.queue, self.applier.apply
        apply(first, now_us)
        budget = time.monotonic() + TURN_BUDGET_S
        while not queue.empty() and time.monotonic() < budget:
            apply(queue.get_nowait(), now_us)

    def _publish_when_due(self, now_us: int, mono: float) -> None:
        """The checkpoint is written beside the loop, one at a time: a slow disk holds the
        publishing back, never the reading (batches waiting would be read as late). A node that
        has just caught up (a backlog read) is shown at once, not a second on, and ticked first:
        its figures are shown whole, and the checkpoint holds no intervals of its backlog still
        waiting for the watermark (tens of thousands after a fast read)."""
        caught_up = self.applier.caught_up
        due = self.publish_seconds if not caught_up else self.caught_up_publish_seconds
        due = pace(due, self.publisher.took_s)
        publishing = self._publishing
        if mono - self._last_publish >= due and (publishing is None or publishing.done()):
            if caught_up and self._last_tick < mono:  # (not ticked in this turn yet)
                self._tick(now_us, mono)
            self.applier.caught_up = False
            self._publishing = self.tg.create_task(
                self.publisher.checkpoint_then_publish(), name="checkpoint"
            )
            self._last_publish = mono
