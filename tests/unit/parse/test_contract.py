"""What the parser hands the compiled feed names what the Python side really holds."""

from __future__ import annotations

from dataclasses import fields

from exporter.base.records import Event, EventKind, Interval
from exporter.parse.context import NO_BLOCK, Block
from exporter.parse.contract import BLOCK_FIELDS, FEED_TYPES, PARSER_READS
from exporter.parse.parser import Parser


def test_the_parser_holds_every_attribute_the_compiled_feed_reads() -> None:
    assert set(PARSER_READS) <= {f.name for f in fields(Parser)}


def test_a_block_takes_its_fields_in_the_order_handed_over() -> None:
    assert Block(*range(len(BLOCK_FIELDS))) == Block(
        **dict(zip(BLOCK_FIELDS, range(6), strict=True))
    )


def test_the_feed_types_are_the_records_and_values_a_launch_and_a_total_make() -> None:
    assert FEED_TYPES.interval is Interval and FEED_TYPES.event is Event
    assert FEED_TYPES.started is EventKind.STARTED and FEED_TYPES.empty == ""
    assert FEED_TYPES.block is Block and FEED_TYPES.no_block is NO_BLOCK
