"""The checkpoint's schema: every field a checkpoint of this version holds, and how it is checked.

`check(SCHEMA, value, "")` refuses a value of another type, a negative counter or a time the
exporter cannot represent, naming where it is (`shapes.py` has the checks it is made of). The
start-up tracker's own fields are checked as it reads them (`Tracker.from_state`).
"""

from __future__ import annotations

from typing import Any

from exporter.base.records import CANCELLED, ERROR_REASON
from exporter.base.times import fits
from exporter.checkpoint.layout import KIND_COUNTERS, MAX_COUNT, NODE_COUNTERS, VERSION
from exporter.checkpoint.shapes import (
    FLAG,
    INT,
    TEXT,
    Check,
    by_length,
    int_in,
    list_of,
    map_of,
    one_of,
    optional,
    record,
    refusal,
    row,
)
from exporter.parse.contract import BLOCK_FIELDS


def check(what: Check, value: Any, where: str) -> None:
    """`value` (at `where`) against `what`; ValueError naming the first field that does not fit."""
    what(value, where)


def _time(value: Any, where: str) -> None:
    if type(value) is not int or not fits(value):
        raise refusal(value, where, "not a time the exporter can represent")


def _by_tracker(value: Any, where: str) -> None:
    """(A start-up tracker's field: `Tracker.from_state` checks it as it reads it.)"""


COUNT = int_in(0, MAX_COUNT, "not a counter")
_HISTOGRAM = (list_of(COUNT), COUNT)
_KIND = row(*[COUNT] * len(KIND_COUNTERS), *_HISTOGRAM * 3, COUNT, COUNT)
_STARTUPS = record(
    dict.fromkeys(("last", "current", "last_pid", "started_due"), _by_tracker),
    {"last_wake": _by_tracker},  # (a server that never slept: none)
)
NODE = record(
    {
        **dict.fromkeys(NODE_COUNTERS, COUNT),
        "newest_us": _time,
        "last_end_us": optional(_time),
        "start_lines": FLAG,
        # (slot, task, launched) or, of a router's model instance, (slot, task, model, launched)
        "in_flight": list_of(by_length({3: row(INT, INT, _time), 4: row(INT, INT, TEXT, _time)})),
        "untimed": map_of(row(COUNT, COUNT)),
        "slots": optional(COUNT),
        "server_up": optional(COUNT),
        "models": map_of(row(COUNT, COUNT, COUNT)),
        "startups": _STARTUPS,  # (its fields: Tracker.from_state's)
        "asleep_since_us": optional(_time),
        "asleep_us": COUNT,
        "queues": map_of(row(COUNT, COUNT, COUNT)),
        "kinds": map_of(_KIND),
    }
)
ACCOUNTING = record(
    {
        "origin_us": _time,
        "watermark_us": _time,
        "kinds": list_of(row(TEXT, optional(INT), optional(INT))),
        "buckets_us": list_of(INT),
        "prompt_buckets_us": list_of(INT),
        "generation_buckets_us": list_of(INT),
        "concurrency_us": list_of(COUNT),
        "mix_us": map_of(COUNT),
        "pending": list_of(row(_time, _time, TEXT, TEXT)),
        "nodes": map_of(NODE),
    }
)
_CONTEXT = {
    "block": row(*[optional(INT)] * len(BLOCK_FIELDS)),
    "pending_stops": list_of(row(INT, INT, INT)),
    "last_timed": list_of(row(INT, INT)),
    "started": list_of(row(INT, INT, INT)),
    "marks": list_of(row(INT, one_of(CANCELLED, ERROR_REASON))),
    "children": list_of(row(INT, INT)),
}


def _instance(value: Any, where: str) -> None:  # (recursive: a router's instances are parsers)
    PARSER(value, where)


PARSER = record(
    {
        "pid": INT,
        **_CONTEXT,
        "n_slots": INT,
        "up": one_of(-1, 0, 1),
        "newest_pid": INT,
        "newest_since_us": INT,
        "second": FLAG,
        "last_us": INT,
        "others": list_of(row(INT, INT, record(_CONTEXT), INT, FLAG)),
        "seen": list_of(INT),
        "recent_totals": list_of(row(INT, INT, optional(COUNT))),
        "instances": list_of(row(INT, TEXT, _instance)),
        "spawned": list_of(row(TEXT, TEXT)),
    }
)
SCHEMA = record(
    {
        "format": one_of(VERSION),
        "accounting": ACCOUNTING,
        "parsers": map_of(PARSER),
        "positions": map_of(TEXT),
        "sources": map_of(TEXT),
        "checkpoint_errors": COUNT,
        "written_at_us": INT,
    }
)
