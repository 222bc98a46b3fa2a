"""The line layer (`sources/lines.py`): framing, the keyword scan, long lines, line numbers; and
what the report accepts as input (gzip, standard input, pipes), counted as the daemon counts."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import LogLine
from exporter.ingest import step as pipeline
from exporter.parse.parser import Parser
from exporter.sources.filereader import FileSource
from exporter.sources.lines import MAX_LINE, Chunk, LineReader

from support.dumps import LAUNCH, T0, TOTAL, report_of_dumps, short
from support.line_dumps import as_json, workload
from support.settings import default_settings

KINDS = Kinds(DEFAULT_RULES)


def read_all(reader: LineReader, data: bytes, cuts: list[int]) -> Chunk:
    """`data` fed in pieces cut at `cuts`, then the end; everything found, in one Chunk."""
    total = Chunk()
    at = 0
    for cut in [*sorted(cuts), len(data)]:
        piece = reader.feed(data[at:cut])
        at = max(at, cut)
        total.add(piece)
    total.add(reader.end())
    return total


DATA = workload(12, garbage=True) + b"2026-09-22T07:40:00.000000+0000 h sm-llm[1]: " + b"x" * 300


DATA_JSON = workload(12, "json", garbage=True)


@settings(max_examples=150, deadline=None)
@given(
    data=st.sampled_from([DATA, DATA_JSON]),
    cuts=st.lists(st.integers(0, len(DATA)), max_size=12),
    max_line=st.sampled_from([MAX_LINE, 150, 400]),
)
def test_the_same_bytes_cut_anywhere_read_the_same(
    data: bytes, cuts: list[int], max_line: int
) -> None:
    whole = read_all(LineReader("node0", where="f", max_line=max_line), data, [])
    cut = read_all(LineReader("node0", where="f", max_line=max_line), data, cuts)
    assert cut.lines == whole.lines
    assert cut.errors == whole.errors
    assert cut.entries == whole.entries == data.count(b"\n") + (not data.endswith(b"\n"))
    if max_line == MAX_LINE:  # not a vacuous comparison
        assert len(whole.lines) == 12 * 3 + 4 and len(whole.errors) == 4


def test_errors_name_the_line() -> None:
    chunk = read_all(LineReader("node0", where="dump.log"), workload(4, garbage=True), [])
    # request 0: launch (1), junk (2), junk with a keyword (3: the error), a garbled total (4,
    # the parser's error), total, release; requests 1 and 2: 3 lines each; request 3 as 0
    assert [e.split(": ")[0] for e in chunk.errors] == ["dump.log:3", "dump.log:15"]


def test_an_error_names_its_own_line_not_an_earlier_line_holding_its_text() -> None:
    bad = b"no journal line, but total time in it"
    good = short(T0, LAUNCH.format(s=0, t=1) + " ") + bad  # (a journal line: its text ends so)
    chunk = read_all(LineReader("node0", where="dump.log"), good + b"\n" + bad + b"\n", [])
    assert len(chunk.lines) == 1
    assert [e.split(": ")[0] for e in chunk.errors] == ["dump.log:2"]


@pytest.mark.parametrize("keyword", [True, False])
def test_a_line_over_the_cap_is_one_parse_error_if_it_may_matter(keyword: bool) -> None:
    head = short(T0, "x" * 10)
    long = short(T0 + 1, ("total time = 5.00 ms / 3 tokens " if keyword else "") + "y" * 5000)
    tail = short(T0 + 2, TOTAL.format(s=0, t=1, ms=1.0, n=2))
    data = b"\n".join([head, long, tail]) + b"\n"
    for cuts in ([], list(range(0, len(data), 97))):
        chunk = read_all(LineReader("node0", where="f", max_line=1000), data, cuts)
        assert [x.time_us for x in chunk.lines] == [T0 + 2]
        assert chunk.entries == 3
        assert chunk.errors == (["f:2: a line of 5,"] if keyword else []) or all(
            e.startswith("f:2: a line of ") and "longer than 1,000: skipped" in e
            for e in chunk.errors
        )
        assert len(chunk.errors) == keyword


def test_a_line_with_no_end_costs_bounded_memory_and_linear_time() -> None:
    """64 MiB with no newline, in 1 MiB reads: nothing kept beyond the cap, one error."""
    reader = LineReader("node0", where="f")
    piece = b"total time " + b"z" * ((1 << 20) - 11)
    tracemalloc.start()
    try:
        for _ in range(64):
            reader.feed(piece)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_LINE, peak  # it would be 64 MiB if the line were kept
    last = reader.feed(b"\n" + short(T0, TOTAL.format(s=0, t=1, ms=1.0, n=2)) + b"\n")
    assert len(last.errors) == 1 and "a line of 67,108,864 bytes" in last.errors[0]
    assert [x.time_us for x in last.lines] == [T0]


@pytest.mark.parametrize(
    "time_us", ["9999999999999999999", str(2**64), "253402300800000000", "-5"], ids=str
)
def test_a_time_that_does_not_fit_is_that_lines_parse_error(time_us: str) -> None:
    bad = json.dumps(
        {
            "__REALTIME_TIMESTAMP": time_us,
            "_PID": "1",
            "__CURSOR": "c",
            "MESSAGE": TOTAL.format(s=0, t=1, ms=1.0, n=2),
        }
    )
    data = (
        b"\n".join(
            [
                as_json(T0, LAUNCH.format(s=0, t=1), 1),
                bad.encode(),
                as_json(T0 + 5, "x total time = 1.00 ms", 2),
            ]
        )
        + b"\n"
    )
    chunk = read_all(LineReader("node0", where="f"), data, [])
    assert len(chunk.errors) == 1 and chunk.errors[0].startswith("f:2: ")
    assert [x.time_us for x in chunk.lines] == [T0, T0 + 5]


def test_a_logline_whose_time_does_not_fit_is_a_parse_error_in_the_parser() -> None:
    """What the journal source hands over as it is (systemd-python gives any 64-bit time)."""
    for feed in ("feed_all", "feed_reference"):
        p = Parser("n")
        out = getattr(p, feed)(
            (
                LogLine("n", 2**64, "", 1, TOTAL.format(s=0, t=1, ms=1.0, n=2)),
                LogLine("n", -(2**63), "", 1, TOTAL.format(s=0, t=2, ms=1.0, n=2)),
                LogLine("n", T0, "", 1, TOTAL.format(s=0, t=3, ms=1.0, n=2)),
            )
        )
        assert [getattr(r, "detail", "")[:25] for r in out] == [
            "journal time out of range",
            "journal time out of range",
            "",
        ], feed


def daemon_errors(path: Path) -> tuple[int, int]:
    """Requests and parse errors as the daemon's reading path counts them in `path`."""
    src = FileSource("node0", path, since_us=0, chunk=4096)
    acc = Accounting(["node0"], default_settings(KINDS), origin_us=0)
    parser = Parser("node0")
    while (batch := src.step()) is not None:
        pipeline.apply_batch(batch, parser, acc, T0)
    snap = acc.snapshot()
    (node,) = snap.nodes
    return sum(c.requests for c in node.kinds.values()), node.parse_errors


