"""exporter.accounting.contract: the names the compiled add_all reads are the classes' own."""

from __future__ import annotations

from dataclasses import fields

from exporter.accounting.accounting import Accounting
from exporter.accounting.contract import (
    ACCOUNTING_READS,
    KIND_READS,
    NODE_READS,
    RECORD_TYPES,
    RecordTypes,
)
from exporter.accounting.figures import KindCounters, NodeState
from exporter.base.records import Event, EventKind, Interval

from support.settings import default_settings


def test_the_attributes_read_are_the_classes_own() -> None:
    assert set(NODE_READS) <= {f.name for f in fields(NodeState)}
    assert set(KIND_READS) <= {f.name for f in fields(KindCounters)}
    acc = Accounting(["n"], default_settings(), origin_us=0)
    assert all(hasattr(acc, name) for name in ACCOUNTING_READS)
    assert len(set(NODE_READS)) == len(NODE_READS) and len(set(KIND_READS)) == len(KIND_READS)


def test_the_records_are_the_ones_the_parser_makes() -> None:
    assert RecordTypes(Interval, Event, EventKind.STARTED) == RECORD_TYPES
