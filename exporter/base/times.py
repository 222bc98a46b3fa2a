"""Times as the exporter keeps them: integer microseconds since the epoch (UTC), and their text.

Nothing here imports anything of the exporter: config, sources, report and cli all use it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

SECOND = 1_000_000
# The journal times the exporter takes: from the epoch to the end of the year 9999 (what
# `datetime` can show). A journal entry stamped outside is that line's parse error.
MIN_TIME_US = 0
MAX_TIME_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RELATIVE = re.compile(r"-(\d{1,9})([smhd])")
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def fits(us: int) -> bool:
    """Is `us` a journal time the exporter takes (see MIN_TIME_US, MAX_TIME_US)?"""
    return MIN_TIME_US <= us <= MAX_TIME_US


def parse_time_us(text: str) -> int:
    """ISO 8601 -> microseconds since the epoch; UTC when the text has no offset. ValueError for
    anything else, and for a time before the epoch."""
    t = datetime.fromisoformat(text.strip())
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    delta = t - _EPOCH
    us = (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds
    if not fits(us):
        raise ValueError(f"{text.strip()!r} is before 1970")
    return us


def since_us(text: str, now_us: int) -> int:
    """`now`, an ISO 8601 time, or a relative one (`-30s`, `-15m`, `-24h`, `-7d`) -> microseconds;
    ValueError for anything else, or a time before the epoch."""
    if text == "now":
        return now_us
    m = _RELATIVE.fullmatch(text)
    if m:
        us = now_us - int(m.group(1)) * _UNITS_S[m.group(2)] * SECOND
        if not fits(us):
            raise ValueError(f"{text!r} reaches before 1970")
        return us
    return parse_time_us(text)


def iso(us: int) -> str:
    """Microseconds -> `2026-09-22T07:32:55+00:00` (whole seconds); any int, never an error."""
    s = min(max(us, MIN_TIME_US), MAX_TIME_US) // SECOND
    return datetime.fromtimestamp(s, UTC).isoformat(timespec="seconds")
