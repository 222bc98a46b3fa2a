"""exporter.web.svg: the charts drawn to the width they are given, parsed (support.dom): the
units of their times, which labels a histogram of many columns keeps, names escaped."""

from __future__ import annotations

import pytest

from exporter.base.times import SECOND
from exporter.web import svg

from support.dom import parse

HOUR = 3600 * SECOND


def test_times_are_hours_from_a_two_hour_window_up() -> None:
    us = 90 * 60 * SECOND + 6 * SECOND
    assert svg.LONG_US == 2 * HOUR
    assert svg.span(us, 2 * HOUR - 1) == "90.1 min"
    assert svg.span(us, 2 * HOUR) == "1.5 h"
    assert svg.span(us, 7 * 24 * HOUR, "node-") == "1.5 node-h"
    assert svg.span(us, HOUR, "node-") == "90.1 node-min"


def test_the_other_charts_tell_a_time_in_hours_from_two_hours_up_never_in_days() -> None:
    assert svg.elapsed(119 * SECOND) == "119 s"
    assert svg.elapsed(2 * HOUR - 1) == "120.0 min"
    assert svg.elapsed(2 * HOUR) == "2.0 h"
    assert svg.elapsed(7 * 24 * HOUR) == "168.0 h"


@pytest.mark.parametrize(
    ("columns", "times", "shares", "ticks"),
    [
        (4, "tick", "", 4),  # every label, on every screen
        (8, "tick wide", "", 8),  # times on wide screens only
        (15, None, "wide", 8),  # shares on wide screens only, every other tick
        (30, None, None, 10),  # no label over the bars, every third tick
    ],
)
def test_a_histogram_keeps_the_labels_its_columns_have_room_for(
    columns: int, times: str | None, shares: str | None, ticks: int
) -> None:
    wall = 100 * HOUR  # (every column's time in hours)
    conc = [wall // columns] * columns
    page = parse(svg.histogram(conc, wall))
    assert len(page.find("rect", "bar")) == columns
    texts = page.in_group("text", "histogram")
    over = [e for e in texts if e.text.endswith(("%", " h"))]
    got_shares = [e.attrs.get("class", "") for e in over if e.text.endswith("%")]
    got_times = [e.attrs.get("class", "") for e in over if e.text.endswith(" h")]
    assert got_shares == ([] if shares is None else [shares] * columns)
    assert got_times == ([] if times is None else [times] * columns)
    numbers = [e.text for e in texts if e.attrs.get("class") == "tick" and e.text.isdigit()]
    assert len(numbers) == ticks and numbers[0] == "0"
    (root,) = page.find("svg")
    assert "viewBox" not in root.attrs and root.attrs["class"] == "fluid"


def test_busy_bars_escape_names_and_keep_within_their_row() -> None:
    name = '<b>"n&1"</b>'
    page = parse(svg.busy([(name, 3 * HOUR), ("idle", 0)], 0, 2 * HOUR))
    (full, none) = page.find("rect", "bar")
    assert full.attrs["data-node"] == name  # (escaped: it reads back whole)
    assert full.attrs["width"] == "100.000%" and full.attrs["data-share"] == "1.500000"
    assert none.attrs["width"] == "0.000%"
    assert [e.text for e in page.find("text") if e.attrs.get("class") == "figure"] == [
        "150.0% · 3.0 h",
        "0.0% · 0.0 h",
    ]
    empty = parse(svg.busy([("a", 0)], 5, 5))  # (an empty window: no division by zero)
    assert empty.find("rect", "bar")[0].attrs["data-share"] == "0.000000"
