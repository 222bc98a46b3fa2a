"""A config read anew, taken up while running as a restart would take it up.

Every unchanged node's source is left running. What the sources handed over is applied first;
then the counters go through a checkpoint's state into an accounting built from the new config
(a removed node's are dropped; changed kinds or buckets reset theirs), each unchanged node keeps
what its running source said last, a removed node's record goes whole, a changed node's source
starts again, an added node starts at `since`. A new listen address is bound beside the loop.
"""

from __future__ import annotations

import asyncio

from exporter.accounting.accounting import Accounting
from exporter.base.records import Batch
from exporter.checkpoint.codec import restore, state_of
from exporter.config import changes
from exporter.config.schema import Config
from exporter.daemon.apply import Applier
from exporter.daemon.core import Core, accounting_for
from exporter.daemon.listen import Listener
from exporter.daemon.logger import log
from exporter.daemon.nodes import new_node, tune
from exporter.daemon.publish import Publisher
from exporter.daemon.supervise import Supervisor
from exporter.daemon.timelines import Timelines

LISTEN_KEYS = {"listen_host", "listen_port"}  # the settings that move the server


class Reconfigure:
    """Takes a new config up into the running parts (see the module docstring)."""

    def __init__(
        self,
        core: Core,
        applier: Applier,
        supervisor: Supervisor,
        timelines: Timelines,
        listener: Listener,
        publisher: Publisher,
        queue: asyncio.Queue[Batch],
        tg: asyncio.TaskGroup,
    ) -> None:
        self.core = core
        self.applier = applier
        self.supervisor = supervisor
        self.timelines = timelines
        self.listener = listener
        self.publisher = publisher
        self.queue = queue
        self.tg = tg

    def take(self, new: Config) -> None:
        """Take up `new`: refused when it moves the state directory, nothing done when it
        changes nothing (but the web config, read anew with what it protects)."""
        core = self.core
        if new.state_dir != core.config.state_dir:
            log.error(
                "reload refused: state_dir changed (%s -> %s); restart to move the checkpoint",
                core.config.state_dir,
                new.state_dir,
            )
            return
        # the web config read anew, what it protects (TLS, basic auth) taken anew too
        self.listener.server.web_config = new.web_config_file
        diff = changes.between(core.config, new)
        if diff.none:
            log.info("reload: the config is unchanged")
            return
        now = core.now_us()
        while not self.queue.empty():  # (what the sources handed over is applied first)
            self.applier.apply(self.queue.get_nowait(), now)
        self._take_config(new, diff)
        for line in diff.lines():
            log.info("reload: %s", line)
        if LISTEN_KEYS & set(diff.settings):
            self.tg.create_task(self.listener.rebind(), name="rebind")
        else:  # (from the next connection on)
            self.listener.take_limits(new.http_max_connections)

    def _take_config(self, new: Config, diff: changes.Changes) -> None:
        core = self.core
        old = core.acc
        core.acc = _carried_over(old, new, core.since_us, {n.name for n in diff.changed})
        if old.history is not None and old.history.nodes == core.acc.node_names:
            core.acc.history = old.history  # (the same nodes: the samples still hold)
        core.config = new
        core.recent.keep(core.acc.nodes)
        for name in diff.removed:
            node = core.nodes.pop(name, None)
            if node is not None and node.task is not None:
                node.task.cancel()
        for node in core.nodes.values():
            tune(node.parser, new)
        for config in diff.changed:
            node = core.nodes[config.name]
            node.forget_quiet()
            node.entries_base = core.acc.nodes[config.name].entries
            self.supervisor.restart(node, config)
        for config in diff.added:
            node = new_node(config, new, new.since_us(core.now_us()))
            core.nodes[config.name] = node
            core.acc.nodes[config.name].newest_us = node.since_us
            self.supervisor.start(node)
        self.timelines.start()
        self.publisher.serve_now()


def _carried_over(old: Accounting, new: Config, origin_us: int, changed: set[str]) -> Accounting:
    """`old`'s counters through a checkpoint's state into an accounting built from `new`; each
    node its config left as it was keeps what its running source said last."""
    acc = accounting_for(new, origin_us)
    notes = restore(acc, state_of(old))
    acc.now_us = old.now_us  # (a start-up's age runs on until the next tick)
    acc.init_timelines = {  # (its watchers start again: until they read, as it was)
        n.name: old.init_timelines[n.name]
        for n in new.init_timelines
        if n.name in old.init_timelines
    }
    for name, ns in acc.nodes.items():  # what its running source said last
        was = old.nodes.get(name)
        if was is not None and name not in changed:
            ns.up, ns.caught_up, ns.down_since_us = was.up, was.caught_up, was.down_since_us
            ns.behind_since_us, ns.behind_newest_us = was.behind_since_us, was.behind_newest_us
            ns.lag_us, ns.clock_skew_us = was.lag_us, was.clock_skew_us
    for note in notes:
        log.info("reload: %s", note)
    return acc
