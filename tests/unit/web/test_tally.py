"""exporter.web.tally: a flood of occurrences is one log line per interval, with its count."""

from __future__ import annotations

import logging

import pytest

from exporter.web.tally import Tally

log = logging.getLogger("test.tally")


def test_one_line_per_interval_with_how_many_since(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    tally = Tally(log, "things", lambda: now[0], every_s=10)
    with caplog.at_level(logging.WARNING, "test.tally"):
        tally.add("first")
        for _ in range(5):
            now[0] += 1
            tally.add()
        now[0] += 5
        tally.add("the last")
    assert [r.getMessage() for r in caplog.records] == [
        "http: things: 1 since the last such line (first)",
        "http: things: 6 since the last such line (the last)",
    ]
