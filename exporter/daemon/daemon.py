"""The daemon's wiring: sources -> parse -> accounting -> snapshot -> /metrics, under one TaskGroup.

Every source runs as its own task (`supervise.py`) and hands Batches to one bounded queue; the
ingest loop (`loop.py`) applies them (`apply.py`), moves the watermark with the clock, and at
most once a `publish_seconds` starts a task that checkpoints and then publishes a new snapshot
(`publish.py`). Cancellation is the only way it stops; a last checkpoint is written then.
SIGHUP re-reads the config (`reload.py`), taken up between two batches as a restart would take
it up (`reconfigure.py`), with every unchanged node's source left running. What the parts share
(the config in force, the node records, the accounting, the clock) is `core.Core`.
"Now" is the wall clock held to the monotonic clock across a step of it (`clock.SteadyClock`):
the watermark and the "ahead of now" test follow the journals' real time, not a wall clock
stepped for a while.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Callable

from exporter import __version__
from exporter.accounting.accounting import Accounting
from exporter.base.records import Batch
from exporter.checkpoint import codec
from exporter.checkpoint.store import Checkpoint, StateLock
from exporter.config.schema import Config
from exporter.daemon import hup
from exporter.daemon.apply import Applier
from exporter.daemon.clock import boottime
from exporter.daemon.core import Core
from exporter.daemon.descriptors import Budget
from exporter.daemon.listen import Listener
from exporter.daemon.logger import log
from exporter.daemon.loop import IngestLoop
from exporter.daemon.nodes import Node
from exporter.daemon.notify import Notifier
from exporter.daemon.publish import Publisher
from exporter.daemon.reconfigure import Reconfigure
from exporter.daemon.reload import RELOAD_DEADLINE_S, Reloads
from exporter.daemon.resume import resume
from exporter.daemon.status import status_line
from exporter.daemon.supervise import SourceFactory, Supervisor
from exporter.daemon.timelines import Timelines
from exporter.daemon.watch import QUIET_UNIT_S
from exporter.ingest.memory import tune_gc
from exporter.sources import registry as sources
from exporter.web.routes import Site

QUEUE_SIZE = 64
CAUGHT_UP_PUBLISH_S = 0.05  # publish this soon after a source caught up (a backlog read)


class Daemon:
    """Runs the whole pipeline for one config; see the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        source_factory: SourceFactory = sources.follow,
        publish_seconds: float = 1.0,
        caught_up_publish_seconds: float = CAUGHT_UP_PUBLISH_S,
        tick_seconds: float = 0.5,
        version: str = __version__,
        notifier: Notifier | None = None,
        reloader: Callable[[], Config] | None = None,
        quiet_unit_seconds: float = QUIET_UNIT_S,
        reload_deadline_seconds: float = RELOAD_DEADLINE_S,
    ) -> None:
        """`clock`: the wall clock; `monotonic`: the clock that holds it across a step (by
        default CLOCK_BOOTTIME for the real wall clock; a clock given without one is its own:
        a test's clock moved by hand is taken as it moves). `reloader`: the config re-read,
        for SIGHUP (raises when it is bad)."""
        if monotonic is None:
            monotonic = boottime if clock is time.time else clock
        self.notifier = notifier if notifier is not None else Notifier()
        self.source_factory = source_factory
        self.tick_seconds = tick_seconds
        self.publish_seconds = publish_seconds
        self.caught_up_publish_seconds = caught_up_publish_seconds
        self.core = Core(config, clock, monotonic)
        self.site = Site(ready=self._ready)
        self.listener = Listener(self.core, self.site)
        self.lock = StateLock(config.state_dir)
        self.publisher = Publisher(
            self.core,
            Checkpoint(config.state_dir, clock=clock),
            self.site,
            version,
            publish_seconds=publish_seconds,
            on_publish=self._notify,
        )
        self.applier = Applier(self.core, quiet_unit_seconds)
        self.reloads = Reloads(
            reloader, self.notifier, self.status, reload_deadline_seconds, self.publisher.free
        )
        self._ingest: IngestLoop | None = None

    # -- what the tests and the status read ---------------------------------------------------

    @property
    def config(self) -> Config:
        return self.core.config

    @property
    def acc(self) -> Accounting:
        return self.core.acc

    @property
    def nodes(self) -> dict[str, Node]:
        return self.core.nodes

    @property
    def since_us(self) -> int:
        return self.core.since_us

    @property
    def address(self) -> tuple[str, int] | None:
        return self.listener.address

    @property
    def checkpoint(self) -> Checkpoint:
        return self.publisher.checkpoint

    @property
    def checkpoint_errors(self) -> int:
        return self.publisher.checkpoint_errors

    @checkpoint_errors.setter
    def checkpoint_errors(self, count: int) -> None:
        self.publisher.checkpoint_errors = count

    @property
    def turns(self) -> int:
        """Ingest loop turns: the heartbeat."""
        return 0 if self._ingest is None else self._ingest.turns

    def state(self) -> bytes:
        """Everything to resume from, as the checkpoint holds it (encoded)."""
        return codec.encode(self.publisher.state())

    def status(self) -> str:
        """A one-line summary for systemd's STATUS=."""
        return status_line(self.publisher.served)

    def _ready(self) -> bool:
        return self.address is not None and all(n.started for n in self.core.nodes.values())

    def _notify(self) -> None:
        """READY=1 (once all sources started) and STATUS= after a publish."""
        if self._ready() and self.notifier.enabled:
            self.notifier.ready(self.status())
            self.notifier.status(self.status())

    # -- running --------------------------------------------------------------------------

    def resume(self) -> None:
        """Take up where the checkpoint left off; an unusable one is set aside, never fatal."""
        errors = resume(self.core, self.publisher.checkpoint)
        if errors is not None:
            self.publisher.checkpoint_errors = errors
            self.publisher.serve_now()

    async def run(self) -> None:
        """Serve until cancelled (StateInUse at once when another daemon has the state dir)."""
        self.lock.acquire()
        try:
            self.lock.probe()
            await self._run()
        finally:
            self.lock.release()

    async def _run(self) -> None:
        self.resume()
        self.publisher.publish()
        address = await self.listener.start()
        log.info("serving /metrics on %s:%d", *address)
        core = self.core
        # sources hand over at the same ticks (SSH): room for a batch of each
        queue: asyncio.Queue[Batch] = asyncio.Queue(max(QUEUE_SIZE, len(core.config.nodes)))
        try:
            async with asyncio.TaskGroup() as tg:
                budget = Budget.of_process(core.config.http_max_connections)
                supervisor = Supervisor(core, self.source_factory, queue, tg, budget)
                timelines = Timelines(core, tg)
                reconfigure = Reconfigure(
                    core,
                    self.applier,
                    supervisor,
                    timelines,
                    self.listener,
                    self.publisher,
                    queue,
                    tg,
                )
                self._ingest = IngestLoop(
                    core,
                    self.applier,
                    self.publisher,
                    self.reloads,
                    reconfigure.take,
                    self.notifier,
                    queue,
                    tg,
                    tick_seconds=self.tick_seconds,
                    publish_seconds=self.publish_seconds,
                    caught_up_publish_seconds=self.caught_up_publish_seconds,
                )
                for node in core.nodes.values():
                    supervisor.start(node)
                timelines.start()
                tg.create_task(self._ingest.run(), name="ingest")
        finally:
            await self.listener.close()

    async def run_until_signalled(self) -> None:
        """`run` as the process's one job, stopped cleanly by SIGTERM or SIGINT."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        tune_gc()
        tune_threads()

        def stop() -> None:
            self.notifier.stopping()
            task.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        if hup.take():  # (caught since the process began: the config may have changed since)
            log.info("a SIGHUP came while starting: the config is read again")
            self.reloads.wanted = True
        try:
            await self.run()
        except asyncio.CancelledError:
            task.uncancel()
            log.info("stopping")
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            hup.ignore()  # (ending: a SIGHUP now must not end the process otherwise)

    def request_reload(self) -> None:
        """Re-read the config at the ingest loop's next turn (SIGHUP); while a read is pending,
        once it has ended."""
        self.reloads.request()


# How long a thread keeps the interpreter lock while another waits for it (Python's default is
# 5 ms): while a worker thread makes a status page, renders /metrics or encodes a checkpoint,
# the event loop answering a scrape gets the lock back within this.
SWITCH_INTERVAL_S = 0.001


def tune_threads() -> None:
    """The interpreter's thread switch as the service runs it (SWITCH_INTERVAL_S)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
