"""One source Batch through a node's parser into the accounting: the ingest step, and its GC tuning.

Nothing a batch holds can raise out of it. The parser turns what it cannot read into parse
errors; should the accounting still fail on what it was given (a defect), the batch is dropped,
counted as one parse error, and the node marked down with the error, so the other nodes carry
on and the node goes on with its next batch instead of crash-looping on this one.
"""

from __future__ import annotations

import ctypes
import gc
import logging

from exporter.accounting.accounting import Accounting
from exporter.base.records import Batch, Event, EventKind, Record
from exporter.parse.parser import Parser

log = logging.getLogger(__name__)

GC_YOUNG = 10_000  # allocations between collections of the young generation (Python: 700)


def apply_batch(batch: Batch, parser: Parser, acc: Accounting, now_us: int) -> list[Record]:
    """One source batch through the node's parser into the accounting; returns the records
    it added (the daemon logs some of them)."""
    node = batch.node
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
    ns = acc.nodes[node]
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
    return recs


def tune_gc() -> None:
    """The cyclic garbage collector as the service runs it (the daemon's `run_until_signalled`,
    the report, the ingest benchmark).

    What exists by now (modules, the config) lives as long as the process: the collector need
    not walk it again (a full collection of it held the event loop ~80 ms: a scrape that slow);
    what is made from here on (connections come and go) is collected as ever. Nearly everything
    the ingest path makes dies young by reference counting: collect the young generation every
    10,000 allocations, not every 700."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    _fixed_mmap_threshold()


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024


def _fixed_mmap_threshold() -> None:
    """Blocks of 128 KiB and more (the 1 MiB reads of a file source, decoded journal chunks)
    from mmap, always. glibc raises its threshold after the first such block is freed, so the
    later ones come from the heap, which they fragment: under bench/soak the free memory glibc
    kept grew from 12 to 32 MB over 10M lines (+3..28% resident) while Python's own blocks stayed
    flat. A fixed threshold kept it flat. (No glibc, no mallopt: nothing to do.)"""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
