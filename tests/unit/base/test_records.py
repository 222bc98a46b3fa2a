"""The records' named field positions are their fields' positions."""

from __future__ import annotations

import pytest

from exporter.base import records
from exporter.base.records import RECORD_FIELDS, Event, Interval, LogLine


@pytest.mark.parametrize(("prefix", "record"), [("L_", LogLine), ("I_", Interval), ("E_", Event)])
def test_each_position_is_named_by_its_record_letter_and_field(
    prefix: str, record: type[LogLine] | type[Interval] | type[Event]
) -> None:
    named = {
        name[len(prefix) :].lower(): value
        for name, value in vars(records).items()
        if name.startswith(prefix) and name[len(prefix) :].isupper()
    }
    assert named == {field: i for i, field in enumerate(record._fields)}


def test_the_layouts_handed_over_are_the_records_fields() -> None:
    assert {r.__name__: r._fields for r in (LogLine, Interval, Event)} == RECORD_FIELDS
