"""What the daemon's parts share: the config in force, its node records, the accounting, the clock.

A reload replaces the config, the accounting and the records (`reconfigure.py`); every part
reads them here, so none keeps a stale one.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.accounting.accounting import Accounting
from exporter.accounting.history import History
from exporter.accounting.lanes import Recent
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.daemon.clock import SteadyClock
from exporter.daemon.nodes import Node, new_node
from exporter.ingest.settings import settings


class Core:
    """See the module docstring. `clock`: the wall clock; `monotonic`: the clock that holds it
    across a step of it (`SteadyClock`)."""

    def __init__(
        self, config: Config, clock: Callable[[], float], monotonic: Callable[[], float]
    ) -> None:
        self.config = config
        self.clock = clock
        self.now = SteadyClock(clock, monotonic)
        self.since_us = config.since_us(self.now_us())
        names = [n.name for n in config.nodes]
        self.recent = Recent(names)  # each node's latest intervals, for the status page
        self.acc = accounting_for(config, self.since_us)
        self.nodes: dict[str, Node] = {
            n.name: new_node(n, config, self.since_us) for n in config.nodes
        }

    def now_us(self) -> int:
        """Now, as the daemon takes it (see `SteadyClock`)."""
        return int(self.now() * SECOND)


def accounting_for(config: Config, origin_us: int) -> Accounting:
    """A fresh accounting as `config` says, counting from `origin_us`, taking the samples
    the status page reads."""
    acc = Accounting([n.name for n in config.nodes], settings(config), origin_us=origin_us)
    acc.history = History(acc.node_names)
    return acc
