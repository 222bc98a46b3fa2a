"""What each tick watches besides the figures: who holds them back, a unit that logs nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from exporter.accounting.accounting import Accounting
from exporter.daemon.logger import log
from exporter.daemon.nodes import Node
from exporter.sources.file import FileNode

# a node whose source has been up and caught up this long without one entry of its unit says so
QUIET_UNIT_S = 600.0


class HolderWatch:
    """Log once which node holds the cluster figures back, what for and until when, and once
    when it no longer does."""

    def __init__(self) -> None:
        self.holder: tuple[str, str] | None = None  # (node, why) holding the figures back

    def watch(self, acc: Accounting, now_us: int) -> None:
        holder = acc.holder(now_us)
        key = None if holder is None else holder[:2]
        if key == self.holder:
            return
        if self.holder is not None:
            log.info("node %s no longer holds the cluster figures back", self.holder[0])
        if holder is not None:
            log.warning("node %s holds the cluster figures back: %s", holder[0], holder[2])
        self.holder = key


class UnitWatch:
    """Say once of each node whose source has been up and caught up for `quiet_seconds`
    without one entry of its unit since it was configured: a misspelt `unit:` reads nothing,
    and would show as followed, idle, for ever. (A dump has no unit.)"""

    def __init__(
        self, quiet_seconds: float = QUIET_UNIT_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.quiet_seconds = quiet_seconds
        self.clock = clock

    def watch(self, nodes: Iterable[Node], acc: Accounting) -> None:
        mono = self.clock()
        for node in nodes:
            ns = acc.nodes.get(node.name)
            if isinstance(node.config, FileNode) or node.quiet_said or ns is None:
                continue
            if ns.entries > node.entries_base or not (ns.up and ns.caught_up):
                node.quiet_since = None
                continue
            if node.quiet_since is None:
                node.quiet_since = mono
            if mono - node.quiet_since >= self.quiet_seconds:
                node.quiet_said = True
                unit = node.config.unit
                log.warning(
                    "node %s: no entry of unit %s read in %.0f s of following its journal: if "
                    "its llama-server has run meanwhile, check the node's `unit:` (journalctl "
                    "-u %s on the node)",
                    node.name,
                    unit,
                    mono - node.quiet_since,
                    unit,
                )
