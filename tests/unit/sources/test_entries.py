"""journalctl's text forms, both formats, to LogLines: `entries.EntryDecoder`, every shape and error."""

from __future__ import annotations

import json

import pytest

from exporter.base.records import LogLine
from exporter.base.times import MAX_TIME_US, parse_time_us
from exporter.sources.entries import EntryDecoder, EntryError, cursor_time_us, plain_json

T = 1_790_062_264_127_792  # 2026-09-22T07:31:04.127792Z


def entry(message: object, **extra: object) -> bytes:
    rec = {
        "__CURSOR": "s=ab;i=1",
        "__REALTIME_TIMESTAMP": str(T),
        "_PID": "4242",
        "MESSAGE": message,
        **extra,
    }
    return json.dumps(rec).encode()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            b"2026-09-22T07:31:04.127792+0000 node0 sm-llm[4242]: total time = 1.00 ms / 2 tokens",
            LogLine("n", T, "", 4242, "total time = 1.00 ms / 2 tokens"),
        ),
        (b"2026-09-22T09:31:04.127792+02:00 node0 sm-llm[4242]: x", LogLine("n", T, "", 4242, "x")),
        (
            b"2026-09-22T07:31:04.127792Z node0 llama-server: no pid",
            LogLine("n", T, "", 0, "no pid"),
        ),
        (
            b"2026-09-22T07:31:04+0000 node0 sm-llm[1]: whole second",
            LogLine("n", T - 127_792, "", 1, "whole second"),
        ),
        (
            b"2026-09-22T07:31:04.127792+0000 node0 sm-llm[7]: \xff\xfe not utf-8",
            LogLine("n", T, "", 7, "\ufffd\ufffd not utf-8"),
        ),
        (
            entry("slot print_timing: id  0 | task 1 | "),
            LogLine("n", T, "s=ab;i=1", 4242, "slot print_timing: id  0 | task 1 | "),
        ),
        (
            entry(list(b"\rprompt eval time = 1.00 ms")),
            LogLine("n", T, "s=ab;i=1", 4242, "\rprompt eval time = 1.00 ms"),
        ),
        (entry([0xFF, 0x41]), LogLine("n", T, "s=ab;i=1", 4242, "\ufffdA")),
        (entry(None), LogLine("n", T, "s=ab;i=1", 4242, "")),
        (b"-- Boot 4b1c2d0e --", None),
        (b"-- No entries --", None),
        (b"", None),
        (b"    continuation of a multi-line message", None),
    ],
)
def test_decode(raw: bytes, expected: LogLine | None) -> None:
    assert EntryDecoder("n").decode(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b"garbage",
        b"{not json",
        b'{"MESSAGE": "no timestamp"}',
        b'{"__REALTIME_TIMESTAMP": "x"}',
        b"2026-13-45T99:99:99.1+0000 h x: y",
        b"[1, 2]",
        # what no journalctl writes, but a damaged file may hold: each one line's error, never
        # an exception that stops the node's source
        b'{"__REALTIME_TIMESTAMP": 1e999, "MESSAGE": "total time = 5 ms"}',
        b'{"MESSAGE": "total time = 5 ms", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"__REALTIME_TIMESTAMP": "' + b"9" * 5000 + b'", "MESSAGE": "total time"}',
        # a time that does not fit in 64 bits, or past the year 9999
        b'{"__REALTIME_TIMESTAMP": "9999999999999999999", "MESSAGE": "total time = 5 ms"}',
        b'{"__REALTIME_TIMESTAMP": "18446744073709551616", "MESSAGE": "total time = 5 ms"}',
        b'{"__REALTIME_TIMESTAMP": "-1", "MESSAGE": "total time = 5 ms"}',
        b'{"__REALTIME_TIMESTAMP":"' + str(MAX_TIME_US + 1).encode() + b'","_PID":"1",'
        b'"__CURSOR":"c","MESSAGE":"total time = 5 ms"}',
        b"1969-12-31T23:59:59.000000+0000 h sm-llm[1]: total time = 5 ms",
    ],
    ids=[
        "garbage",
        "not-json",
        "no-time",
        "bad-time",
        "bad-date",
        "array",
        "inf",
        "deep",
        "long-time",
        "over-64-bits",
        "2**64",
        "negative",
        "past-9999",
        "before-1970",
    ],
)
def test_bad_lines_raise(raw: bytes) -> None:
    with pytest.raises(EntryError):
        EntryDecoder("n").decode(raw)


def test_hour_cache_follows_the_clock() -> None:
    d = EntryDecoder("n")
    times = [
        "2026-09-22T07:59:59.999999+0000",
        "2026-09-22T08:00:00.000000+0000",
        "2026-12-31T23:59:59.000000+0000",
        "2027-01-01T00:00:01.000000+0000",
    ]
    for t in times:
        line = d.decode(f"{t} h u[1]: m".encode())
        assert line is not None and line.time_us == parse_time_us(t)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"__REALTIME_TIMESTAMP":"' + b"9" * 5000 + b'","_PID":"1","__CURSOR":"c","MESSAGE":"m"}',
        b'{"__REALTIME_TIMESTAMP":"1","_PID":"' + b"9" * 5000 + b'","__CURSOR":"c","MESSAGE":"m"}',
        b'{"MESSAGE":"m","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
    ids=["long-time", "long-pid", "deep"],
)
def test_the_fast_json_decoder_hands_odd_entries_to_the_general_one(raw: bytes) -> None:
    """The fast path for the usual entry shape gives up (None) on these, and the general
    decoder reads each (a PID it cannot read is 0) or makes it one line's error."""
    assert plain_json("n", raw) is None
    try:
        line = EntryDecoder("n").decode(raw)
    except EntryError:
        return
    assert line is not None and line.pid == 0


def test_a_pid_of_thousands_of_digits_is_an_unknown_pid() -> None:
    raw = b"2026-09-22T07:31:04.127792+0000 h sm-llm[" + b"9" * 5000 + b"]: total time = 5 ms"
    line = EntryDecoder("n").decode(raw)
    assert line is not None and (line.pid, line.time_us) == (0, T)


@pytest.mark.parametrize(
    ("cursor", "expected"),
    [
        ("s=ab;i=1f;b=cd;m=1;t=65f0e3c2a1b2c;x=9", 0x65F0E3C2A1B2C),
        ("s=ab;i=1", None),
        ("t=zz", None),
        ("t=" + "f" * 40, None),  # past the year 9999
        ("", None),
    ],
)
def test_cursor_time(cursor: str, expected: int | None) -> None:
    assert cursor_time_us(cursor) == expected
