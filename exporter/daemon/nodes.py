"""One node's record in the daemon: its parser, its source's task and position, what is watched.

A reload adds and removes records whole; a node whose config changed keeps its record (its
parser, position and counters) and has its source started again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from exporter.base.records import Batch
from exporter.base.times import SECOND
from exporter.checkpoint.codec import parser_of
from exporter.config.schema import Config
from exporter.daemon.repeats import Repeats
from exporter.parse.parser import Parser
from exporter.sources.registry import NodeConfig

# a Batch saying a node's source ended, and the event set once the ingest loop has applied it
Ended = tuple[Batch, asyncio.Event]


@dataclass(eq=False)
class Node:
    """A node the daemon follows (see the module docstring)."""

    config: NodeConfig
    parser: Parser
    since_us: int  # where its source starts while it has no position
    repeats: Repeats  # its restarts and aborted requests, logged in summary
    position: str = ""  # where the last batch applied left its source
    position_kind: str | None = None  # the kind of source `position` is of
    running_kind: str | None = None  # the kind of source started last (its positions' kind)
    task: asyncio.Task[None] | None = None  # following its source
    started: bool = False  # its source has been started (the daemon is ready once all have)
    ended: Ended | None = None  # its source's last word, until applied
    down_reason: str | None = None  # its source's error while down
    errors_logged: int = 0  # parse errors logged (they are all counted)
    # the unit check: its entries counter when its source was last configured, since when
    # (monotonic) it has been caught up with no entry since, and whether it said so
    entries_base: int = 0
    quiet_since: float | None = None
    quiet_said: bool = False

    @property
    def name(self) -> str:
        return self.config.name

    def forget_quiet(self) -> None:
        """Start the unit check over (its source was configured anew)."""
        self.quiet_since, self.quiet_said = None, False


def new_node(config: NodeConfig, settings: Config, since_us: int) -> Node:
    """A node's record as it starts: a fresh parser, no position."""
    return Node(
        config,
        parser_for(config.name, settings),
        since_us,
        Repeats(config.name, time.monotonic),
    )


def parser_for(name: str, settings: Config, state: dict[str, Any] | None = None) -> Parser:
    """A node's parser (from its checkpointed state), as the config says."""
    parser = Parser(name) if state is None else parser_of(name, state)
    tune(parser, settings)
    return parser


def tune(parser: Parser, settings: Config) -> None:
    """What the config says of a parser: its slots, and when a silent server is gone."""
    parser.slots, parser.gone_us = settings.slots, settings.max_request_seconds * SECOND
