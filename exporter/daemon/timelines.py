"""The init-timeline nodes' watchers: a task per node keeps its figures current."""

from __future__ import annotations

import asyncio

from exporter.daemon.core import Core
from exporter.daemon.logger import log
from exporter.sources.inittimeline import InitTimelineNode
from exporter.startup import vllmwatch
from exporter.startup.phases import Figures


class Timelines:
    """A task of `tg` watching each init-timeline node's files; `start` again after a reload."""

    def __init__(self, core: Core, tg: asyncio.TaskGroup) -> None:
        self.core = core
        self.tg = tg
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        """A watcher for each init-timeline node of the config in force (those running stop
        first)."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks = {
            node.name: self.tg.create_task(self._watch(node), name=f"init-timeline {node.name}")
            for node in self.core.config.init_timelines
        }

    async def _watch(self, node: InitTimelineNode) -> None:
        """Keep one init-timeline node's figures current; its failures stay here."""
        while True:
            try:
                await vllmwatch.watch(node, self._put_figures, self.core.clock)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # (a defect: the node shows it, the others carry on)
                why = f"init-timeline node {node.name}: {type(e).__name__}: {e}"
                log.error("%s; trying again in %.0f s", why, node.poll_seconds)
                self._put_figures(Figures(node.name, False, why))
            await asyncio.sleep(node.poll_seconds)

    def _put_figures(self, figures: Figures) -> None:
        acc = self.core.acc
        was = acc.init_timelines.get(figures.node)
        if was is None or was.error != figures.error:
            if figures.up:
                log.info("init-timeline node %s: read (%d skipped)", figures.node, figures.skipped)
            else:
                log.warning("%s", figures.error)
        if figures.named and (was is None or was.named != figures.named):
            for why in figures.named:
                log.warning("init-timeline node %s: skipped %s", figures.node, why)
        if figures.node in {n.name for n in self.core.config.init_timelines}:
            acc.init_timelines[figures.node] = figures
