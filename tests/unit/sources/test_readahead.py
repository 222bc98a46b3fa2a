"""A file's reads ahead: buffers handed out again only once free, and a regular dump read in
chunks (each next one read ahead where compiled) finding what one read of the whole finds:
the same lines, entries, parse errors with their line numbers, and the end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.base.records import LogLine
from exporter.compiled.switch import speedups
from exporter.sources.base import SourceError
from exporter.sources.lines import Chunk, LineReader
from exporter.sources.readahead import Buffers, DumpReads

from support.dumps import LAUNCH, T0, TOTAL, short
from support.line_dumps import as_json
from support.tools import examples

NODE = "node0"


def test_a_buffer_is_handed_out_again_only_once_nothing_holds_it() -> None:
    buffers = Buffers(kept=2)
    a = buffers.take(10)
    first = id(a)
    view = memoryview(a)  # (as a Lines holds the buffer its items point into)
    del a
    b = buffers.take(10)
    assert id(b) != first
    c = buffers.take(10)  # (both kept ones in use: a fresh one, not kept)
    assert id(c) not in (first, id(b))
    view.release()
    assert id(buffers.take(10)) == first  # (held by nothing but the Buffers now)
    del b, c
    assert len(buffers.take(20)) == 20  # (a free one of another size gives up its place)
    buffers.clear()
    assert buffers.take(10) is not buffers.take(10)


def pieces() -> st.SearchStrategy[bytes]:
    i = st.integers(0, 50)
    return st.one_of(
        i.map(lambda k: short(T0 + k * 1000, LAUNCH.format(s=k % 2, t=k)) + b"\n"),
        i.map(lambda k: short(T0 + k, TOTAL.format(s=0, t=k, ms=1.5, n=k)) + b"\n"),
        i.map(lambda k: as_json(T0 + k, TOTAL.format(s=0, t=k, ms=2.5, n=k), k) + b"\n"),
        st.just(b"no journal line, but total time in it\n"),  # (a parse error)
        st.just(b"noise without a keyword\n"),
        st.integers(1, 3).map(lambda k: b"\0" * k),
        st.integers(40, 300).map(lambda k: b"x" * k + b" total time\n"),  # (long)
        st.just(short(T0, LAUNCH.format(s=1, t=7))),  # (no newline: cut by the next piece)
    )


def read_in_chunks(path: Path, size: int) -> tuple[Chunk, int]:
    """Every chunk DumpReads makes of the file, added up; and how many there were."""
    reader = LineReader(NODE, where=str(path), max_line=250)
    fd = os.open(path, os.O_RDONLY)
    reads = DumpReads(fd, reader, NODE, path, size=size)
    try:
        total, more, n = Chunk(), True, 0
        while more:
            chunk, more = reads.next()
            total.add(chunk)
            n += 1
            assert n < 100_000, "never at the end"
        return total, n
    finally:
        reads.close()
        os.close(fd)


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(pieces(), max_size=40), st.sampled_from((16, 64, 333, 4096)))
def test_a_dump_read_in_chunks_finds_what_one_read_finds(
    tmp_path: Path, parts: list[bytes], size: int
) -> None:
    path = tmp_path / "node0.log"
    data = b"".join(parts)
    path.write_bytes(data)
    reader = LineReader(NODE, where=str(path), max_line=250)
    whole = reader.feed(data)
    whole.add(reader.end())
    got, n = read_in_chunks(path, size)
    assert list(got.lines) == list(whole.lines)
    assert all(type(line) is LogLine for line in got.lines)
    assert got.entries == whole.entries
    assert got.errors == whole.errors  # (the same lines named, FILE:LINE)
    assert got.newest_us == whole.newest_us
    assert n >= len(data) // size


def test_a_dump_that_fills_its_reads_exactly_ends_with_its_last_line(tmp_path: Path) -> None:
    """The last full read is read past once (it finds nothing, or the last line's end)."""
    path = tmp_path / "node0.log"
    line = short(T0, LAUNCH.format(s=0, t=1)) + b"\n"
    for tail in (b"", short(T0 + 1, LAUNCH.format(s=1, t=2))):  # (with and without an end)
        path.write_bytes(line * 8 + tail)
        got, _ = read_in_chunks(path, len(line) * 2)
        assert [x.message for x in got.lines] == [LAUNCH.format(s=0, t=1)] * 8 + (
            [LAUNCH.format(s=1, t=2)] if tail else []
        )
        assert got.entries == 8 + bool(tail)


def test_a_read_that_fails_is_the_nodes_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(b"")
    fd = os.open(tmp_path, os.O_RDONLY)  # (a directory: every read of it fails)
    try:
        reads = DumpReads(fd, LineReader(NODE), NODE, path, size=64)
        with pytest.raises(SourceError, match=rf"node {NODE}: cannot read {path}: .*directory"):
            reads.next()
        reads.close()
    finally:
        os.close(fd)


def test_compiled_the_next_read_is_under_way_while_a_chunk_is_used(tmp_path: Path) -> None:
    """(Pure Python has no thread for it: each read is made when its chunk is asked for.)"""
    path = tmp_path / "node0.log"
    path.write_bytes((short(T0, LAUNCH.format(s=0, t=1)) + b"\n") * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        reads = DumpReads(fd, LineReader(NODE), NODE, path, size=1024)
        assert (reads.ahead is not None) == (speedups is not None)  # (the first, from the start)
        reads.next()
        assert (reads.ahead is not None) == (speedups is not None)
        if reads.ahead is not None:  # (its buffer held while it reads)
            assert sys.getrefcount(reads.ahead.buffer) > 3
        reads.close()
        assert reads.ahead is None
    finally:
        os.close(fd)
