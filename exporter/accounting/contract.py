"""What the accounting hands the compiled add_all: the names it reads, the types of its records.

The compiled `_accounting.add_all` (exporter/compiled/_accounting.c) reads an Accounting's,
a NodeState's and a KindCounters' attributes by name, and takes the records of the types it is
handed on each call. The switch (exporter.compiled.switch) hands these layouts to it at import,
and it refuses a layout it was not built for (tests/unit/accounting/test_contract.py holds them
to the classes).
"""

from __future__ import annotations

from typing import NamedTuple

from exporter.base.records import Event, EventKind, Interval

# An Accounting's attributes add_all reads (they are the same objects for as long as it runs)
ACCOUNTING_READS = (
    "nodes",
    "node_index",
    "kind_of",
    "kind_bit",
    "buckets_us",
    "prompt_buckets_us",
    "generation_buckets_us",
    "origin_us",
    "watermark_us",
    "pending",
    "sorted_kinds",
    "kind_cache",
)
# A NodeState's attributes add_all reads or adds to, and a KindCounters'
NODE_READS = ("in_flight", "kinds", "late", "last_end_us", "start_lines")
KIND_READS = (
    "requests",
    "request_us",
    "tokens",
    "prompt_tokens",
    "generated_tokens",
    "prompt_us",
    "generation_us",
    "histogram_us",
    "buckets",
    "prompt_histogram_us",
    "prompt_buckets",
    "generation_histogram_us",
    "generation_buckets",
)


class RecordTypes(NamedTuple):
    """What add_all takes records of: intervals, and the events of a launch."""

    interval: type[Interval]
    event: type[Event]
    started: EventKind  # a launch's Event kind


RECORD_TYPES = RecordTypes(Interval, Event, EventKind.STARTED)
RECORD_TYPES_FIELDS = RecordTypes._fields
