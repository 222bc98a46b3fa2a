"""The ingest step: one source Batch through its node's parser into the accounting, and what it did.

Nothing a batch holds can raise out of it. The parser turns what it cannot read into parse
errors; should the accounting still fail on what it was given (a defect), the batch is dropped,
counted as one parse error, and the node marked down with the error, so the other nodes carry
on and the node goes on with its next batch instead of crash-looping on this one.

Each step returns its `Outcome`: the records it added, and what happened that the daemon says
(parse errors, llama-server restarts, requests aborted, the source caught up, a clock skew begun
or ended, a node's models spilled over `MAX_MODELS`). The daemon, the report's backfill and the
benchmarks run the same step.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import NodeState
from exporter.base.records import Batch, Event, EventKind, Record
from exporter.parse.parser import Parser
from exporter.parse.router import OTHER_MODELS

log = logging.getLogger(__name__)

_PARSE_ERROR, _RESTART = EventKind.PARSE_ERROR, EventKind.RESTART


class Outcome(NamedTuple):
    """What one ingest step did, besides counting. (A NamedTuple: one is made per batch, and
    it is the quickest immutable value to make.)"""

    records: list[Record]  # what it added to the accounting, in order
    # its parse errors and llama-server restarts, in order (the events the daemon logs)
    events: tuple[Event, ...] = ()
    aborted: int = 0  # requests in flight aborted: their llama-server exited
    caught_up: bool = False  # its source says it has caught up, which it had not said before
    skew_began_us: int | None = None  # a clock skew began: the node runs this far ahead of now
    skew_ended: bool = False  # the node's journal times are in line with now again
    models_spilled: bool = False  # more models than MAX_MODELS: the rest count as OTHER_MODELS


def apply_batch(batch: Batch, parser: Parser, acc: Accounting, now_us: int) -> Outcome:
    """One source batch through the node's parser into the accounting; returns what it did."""
    node = batch.node
    ns = acc.nodes[node]
    caught_up = batch.caught_up and not ns.caught_up
    skewed, spilled = ns.clock_skew_us > 0, OTHER_MODELS in ns.models
    counts = _counts(ns)
    if batch.reconnected:
        acc.source_reconnected(node)
    if batch.gap:
        acc.source_gap(node)
    recs: list[Record] = [
        Event(node, now_us, EventKind.PARSE_ERROR, detail=error) for error in batch.errors
    ]
    parser.horizon_us = now_us  # (time from outside passes no faster than the exporter's)
    recs += parser.feed_all(batch.lines)
    up = batch.up
    ended = ns.last_end_us
    try:
        acc.add_all(recs)
    except Exception as e:  # a defect: never let it take the daemon down, nor loop on it
        why = f"internal error accounting a batch ({type(e).__name__}: {str(e)[:200]})"
        log.exception("node %s: %s; its %d lines are skipped", node, why, len(batch.lines))
        recs = [Event(node, now_us, EventKind.PARSE_ERROR, detail=why)]
        acc.add_all(recs)
        up = False
    ended = ns.last_end_us if ns.last_end_us != ended else None  # (a request ended since)
    if batch.entries or batch.newest_us is not None or ended is not None:
        acc.line_read(node, batch.newest_us, batch.entries, now_us=now_us, ended_us=ended)
    newest = ns.newest_us
    acc.source_state(
        node, up=up, caught_up=batch.caught_up and up, now_us=now_us, lag_us=now_us - newest
    )
    skew = ns.clock_skew_us > 0
    events, aborted = _events(recs, ns, counts)
    return Outcome(
        recs,
        events,
        aborted,
        caught_up=caught_up,
        skew_began_us=ns.clock_skew_us if skew and not skewed else None,
        skew_ended=skewed and not skew,
        models_spilled=not spilled and OTHER_MODELS in ns.models,
    )


def flush(parser: Parser, acc: Accounting, now_us: int) -> Outcome:
    """The tick's step for one node: its parser told that nothing older than what the node has
    read is unread (stops that have waited are decided), what that ends into the accounting."""
    ns = acc.nodes[parser.node]
    recs = parser.flush(acc.read_until(parser.node, now_us))
    if not recs:
        return Outcome(recs)
    counts = _counts(ns)
    acc.add_all(recs)
    events, aborted = _events(recs, ns, counts)
    return Outcome(recs, events, aborted)


def _counts(ns: NodeState) -> tuple[int, int, int]:
    return ns.restarts, ns.parse_errors, ns.aborted


def _events(
    recs: list[Record], ns: NodeState, before: tuple[int, int, int]
) -> tuple[tuple[Event, ...], int]:
    """The parse errors and restarts among `recs`, and how many requests they aborted, from
    the node's counters against `before` (the records are looked through only when one moved:
    rarely)."""
    restarts, errors, aborted = before
    if ns.restarts == restarts and ns.parse_errors == errors:
        return (), ns.aborted - aborted
    events = tuple(
        rec
        for rec in recs
        if type(rec) is Event and (rec.kind is _PARSE_ERROR or rec.kind is _RESTART)
    )
    return events, ns.aborted - aborted
