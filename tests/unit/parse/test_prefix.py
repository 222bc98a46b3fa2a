"""A line's own time from its log prefix: elapsed or wall clock, exact to the microsecond."""

from __future__ import annotations

from exporter.base.times import SECOND
from exporter.parse.prefix import MAX_CLOCK_US, clock


def test_an_elapsed_prefix_is_its_microseconds() -> None:
    assert clock("0.00.001.587 I srv  llama_server: initializing ...") == 1_587
    assert clock("12.34.567.890 W x") == ((12 * 60 + 34) * 1000 + 567) * 1000 + 890


def test_two_wall_clock_prefixes_are_as_far_apart_as_they_say() -> None:
    one = clock("2025-12-31 23:59:59.500 I a")
    two = clock("2026-01-01 00:00:01.250 I b")
    assert one is not None and two is not None and two - one == 1_750_000
    leap = clock("2024-03-01 00:00:00.000 I c")
    day_before = clock("2024-02-28 00:00:00.000 I d")
    assert leap is not None and day_before is not None and leap - day_before == 2 * 86_400 * SECOND


def test_no_prefix_or_a_garbled_one_is_no_clock() -> None:
    assert clock("srv  llama_server: initializing ...") is None
    assert clock("2025-13-01 00:00:00.000 I month 13") is None
    assert clock("2025-01-01 24:00:00.000 I hour 24") is None
    minutes = MAX_CLOCK_US // (60 * SECOND) + 1
    assert clock(f"{minutes}.00.000.000 I beyond") is None
