"""Each node's source as a task of its own, started again after a failure or a config change.

A failing source is logged, marked down and started again without touching the others. The
next source starts from the position of the last batch applied: only once all the failed one
handed over is applied, or it would be read and counted twice.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
from collections.abc import Callable
from contextlib import suppress

from exporter.base.records import Batch
from exporter.base.times import iso
from exporter.daemon.core import Core
from exporter.daemon.descriptors import Budget
from exporter.daemon.logger import log
from exporter.daemon.nodes import Node
from exporter.sources import registry as sources
from exporter.sources.base import Source, SourceError
from exporter.sources.registry import NodeConfig

RETRY_FIRST_S, RETRY_MAX_S = 1.0, 60.0
RETRY_JITTER = (0.8, 1.2)  # each wait between retries times a factor drawn from this range

SourceFactory = Callable[[NodeConfig, int, str], Source]


class Supervisor:
    """Starts and restarts the nodes' sources as tasks of `tg`, handing over to `queue`, each
    holding its share of the descriptor `budget` while it runs."""

    def __init__(
        self,
        core: Core,
        source_factory: SourceFactory,
        queue: asyncio.Queue[Batch],
        tg: asyncio.TaskGroup,
        budget: Budget | None = None,
    ) -> None:
        self.core = core
        self.source_factory = source_factory
        self.queue = queue
        self.tg = tg
        self.budget = budget if budget is not None else Budget(1 << 30)
        self._rng = random.Random()

    def start(self, node: Node) -> None:
        """Follow `node`'s source from now on."""
        node.task = self.tg.create_task(self.follow(node, node.config), name=f"source {node.name}")

    def restart(self, node: Node, config: NodeConfig) -> None:
        """Follow `node`'s source as `config` (its config changed) says, once the one running
        has stopped (see `_restart`)."""
        old = node.task
        node.config = config
        node.task = self.tg.create_task(
            self._restart(node, config, old), name=f"source {node.name}"
        )

    async def follow(self, node: Node, config: NodeConfig) -> None:
        """Keep one node's source running; its failures stay here. Retries back off
        exponentially (capped, with jitter), and start short again after a good run."""
        loop = asyncio.get_running_loop()
        delay = RETRY_FIRST_S
        first = True
        while True:
            node.started = True
            began = loop.time()
            try:
                resumes = await off_loop(functools.partial(sources.resumes, config, node.position))
                newest_us = self.core.acc.nodes[node.name].newest_us
                start = start_of(node, config, newest_us, resumes=resumes)
                share = sources.descriptors(config)
                if not self.budget.take(share):
                    raise SourceError(self.budget.why_not(share))
                try:
                    source = self.source_factory(config, *start)
                    if not first:
                        await self.queue.put(Batch(node.name, up=False, reconnected=True))
                    first = False
                    await source.run(self.queue)
                finally:
                    self.budget.give(share)
                error = "the source stopped"
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a failing source never takes the others down
                error = str(e) or type(e).__name__
            if loop.time() - began >= RETRY_MAX_S:
                delay = RETRY_FIRST_S
            prefix = f"node {node.name}: "
            log.error("%s%s; trying again in %.0f s", prefix, error.removeprefix(prefix), delay)
            ended = Batch(node.name, up=False, error=error)
            applied = asyncio.Event()
            node.ended = (ended, applied)
            await self.queue.put(ended)
            # The next source starts from the position of the last batch applied: so only once
            # all this one handed over (queued before `ended`) is applied.
            await asyncio.gather(
                asyncio.sleep(delay * self._rng.uniform(*RETRY_JITTER)), applied.wait()
            )
            delay = min(delay * 2, RETRY_MAX_S)

    async def _restart(
        self, node: Node, config: NodeConfig, old: asyncio.Task[None] | None
    ) -> None:
        """A changed node's source started again: once the old one has ended and everything it
        handed over is applied (as a retry does), so the new one starts from the position of
        the last batch applied and reads nothing twice."""
        if old is not None:
            old.cancel()
            with suppress(asyncio.CancelledError):
                await old
        marker = Batch(node.name, up=False, error="its config changed: starting again")
        applied = asyncio.Event()
        node.ended = (marker, applied)
        await self.queue.put(marker)
        await applied.wait()
        await self.follow(node, config)


def start_of(node: Node, config: NodeConfig, newest_us: int, *, resumes: bool) -> tuple[int, str]:
    """Where `node`'s source, as `config` says, starts: (since, position); `newest_us`: the
    newest journal time the node has read. A node already read whose source cannot resume from
    its position (`resumes` False: a dump moved or replaced while the exporter was down; a
    position of another kind of source: the node moved from a dump to its journal, say) starts
    after the newest journal time it read: `since` would read again what was counted, and the
    same entries, read anew, must not count twice. (A position that resumes keeps `since`: the
    lines after it may be stamped a little before the newest read.)"""
    node.running_kind = config.source
    position = node.position
    was = node.position_kind if node.position_kind is not None else config.source
    since = node.since_us
    if not position:
        return since, position
    after = max(since, newest_us + 1)
    if was != config.source:
        log.info(
            "node %s: its source is now of kind %s, its saved position of kind %s: read "
            "from after %s, the journal time read up to",
            node.name,
            config.source,
            was,
            iso(after - 1),
        )
        return after, ""
    return (since, position) if resumes else (after, position)


async def off_loop(call: Callable[[], bool]) -> bool:
    """`call()` in a daemon thread of its own (a stat on a hung mount holds up neither the loop
    nor the process's exit), awaited."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()

    def settle(value: bool | None, error: BaseException | None) -> None:
        if done.done():  # (cancelled meanwhile)
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(bool(value))

    def run() -> None:
        value, error = None, None
        try:
            value = call()
        except Exception as e:  # (handed to the awaiting task)
            error = e
        with suppress(RuntimeError):  # (the loop closed meanwhile: nobody waits)
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name="smllm-resumes", daemon=True).start()
    return await done
