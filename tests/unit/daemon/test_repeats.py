"""Repeated events in summary: the first as it comes, then at most one line a minute per node."""

from __future__ import annotations

import logging

import pytest

from exporter.daemon.repeats import SUMMARY_S, Repeats


class Clock:
    """An explicit clock (seconds): the summaries follow it, not the machine's."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_steady_stream_is_one_line_a_minute_after_the_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    repeats = Repeats("a", clock)
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
    minutes = 5
    for second in range(int(minutes * SUMMARY_S)):
        clock.now = float(second)
        repeats.note("restarts", 1, f"restarted ({second})", f"pid {second}")
        repeats.flush()
    repeats.flush(every=True)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "node a: restarted (0)"  # the first, as it came
    assert all("besides what was logged" in line for line in lines[1:])  # then summaries only
    assert len(lines) <= 1 + minutes + 1
    counted = sum(int(line.split(": ", 1)[1].split(" ", 1)[0]) for line in lines[1:])
    assert 1 + counted == minutes * SUMMARY_S  # every event is in a line, once


def test_an_event_after_a_quiet_minute_is_news_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    a, b = Repeats("a", clock), Repeats("b", clock)
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
    a.note("restarts", 1, "first")
    clock.now = SUMMARY_S + 1
    a.flush()
    b.flush()
    a.note("restarts", 1, "after a quiet minute")
    b.note("restarts", 1, "another node's first")
    assert [r.getMessage() for r in caplog.records] == [
        "node a: first",
        "node a: after a quiet minute",
        "node b: another node's first",
    ]