@settings(max_examples=25, deadline=None)
@given(
    requests=st.integers(1, 30),
    form=st.sampled_from(["short", "json"]),
    junk=st.lists(
        st.sampled_from(
            [
                b"junk",
                b"junk total time",
                b'{"MESSAGE": "eval time"',
                b"\xff\xfe launch_slot_ \x00",
                b"2026-09-22T07:33:00.000000+0000 h sm-llm[1]: total time = x ms",
                b"",
                b"-- Boot 4b1c2d0e --",
            ]
        ),
        max_size=10,
    ),
    at=st.lists(st.integers(0, 10_000), max_size=10),
)
def test_the_report_and_the_daemon_count_the_same_parse_errors(
    tmp_path_factory: pytest.TempPathFactory,
    requests: int,
    form: str,
    junk: list[bytes],
    at: list[int],
) -> None:
    lines = workload(requests, form, garbage=True).split(b"\n")[:-1]
    for j, (raw, where) in enumerate(zip(junk, at, strict=False)):
        lines.insert(where % (len(lines) + 1), raw + b" %d" % j if raw else raw)
    path = tmp_path_factory.mktemp("d") / "node0.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    r = report_of_dumps({"node0": path}, KINDS, 0, T0 + 10**12)
    (node,) = r.snapshot.nodes
    report_counts = (sum(c.requests for c in node.kinds.values()), node.parse_errors)
    assert report_counts == daemon_errors(path)
    assert report_counts[0] == requests and report_counts[1] >= len(range(0, requests, 3))
