"""Sources: where a node's journal lines come from (dump files, the local journal, SSH)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from exporter.logline import Batch


class Source(Protocol):
    """Follows one node's journal, handing Batches to `out` until cancelled; it may raise
    SourceError (or anything else) when it cannot go on, and is then started again."""

    async def run(self, out: asyncio.Queue[Batch]) -> None: ...


class SourceError(Exception):
    """A source cannot follow its node's journal; the message names the node and why."""
