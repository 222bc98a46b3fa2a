"""What every source kind shares: the Source and Reader protocols, SourceError, report progress."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from exporter.base.records import Batch

# (node, entries read, journal time reached): what a report shows while an SSH node streams
Progress = Callable[[str, int, int | None], None]


class Source(Protocol):
    """Follows one node's journal, handing Batches to `out` until cancelled; it may raise
    SourceError (or anything else) when it cannot go on, and is then started again."""

    async def run(self, out: asyncio.Queue[Batch]) -> None: ...


class Reader(Protocol):
    """What the reader module a source kind names (`SourceKind.reader`) offers, for a node of
    that kind: the daemon's Source, and a report's window."""

    def follow(self, node: Any, since_us: int, position: str) -> Source:
        """The node's Source, from `position` (or `since_us` without one)."""
        ...

    def window(
        self, node: Any, since_us: int, until_us: int, progress: Progress | None = None
    ) -> AsyncIterator[Batch]:
        """The node's entries from `since_us` to (at least) `until_us` that may matter, as
        Batches; SourceError when they cannot be read."""
        ...


class SourceError(Exception):
    """A source cannot read its node's journal; the message names the node and why."""
