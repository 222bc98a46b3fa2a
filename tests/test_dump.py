"""Journal dump lines, both formats, to LogLines; bad lines named by file and line number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.logline import LogLine
from exporter.sources.dump import DumpLineError, LineDecoder, parse_time_us, read_dump

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
    assert LineDecoder("n").decode(raw) == expected


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
        b"2026-09-22T07:31:04.127792+0000 h sm-llm[" + b"9" * 5000 + b"]: total time = 5 ms",
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
        "long-pid",
    ],
)
def test_bad_lines_raise(raw: bytes) -> None:
    with pytest.raises(DumpLineError):
        LineDecoder("n").decode(raw)


def test_hour_cache_follows_the_clock() -> None:
    d = LineDecoder("n")
    times = [
        "2026-09-22T07:59:59.999999+0000",
        "2026-09-22T08:00:00.000000+0000",
        "2026-12-31T23:59:59.000000+0000",
        "2027-01-01T00:00:01.000000+0000",
    ]
    for t in times:
        line = d.decode(f"{t} h u[1]: m".encode())
        assert line is not None and line.time_us == parse_time_us(t)


def test_read_dump_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    path.write_bytes(
        b"2026-09-22T07:31:04.127792+0000 h u[1]: a\nnot a journal line\n" + entry("b") + b"\n"
    )
    out = list(read_dump(path, "n"))
    assert [x.message for x in out if isinstance(x, LogLine)] == ["a", "b"]
    (err,) = [x for x in out if isinstance(x, DumpLineError)]
    assert f"{path}:2:" in str(err)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"__REALTIME_TIMESTAMP":"' + b"9" * 5000 + b'","_PID":"1","__CURSOR":"c","MESSAGE":"m"}',
        b'{"__REALTIME_TIMESTAMP":"1","_PID":"' + b"9" * 5000 + b'","__CURSOR":"c","MESSAGE":"m"}',
        b'{"MESSAGE":"m","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
    ids=["long-time", "long-pid", "deep"],
)
def test_the_ssh_fast_decoder_hands_odd_entries_to_the_dump_decoder(raw: bytes) -> None:
    """The SSH source's fast path for the usual entry shape gives up (None) on these, and the
    dump decoder reads each (a PID it cannot read is 0) or makes it one line's error."""
    from exporter.sources.ssh import _plain

    assert _plain("n", raw) is None
    try:
        line = LineDecoder("n").decode(raw)
    except DumpLineError:
        return
    assert line is not None and line.pid == 0
