"""What every source kind shares: the Source protocol, SourceError, and report progress."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from exporter.base.records import Batch

# (node, entries read, journal time reached): what a report shows while an SSH node streams
Progress = Callable[[str, int, int | None], None]


class Source(Protocol):
    """Follows one node's journal, handing Batches to `out` until cancelled; it may raise
    SourceError (or anything else) when it cannot go on, and is then started again."""

    async def run(self, out: asyncio.Queue[Batch]) -> None: ...


class SourceError(Exception):
    """A source cannot read its node's journal; the message names the node and why."""
