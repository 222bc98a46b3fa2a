"""What the parser hands the compiled feed: the names it reads, the types it builds records of.

The compiled feed runs the parser's state machine over the common lines (docs/design.md,
"Layering"). It reads a Parser's attributes and a Block's fields by name, builds Blocks by
position, and makes its records from the FeedTypes it is handed on each call. The switch
(exporter.compiled.switch) hands these layouts to it at import, and it refuses a layout it was
not built for.
"""

from __future__ import annotations

from dataclasses import fields
from typing import NamedTuple

from exporter.base.records import Event, EventKind, Interval
from exporter.parse.context import NO_BLOCK, Block

# A Block's fields, in the order Block takes them
BLOCK_FIELDS = tuple(f.name for f in fields(Block))

# What the compiled feed reads of a Parser by name (and `block`, which it also sets): its node
# and PID, and the context of the PID logging now.
PARSER_READS = ("node", "pid", "started", "last_timed", "block", "task_reasons")


class FeedTypes(NamedTuple):
    """What the compiled feed makes records of (it builds the NamedTuples as their __new__
    would)."""

    interval: type[Interval]
    started: EventKind  # a launch's Event kind
    empty: str  # a timed Interval's reason, and a record's model outside router mode
    event: type[Event]
    block: type[Block]
    no_block: Block


FEED_TYPES = FeedTypes(Interval, EventKind.STARTED, "", Event, Block, NO_BLOCK)
FEED_TYPES_FIELDS = FeedTypes._fields
