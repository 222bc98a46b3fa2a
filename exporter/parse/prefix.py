"""The time a line's own log prefix states: elapsed since the server's log began, or wall clock.

llama.cpp builds of era D prefix each line with `M.SS.mmm.uuu L ` (minutes, seconds, ms, us and
a level letter) or `YYYY-MM-DD HH:MM:SS.mmm L ` (docs/design.md, "Line shapes by llama.cpp
era"). Start-up reports place a server's milestones by it: only differences between two lines
of one server count, so a wall clock's local time is taken as UTC.
"""

from __future__ import annotations

import re

from exporter.base.times import SECOND

_ELAPSED = re.compile(r"(\d{1,9})\.(\d\d)\.(\d{3})\.(\d{3}) [A-Z] ")
_WALL = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) [A-Z] ")
MAX_CLOCK_US = 2**53  # (an elapsed prefix beyond it is garbled: no clock)


def clock(msg: str) -> int | None:
    """The line's own time from its log prefix, in microseconds: since the server's log began
    (elapsed), or of the wall clock's local time taken as UTC (only differences count); None
    without a prefix."""
    m = _ELAPSED.match(msg)
    if m is not None:
        minutes, secs, ms, us = (int(g) for g in m.groups())
        value = ((minutes * 60 + secs) * 1000 + ms) * 1000 + us
        return value if value < MAX_CLOCK_US else None
    m = _WALL.match(msg)
    if m is None:
        return None
    y, mo, d, h, mi, sec, ms = (int(g) for g in m.groups())
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and sec < 61):
        return None
    days = _days(y, mo, d)
    return (((days * 24 + h) * 60 + mi) * 60 + sec) * SECOND + ms * 1000


def _days(y: int, m: int, d: int) -> int:
    """Days from 1970-01-01 to the date (proleptic Gregorian; a day past a month's end runs on
    into the next, as only differences count)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468
