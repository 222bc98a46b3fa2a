"""The daemon's wiring: sources -> parse -> accounting -> snapshot -> /metrics, under one TaskGroup.

Every source runs as its own task and hands Batches to one bounded queue; a failing source is
logged, marked down and started again without touching the others. The ingest loop applies
batches, moves the watermark with the clock, and at most once a `publish_seconds` starts a task
that checkpoints and then publishes a new snapshot (one at a time, beside the loop: a slow disk
never holds the reading up), which is rendered once, when first scraped, and read from memory
after.
Cancellation is the only way it stops. SIGHUP re-reads the config (`reloader`, in a thread of
its own: a config on a hung file system holds no reading up, and is abandoned after a while),
taken up between two batches as a restart would take it up (the counters through a
checkpoint's state into an accounting built from the new config), with every unchanged node's
source left running.
"Now" is the wall clock held to the monotonic clock across a step of it (`clock.SteadyClock`):
the watermark and the "ahead of now" test follow the journals' real time, not a wall clock
stepped for a while.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from exporter import __version__
from exporter.accounting.accounting import (
    MAX_MODELS,
    SECOND,
    Accounting,
    Snapshot,
    restore,
    state_of,
)
from exporter.accounting.lanes import Recent
from exporter.base import logs
from exporter.base.records import Batch, Event, EventKind, Interval, Record
from exporter.base.times import iso
from exporter.checkpoint.store import Checkpoint, CheckpointError, StateLock
from exporter.config import changes
from exporter.config.config import Config, ConfigError, FileNode, InitTimelineNode, NodeConfig
from exporter.daemon import hup
from exporter.daemon.clock import SteadyClock, boottime
from exporter.daemon.notify import Notifier
from exporter.daemon.repeats import Repeats
from exporter.exposition.render import Published, Renderer
from exporter.ingest.step import apply_batch, tune_gc
from exporter.parse.parser import OTHER_MODELS, Parser
from exporter.sources import registry as sources
from exporter.sources.registry import Source
from exporter.startup import vllmwatch as initwatch
from exporter.startup.phases import Figures
from exporter.web import pages
from exporter.web.routes import Page, Pages
from exporter.web.server import HttpServer, fd_budget

log = logging.getLogger(__name__)
# when, each node's recent intervals, its requests in flight (their starts), its source's error
_ViewParts = tuple[int, dict[str, tuple[Interval, ...]], dict[str, tuple[int, ...]], dict[str, str]]

QUEUE_SIZE = 64
TURN_BUDGET_S = 0.2  # batches applied per ingest turn, at most this long
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 60.0
TICK_BUSY_S = 0.05  # the watermark moved this often while batches come
CAUGHT_UP_PUBLISH_S = 0.05  # publish this soon after a source caught up (a backlog read)
ERRORS_LOGGED = 5  # parse errors logged per node before going quiet (they are all counted)
# a node whose source has been up and caught up this long without one entry of its unit says so
QUIET_UNIT_S = 600.0
RELOAD_DEADLINE_S = 30.0  # a config read (SIGHUP) not done by then is abandoned
RESTARTS = "llama-server restarts"  # (the repeated events a node's log line sums up)
ABORTED = "requests in flight aborted"


class Daemon:
    """Runs the whole pipeline for one config; see the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        source_factory: Callable[[NodeConfig, int, str], Source] = sources.follow,
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
        a test's clock moved by hand is taken as it moves)."""
        self.reloader = reloader  # the config re-read, for SIGHUP (raises when it is bad)
        self.notifier = notifier if notifier is not None else Notifier()
        self.config = config
        self.clock = clock
        if monotonic is None:
            monotonic = boottime if clock is time.time else clock
        self.now = SteadyClock(clock, monotonic)
        self.quiet_unit_seconds = quiet_unit_seconds
        self.reload_deadline_seconds = reload_deadline_seconds
        self.source_factory = source_factory
        self.publish_seconds = publish_seconds
        self.caught_up_publish_seconds = caught_up_publish_seconds
        self.tick_seconds = tick_seconds
        self.renderer = Renderer(version)
        self.pages = Pages(ready=self._ready)
        self.version = version
        self.server = self._server(config.listen_host, config.listen_port)
        self.checkpoint = Checkpoint(config.state_dir, clock=clock)
        self.lock = StateLock(config.state_dir)
        self.checkpoint_errors = 0
        self.since_us = config.since_us(self._now_us())
        names = [n.name for n in config.nodes]
        self.recent = Recent(names)  # each node's latest intervals, for the status page
        self.acc = self._fresh_accounting()
        self.parsers = {n: self._parser(n) for n in names}
        self.positions: dict[str, str] = dict.fromkeys(names, "")
        self.node_since = dict.fromkeys(
            names, self.since_us
        )  # where a node without position starts
        # the kind of source each position is of, and of the source running (a position is
        # only ever handed to a source of its kind)
        self._position_kind: dict[str, str] = {}
        self._running_kind: dict[str, str] = {}
        self._served: Snapshot = self.acc.snapshot()  # the last checkpointed snapshot
        self._served_view: _ViewParts | None = None  # what the status pages showed with it
        self._failing = False
        # states in the order they were taken, and the newest written: a write that took its
        # state earlier but reaches the disk later (a worker thread still encoding when the
        # final write runs) never replaces a newer checkpoint
        self._taken = itertools.count(1)
        self._written = 0
        self._write_lock = threading.Lock()
        self._rng = random.Random()
        self.address: tuple[str, int] | None = None
        self.turns = 0  # ingest loop turns: the heartbeat
        self._started: set[str] = set()
        self._errors_logged = dict.fromkeys(names, 0)
        self._repeats = Repeats(time.monotonic)  # restarts and aborts: logged in summary
        # per node: its entries counter when its source was last configured (the unit check),
        # since when (monotonic) it has been caught up with none since, and whether it said so
        self._entries_base = dict.fromkeys(names, 0)
        self._quiet_since: dict[str, float] = {}
        self._quiet_said: set[str] = set()
        self._down_reason: dict[str, str] = {}
        # per node, the Batch saying its source ended, and the event set once it is applied
        self._ended: dict[str, tuple[Batch, asyncio.Event]] = {}
        self._caught_up_now = False  # a source caught up since the last publish
        self._holder: tuple[str, str] | None = None  # (node, why) holding the figures back
        self._reload_wanted = False
        self._reloading: asyncio.Task[None] | None = None  # a config read and its take-up
        self._reader: threading.Thread | None = None  # the config read's thread
        self._queue: asyncio.Queue[Batch] | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._source_tasks: dict[str, asyncio.Task[None]] = {}
        self._timeline_tasks: dict[str, asyncio.Task[None]] = {}  # init-timeline nodes'
        self._rebinding = asyncio.Lock()

    def _now_us(self) -> int:
        return int(self.now() * SECOND)

    def _server(self, host: str, port: int) -> HttpServer:
        c = self.config
        return HttpServer(
            self.pages,
            host,
            port,
            max_connections=c.http_max_connections,
            web_config=c.web_config_file,
        )

    def _parser(self, node: str, state: dict[str, Any] | None = None) -> Parser:
        """A node's parser (from its checkpointed state), as the config says."""
        c = self.config
        p = Parser(node) if state is None else Parser.from_state(node, state)
        p.slots, p.gone_us = c.slots, c.max_request_seconds * SECOND
        return p

    def _fresh_accounting(self) -> Accounting:
        c = self.config
        return Accounting(
            [n.name for n in c.nodes],
            c.kinds,
            origin_us=self.since_us,
            max_request_us=c.max_request_seconds * SECOND,
            stall_us=c.stall_seconds * SECOND,
            buckets_s=c.duration_buckets,
            clock_allowance_us=c.clock_allowance_seconds * SECOND,
            start_timeout_us=c.start_timeout_seconds * SECOND,
            slow_start_share=c.slow_start_share,
        )

    def _ready(self) -> bool:
        return self.address is not None and {n.name for n in self.config.nodes} <= self._started

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
        self.publish()
        self.address = await self.server.start()
        log.info("serving /metrics on %s:%d", *self.address)
        # sources hand over at the same ticks (SSH): room for a batch of each
        queue: asyncio.Queue[Batch] = asyncio.Queue(max(QUEUE_SIZE, len(self.config.nodes)))
        self._queue = queue
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for node in self.config.nodes:
                    self._start_source(node)
                self._start_timelines()
                tg.create_task(self._ingest(queue, tg), name="ingest")
        finally:
            await self.server.close()

    async def run_until_signalled(self) -> None:
        """`run` as the process's one job, stopped cleanly by SIGTERM or SIGINT."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        tune_gc()

        def stop() -> None:
            self.notifier.stopping()
            task.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        if hup.take():  # (caught since the process began: the config may have changed since)
            log.info("a SIGHUP came while starting: the config is read again")
            self._reload_wanted = True
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
        if self._reader is not None and self._reader.is_alive():
            log.warning(
                "reload: the config read begun before has not ended yet: the config is read "
                "again once it has"
            )
        self.notifier.reloading()
        self._reload_wanted = True

    # -- sources ----------------------------------------------------------------------------

    def _start_source(self, node: NodeConfig) -> None:
        assert self._tg is not None and self._queue is not None
        self._source_tasks[node.name] = self._tg.create_task(
            self._follow(node, self._queue), name=f"source {node.name}"
        )

    async def _follow(self, node: NodeConfig, queue: asyncio.Queue[Batch]) -> None:
        """Keep one node's source running; its failures stay here. Retries back off
        exponentially (capped, with jitter), and start short again after a good run."""
        loop = asyncio.get_running_loop()
        delay = RETRY_FIRST_S
        first = True
        while True:
            self._started.add(node.name)
            began = loop.time()
            try:
                resumes = await _off_loop(
                    functools.partial(sources.resumes, node, self.positions[node.name])
                )
                source = self.source_factory(node, *self._start_of(node, resumes=resumes))
                if not first:
                    await queue.put(Batch(node.name, up=False, reconnected=True))
                first = False
                await source.run(queue)
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
            self._ended[node.name] = (ended, applied)
            await queue.put(ended)
            # The next source starts from the position of the last batch applied: so only once
            # all this one handed over (queued before `ended`) is applied, or it would be read
            # and counted twice.
            await asyncio.gather(asyncio.sleep(delay * self._rng.uniform(0.8, 1.2)), applied.wait())
            delay = min(delay * 2, RETRY_MAX_S)

    def _start_of(self, node: NodeConfig, *, resumes: bool = True) -> tuple[int, str]:
        """Where `node`'s source starts: (since, position). A node already read whose source
        cannot resume from its position (`resumes` False: a dump moved or replaced while the
        exporter was down; a position of another kind of source: the node moved from a dump to
        its journal, say) starts after the newest journal time it read: `since` would read
        again what was counted, and the same entries, read anew, must not count twice. (A
        position that resumes keeps `since`: the lines after it may be stamped a little before
        the newest read.)"""
        name = node.name
        self._running_kind[name] = node.source
        position, was = self.positions[name], self._position_kind.get(name, node.source)
        since = self.node_since[name]
        if not position:
            return since, position
        after = max(since, self.acc.nodes[name].newest_us + 1)
        if was != node.source:
            log.info(
                "node %s: its source is now of kind %s, its saved position of kind %s: read "
                "from after %s, the journal time read up to",
                name,
                node.source,
                was,
                iso(after - 1),
            )
            return after, ""
        return (since, position) if resumes else (after, position)

    def _start_timelines(self) -> None:
        """A task watching each init-timeline node's files (those running stop first)."""
        assert self._tg is not None
        for task in self._timeline_tasks.values():
            task.cancel()
        self._timeline_tasks = {
            node.name: self._tg.create_task(self._watch(node), name=f"init-timeline {node.name}")
            for node in self.config.init_timelines
        }

    async def _watch(self, node: InitTimelineNode) -> None:
        """Keep one init-timeline node's figures current; its failures stay here."""
        while True:
            try:
                await initwatch.watch(node, self._put_figures, self.clock)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # (a defect: the node shows it, the others carry on)
                why = f"init-timeline node {node.name}: {type(e).__name__}: {e}"
                log.error("%s; trying again in %.0f s", why, node.poll_seconds)
                self._put_figures(Figures(node.name, False, why))
            await asyncio.sleep(node.poll_seconds)

    def _put_figures(self, figures: Figures) -> None:
        was = self.acc.init_timelines.get(figures.node)
        if was is None or was.error != figures.error:
            if figures.up:
                log.info("init-timeline node %s: read (%d skipped)", figures.node, figures.skipped)
            else:
                log.warning("%s", figures.error)
        if figures.named and (was is None or was.named != figures.named):
            for why in figures.named:
                log.warning("init-timeline node %s: skipped %s", figures.node, why)
        if figures.node in {n.name for n in self.config.init_timelines}:
            self.acc.init_timelines[figures.node] = figures

    # -- ingest -----------------------------------------------------------------------------

    async def _ingest(self, queue: asyncio.Queue[Batch], tg: asyncio.TaskGroup) -> None:
        try:
            await self._ingest_loop(queue, tg)
        finally:  # cancelled: a last checkpoint of everything applied (after the one being
            # written, if any: Checkpoint.write takes its lock)
            self._repeats.flush(every=True)
            try:
                self._write(self._state_values(), next(self._taken))
            except OSError as e:
                log.error("final checkpoint %s failed: %s", self.checkpoint.path, e)

    async def _ingest_loop(self, queue: asyncio.Queue[Batch], tg: asyncio.TaskGroup) -> None:
        # ticks and publishes by the monotonic clock: a wall clock stepped back an hour must not
        # hold them for an hour (the wall clock is for the journal times only)
        last_publish = last_tick = time.monotonic()
        publishing: asyncio.Task[None] | None = None
        while True:
            if self._reload_wanted and not self._reload_pending():
                self._reload_wanted = False
                self._reloading = tg.create_task(self._reload(queue, tg), name="reload")
            first: Batch | None = None
            if not queue.empty():
                first = queue.get_nowait()
            else:  # (waiting no longer than a publish that is due soon)
                wait = self.tick_seconds
                if self._caught_up_now:
                    wait = min(
                        wait,
                        max(0.0, last_publish + self.caught_up_publish_seconds - time.monotonic()),
                    )
                with suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        first = await queue.get()
            now = self._now_us()
            if first is not None:
                self._apply(first, now)
                # A turn stays short, so that every source keeps polling: a caught-up source
                # vouches for "nothing unread up to now - 2 s" only while it is polled.
                budget = time.monotonic() + TURN_BUDGET_S
                while not queue.empty() and time.monotonic() < budget:
                    self._apply(queue.get_nowait(), now)
            mono = time.monotonic()
            # O(nodes): not every turn; but soon after batches came, so the intervals waiting
            # for the watermark stay few (a backlog would pile them up in every checkpoint)
            if mono - last_tick >= (self.tick_seconds if first is None else TICK_BUSY_S):
                self._tick(now)
                last_tick = mono
            self.turns += 1
            self.notifier.heartbeat()
            # The checkpoint is written beside the loop, one at a time: a slow disk holds the
            # publishing back, never the reading (batches waiting would be read as late).
            # A node that has just caught up (a backlog read) is shown at once, not a second on.
            due = (
                self.publish_seconds if not self._caught_up_now else self.caught_up_publish_seconds
            )
            if mono - last_publish >= due and (publishing is None or publishing.done()):
                self._caught_up_now = False
                publishing = tg.create_task(self._checkpoint_then_publish(), name="checkpoint")
                last_publish = mono
            await asyncio.sleep(0)

    def _apply(self, batch: Batch, now_us: int) -> None:
        node = batch.node
        ns = self.acc.nodes.get(node)
        if ns is None:  # (a node a reload removed: what it had queued)
            return
        if batch.caught_up and not ns.caught_up:
            self._caught_up_now = True
        restarts, errors, aborted = ns.restarts, ns.parse_errors, ns.aborted
        skewed = ns.clock_skew_us > 0
        if self.now.suspected and batch.newest_us is not None:  # (does it bear the step out?)
            allowance_s = self.acc.clock_allowance_us / SECOND
            if self.now.journal_time(batch.newest_us / SECOND, allowance_s):
                now_us = self._now_us()
        spilled = OTHER_MODELS in ns.models
        recs = apply_batch(batch, self.parsers[node], self.acc, now_us)
        self.recent.add_all(recs)
        if not spilled and OTHER_MODELS in ns.models:  # (once: the checkpoint keeps it)
            log.warning(
                "node %s: more than %d models: the requests of the others count under model=%s",
                node,
                MAX_MODELS,
                OTHER_MODELS,
            )
        if (ns.clock_skew_us > 0) != skewed:  # once per episode, at its start and its end
            if skewed:
                log.info("node %s: its journal times are in line with this clock again", node)
            else:
                log.warning(
                    "node %s: journal entry stamped %s, %.0f s ahead of this clock: counted as "
                    "it is, but the watermark does not go past now (clock skew, or a corrupted "
                    "entry; see smllm_source_clock_skew_seconds)",
                    node,
                    iso(now_us + ns.clock_skew_us),
                    ns.clock_skew_us / SECOND,
                )
        if ns.restarts != restarts or ns.parse_errors != errors or ns.aborted != aborted:
            self._log_events(node, recs, ns.aborted - aborted)  # (rare: look only then)
        if batch.position:
            self.positions[node] = batch.position
            kind = self._running_kind.get(node)
            if kind is not None:
                self._position_kind[node] = kind
        ended = self._ended.get(node)
        if ended is not None and ended[0] is batch:
            ended[1].set()
        if not batch.up and batch.error and self._down_reason.get(node) != batch.error:
            self._down_reason[node] = batch.error
        elif batch.up and self._down_reason.pop(node, None) is not None:
            log.info("node %s: following its journal again", node)

    def _log_events(self, node: str, recs: list[Record], aborted: int) -> None:
        """Log the first parse errors among what a batch added, and its restarts and aborted
        requests (in summary when they come often: `Repeats`)."""
        for rec in recs:
            if type(rec) is not Event:
                continue
            if rec.kind is EventKind.PARSE_ERROR:
                self._errors_logged[node] += 1
                if self._errors_logged[node] <= ERRORS_LOGGED:
                    log.warning(
                        "node %s: parse error: %s%s",
                        node,
                        rec.detail,
                        " (further parse errors are counted, not logged)"
                        if self._errors_logged[node] == ERRORS_LOGGED
                        else "",
                    )
            elif rec.kind is EventKind.RESTART:
                self._repeats.note(
                    node, RESTARTS, 1, f"llama-server restarted ({rec.detail})", rec.detail
                )
        if aborted:
            self._repeats.note(
                node,
                ABORTED,
                aborted,
                f"{aborted} requests in flight aborted: their llama-server has exited",
            )

    # -- reload ---------------------------------------------------------------------------------

    def _reload_pending(self) -> bool:
        """A config read (or its take-up) has not ended: an abandoned one counts until its
        thread ends, so that a hung file system never gathers threads."""
        if self._reloading is not None and not self._reloading.done():
            return True
        return self._reader is not None and self._reader.is_alive()

    def _read_config(self, reloader: Callable[[], Config]) -> asyncio.Future[Config]:
        """`reloader()` in a thread of its own (a daemon thread: one that hangs never holds
        the process's end up), its outcome as a future of the loop (dropped once abandoned)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Config] = loop.create_future()

        def settle(new: Config | None, error: Exception | None) -> None:
            if future.done():  # (abandoned)
                return
            if error is not None:
                future.set_exception(error)
            else:
                assert new is not None
                future.set_result(new)

        def read() -> None:
            new, error = None, None
            try:
                new = reloader()
            except Exception as e:  # (ConfigError lists every problem)
                error = e
            with suppress(RuntimeError):  # (the loop closed meanwhile)
                loop.call_soon_threadsafe(settle, new, error)

        self._reader = threading.Thread(target=read, name="config reload", daemon=True)
        self._reader.start()
        return future

    async def _reload(self, queue: asyncio.Queue[Batch], tg: asyncio.TaskGroup) -> None:
        """Re-read the config (SIGHUP) and take it up: refused, with its problems logged, when
        it does not validate (the one in force stays); else what changed is logged and applied
        as a restart would apply it, every unchanged node's source left running. A read not
        done within `reload_deadline_seconds` is abandoned: the config in force stays."""
        try:
            if self.reloader is None:
                log.warning("reload: this daemon has no config file to re-read")
                return
            try:
                new = await asyncio.wait_for(
                    self._read_config(self.reloader), self.reload_deadline_seconds
                )
            except TimeoutError:
                log.error(
                    "reload abandoned, the config in force stays: reading the config has not "
                    "ended in %.0f s (a hung file system, a FIFO?); a SIGHUP reads it again "
                    "once that read has ended",
                    self.reload_deadline_seconds,
                )
                return
            except Exception as e:  # (ConfigError lists every problem)
                lines = logs.LINES if isinstance(e, ConfigError) else None
                log.error("reload refused, the config in force stays: %s", e, extra=lines)
                return
            self._take_reload(new, queue, tg)
        finally:  # (READY=1 even while a node it added has not started: it is running)
            self.notifier.reloaded(self.status())
            self.notifier.status(self.status())

    def _take_reload(self, new: Config, queue: asyncio.Queue[Batch], tg: asyncio.TaskGroup) -> None:
        """Take up the config read anew (see `_reload`)."""
        if new.state_dir != self.config.state_dir:
            log.error(
                "reload refused: state_dir changed (%s -> %s); restart to move the checkpoint",
                self.config.state_dir,
                new.state_dir,
            )
            return
        # the web config read anew, what it protects (TLS, basic auth) taken anew too
        self.server.web_config = new.web_config_file
        diff = changes.between(self.config, new)
        if diff.none:
            log.info("reload: the config is unchanged")
            return
        now = self._now_us()
        while not queue.empty():  # (what the sources handed over is applied first)
            self._apply(queue.get_nowait(), now)
        self._take_config(new, diff)
        for line in diff.lines():
            log.info("reload: %s", line)
        if {"listen_host", "listen_port"} & set(diff.settings):
            tg.create_task(self._rebind(), name="rebind")
        else:  # (from the next connection on)
            self.server.max_connections = min(new.http_max_connections, fd_budget())

    def _take_config(self, new: Config, diff: changes.Changes) -> None:
        old_nodes = self.acc.nodes
        state = state_of(self.acc)
        self.config = new
        acc = self._fresh_accounting()
        notes = restore(acc, state)
        acc.now_us = self.acc.now_us  # (a start-up's age runs on until the next tick)
        acc.init_timelines = {  # (its watchers start again below: until they read, as it was)
            n.name: self.acc.init_timelines[n.name]
            for n in new.init_timelines
            if n.name in self.acc.init_timelines
        }
        for name, ns in acc.nodes.items():  # what its running source said last
            was = old_nodes.get(name)
            if was is not None and name not in {n.name for n in diff.changed}:
                ns.up, ns.caught_up, ns.down_since_us = was.up, was.caught_up, was.down_since_us
                ns.behind_since_us, ns.behind_newest_us = was.behind_since_us, was.behind_newest_us
                ns.lag_us, ns.clock_skew_us = was.lag_us, was.clock_skew_us
        self.acc = acc
        self.recent.keep(acc.nodes)
        for note in notes:
            log.info("reload: %s", note)
        for name in diff.removed:
            task = self._source_tasks.pop(name, None)
            if task is not None:
                task.cancel()
            for table in (self.parsers, self.positions, self.node_since, self._errors_logged):
                table.pop(name, None)
            self._position_kind.pop(name, None)
            self._running_kind.pop(name, None)
            self._forget_unit_watch(name)
            self._entries_base.pop(name, None)
            self._repeats.forget(name)
            self._started.discard(name)
            self._ended.pop(name, None)
            self._down_reason.pop(name, None)
        for parser in self.parsers.values():
            parser.slots, parser.gone_us = new.slots, new.max_request_seconds * SECOND
        assert self._tg is not None
        for node in diff.changed:
            task = self._source_tasks.pop(node.name, None)
            self._forget_unit_watch(node.name)
            self._entries_base[node.name] = self.acc.nodes[node.name].entries
            self._source_tasks[node.name] = self._tg.create_task(
                self._restart_source(node, task), name=f"source {node.name}"
            )
        for node in diff.added:
            self.parsers[node.name] = self._parser(node.name)
            self.positions[node.name] = ""
            self._entries_base[node.name] = 0
            self.node_since[node.name] = new.since_us(self._now_us())
            self.acc.nodes[node.name].newest_us = self.node_since[node.name]
            self._errors_logged[node.name] = 0
            self._start_source(node)
        self._start_timelines()
        self._served, self._served_view = self.acc.snapshot(), None

    async def _restart_source(self, node: NodeConfig, old: asyncio.Task[None] | None) -> None:
        """A changed node's source started again: once the old one has ended and everything it
        handed over is applied (as a retry does), so the new one starts from the position of
        the last batch applied and reads nothing twice."""
        assert self._queue is not None
        if old is not None:
            old.cancel()
            with suppress(asyncio.CancelledError):
                await old
        marker = Batch(node.name, up=False, error="its config changed: starting again")
        applied = asyncio.Event()
        self._ended[node.name] = (marker, applied)
        await self._queue.put(marker)
        await applied.wait()
        await self._follow(node, self._queue)

    async def _rebind(self) -> None:
        """Serve on the reloaded listen address (one rebind at a time; the old server closed
        first, as the address may be the same). When the new address cannot be bound, the old
        one is served again: a reload never takes /metrics down."""
        async with self._rebinding:
            c, old = self.config, self.server
            if (c.listen_host, c.listen_port) == (old.host, old.port):
                return
            await old.close()
            for host, port in ((c.listen_host, c.listen_port), (old.host, old.port)):
                server = self._server(host, port)
                try:
                    self.address = await server.start()
                except (OSError, ConfigError) as e:  # (taken; a web config not read in time)
                    log.error("reload: cannot serve on %s:%d: %s", host, port, e)
                    continue
                self.server = server
                if (host, port) != (c.listen_host, c.listen_port):
                    log.warning("reload: serving on %s:%d as before", host, port)
                    # (so that a later reload with the new address tries it again)
                    self.config = dataclasses.replace(c, listen_host=host, listen_port=port)
                return
            log.error("reload: /metrics is not served (both addresses refused)")

    def _tick(self, now_us: int) -> None:
        for node, parser in self.parsers.items():
            recs = parser.flush(self.acc.read_until(node, now_us))
            if recs:
                ns = self.acc.nodes[node]
                aborted = ns.aborted
                self.acc.add_all(recs)
                self.recent.add_all(recs)
                if ns.aborted != aborted:
                    self._log_events(node, recs, ns.aborted - aborted)
        self.acc.advance(now_us)
        self._watch_holder(now_us)
        self._repeats.flush()
        self._watch_units()

    def _watch_units(self) -> None:
        """Say once of each node whose source has been up and caught up for
        `quiet_unit_seconds` without one entry of its unit since it was configured: a misspelt
        `unit:` reads nothing, and would show as followed, idle, for ever."""
        mono = time.monotonic()
        for node in self.config.nodes:
            name = node.name
            ns = self.acc.nodes.get(name)
            if isinstance(node, FileNode) or name in self._quiet_said or ns is None:
                continue
            if ns.entries > self._entries_base.get(name, 0) or not (ns.up and ns.caught_up):
                self._quiet_since.pop(name, None)
                continue
            since = self._quiet_since.setdefault(name, mono)
            if mono - since >= self.quiet_unit_seconds:
                self._quiet_said.add(name)
                log.warning(
                    "node %s: no entry of unit %s read in %.0f s of following its journal: if "
                    "its llama-server has run meanwhile, check the node's `unit:` (journalctl "
                    "-u %s on the node)",
                    name,
                    node.unit,
                    mono - since,
                    node.unit,
                )

    def _forget_unit_watch(self, name: str) -> None:
        self._quiet_since.pop(name, None)
        self._quiet_said.discard(name)

    def _watch_holder(self, now_us: int) -> None:
        """Log once which node holds the cluster figures back, what for and until when, and
        once when it no longer does."""
        holder = self.acc.holder(now_us)
        key = None if holder is None else holder[:2]
        if key == self._holder:
            return
        if self._holder is not None:
            log.info("node %s no longer holds the cluster figures back", self._holder[0])
        if holder is not None:
            log.warning("node %s holds the cluster figures back: %s", holder[0], holder[2])
        self._holder = key

    # -- checkpoint, then publish --------------------------------------------------------------

    def state(self) -> bytes:
        """Everything to resume from, as the checkpoint holds it (encoded)."""
        return Checkpoint.encode(self._state_values())

    def _state_values(self) -> dict[str, Any]:
        """Everything to resume from, as fresh JSON-ready values: nothing in it is shared with
        what the loop goes on changing, so it can be encoded in a worker thread."""
        return {
            "accounting": state_of(self.acc),
            "parsers": {n: p.state() for n, p in self.parsers.items()},
            "positions": dict(self.positions),
            "sources": dict(self._position_kind),  # (each position's kind of source)
            "checkpoint_errors": self.checkpoint_errors,
            "written_at_us": self._now_us(),
        }

    def _write(self, state: dict[str, Any], taken: int) -> None:
        """Write `state`, the `taken`-th taken, unless a newer one is on disk already."""
        data = Checkpoint.encode(state)
        with self._write_lock:
            if taken > self._written:
                self.checkpoint.write(data)
                self._written = taken

    async def _checkpoint_then_publish(self) -> None:
        """Scrapes only ever see values a checkpoint holds: write it, then publish them."""
        snapshot, state, view = self.acc.snapshot(), self._state_values(), self._view_parts()
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
            await self._publish(self._served_view)  # the same values, with the error counted
            self._notify()
            return
        if self._failing:
            log.info("checkpoint %s written again", self.checkpoint.path)
            self._failing = False
        self._served, self._served_view = snapshot, view
        await self._publish(view)
        self._notify()

    def _notify(self) -> None:
        """READY=1 (once all sources started) and STATUS= after a publish."""
        if self._ready() and self.notifier.enabled:
            self.notifier.ready(self.status())
            self.notifier.status(self.status())

    def status(self) -> str:
        """A one-line summary for systemd's STATUS=."""
        snap = self._served
        up = sum(1 for n in snap.nodes if n.up)
        requests = sum(c.requests for n in snap.nodes for c in n.kinds.values())
        return (
            f"{up}/{len(snap.nodes)} sources up, {snap.nodes_busy} nodes busy, "
            f"{requests} requests, accounted until {iso(snap.watermark_us)}"
        )

    def publish(self, view: _ViewParts | None = None) -> None:
        """Publish the last checkpointed snapshot: scrapes show it (rendered when the first of
        them asks) until the next, and the status pages with it (with the recent intervals and
        requests in flight as of that snapshot: `view`)."""
        self.pages.metrics = Published(
            self.renderer, self._served, self.checkpoint_errors, self.pages.metrics
        )
        now_us, recent, in_flight, errors = view if view is not None else self._view_parts()
        status = pages.StatusView(
            now_us=now_us,
            snapshot=self._served,
            kinds=self.config.kinds,
            recent=recent,
            in_flight=in_flight,
            errors=errors,
            version=self.version,
        )
        self.pages.status = Page(
            functools.partial(pages.status_html, status), "text/html; charset=utf-8"
        )
        self.pages.api = Page(functools.partial(pages.status_json, status), "application/json")

    def _view_parts(self) -> _ViewParts:
        """What the status pages show besides the snapshot, taken with it (the rings' part
        older than the page's hour dropped: a ring that did not change is not copied)."""
        now_us = self._now_us()
        in_flight = {n: tuple(ns.in_flight.values()) for n, ns in self.acc.nodes.items()}
        recent = self.recent.copy(since_us=now_us - pages.StatusView.window_us)
        return now_us, recent, in_flight, dict(self._down_reason)

    async def _publish(self, view: _ViewParts | None = None) -> None:
        """`publish`; and if the last one was scraped, whoever scrapes that often finds this one
        rendered already (in a worker thread: scrapes are answered meanwhile)."""
        previous = self.pages.metrics
        self.publish(view)
        published = self.pages.metrics
        if previous is not None and published is not None and previous.scraped is not None:
            await asyncio.to_thread(published.prepare_like, previous)

    def resume(self) -> None:
        """Take up where the checkpoint left off; an unusable one is set aside, never fatal."""
        self.checkpoint.remove_stale_temps()
        try:
            saved = self.checkpoint.load()
        except CheckpointError as e:
            self._refuse(str(e))
            return
        if saved is None:
            log.info(
                "no checkpoint in %s: every node starts at since=%s",
                self.checkpoint.path.parent,
                self.config.since,
            )
            return
        try:
            notes = restore(self.acc, saved["accounting"])
            parsers = {
                n: self._parser(n, st) for n, st in saved["parsers"].items() if n in self.parsers
            }
            positions = {n: str(p) for n, p in saved["positions"].items() if n in self.positions}
            errors = int(saved["checkpoint_errors"])
        except Exception as e:  # any misfit of its structure: refuse it, never crash on it
            self.acc = self._fresh_accounting()
            self._refuse(f"{self.checkpoint.path}: does not fit ({type(e).__name__}: {e})")
            return
        self.parsers.update(parsers)
        self.positions.update(positions)
        self.checkpoint_errors = errors
        for name in self.node_since:
            if name in saved["parsers"]:
                self.node_since[name] = self.acc.origin_us
        kinds = saved.get("sources")  # (a checkpoint written before it had them: none)
        for node in self.config.nodes:
            was = kinds.get(node.name) if isinstance(kinds, dict) else None
            if self.positions[node.name]:
                self._position_kind[node.name] = was if isinstance(was, str) else node.source
        for note in notes:
            log.warning("checkpoint %s: %s", self.checkpoint.path, note)
        self._served, self._served_view = self.acc.snapshot(), None
        log.info(
            "resuming from checkpoint %s (%d nodes, accounted until %s)",
            self.checkpoint.path,
            len(positions),
            iso(self.acc.watermark_us),
        )

    def _refuse(self, why: str) -> None:
        aside = self.checkpoint.set_aside()
        log.error(
            "%s; starting every node from since=%s instead%s",
            why,
            self.config.since,
            f" (the file is kept as {aside})" if aside else "",
        )


async def _off_loop(call: Callable[[], bool]) -> bool:
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
