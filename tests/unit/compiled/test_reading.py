"""`_speedups.read_ahead`: a file's next bytes read and scanned in a thread of their own.

Held to `scan` (on the whole lines of the same bytes) and to the file: what it read, where it
cut, where it leaves the descriptor, what it says of a changed file, a NUL, a line without an
end and a failed read, and that it lets go of the buffer once answered (or dropped)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.base.records import LogLine
from exporter.compiled import switch
from exporter.sources.lines import KEYWORDS, MAX_LINE

from support.line_dumps import workload
from support.tools import examples, require_compiled

require_compiled(switch.speedups, "_speedups")

from exporter.compiled import _speedups  # noqa: E402 (the module the switch loaded)

NODE = "node0"
DATA = workload(40, "short", garbage=True) + workload(20, "json", garbage=True)


@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    path = tmp_path / "node0.log"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def read_ahead(fd: int, offset: int, buffer: bytearray, tail: bytes = b"") -> _speedups.Reading:
    return _speedups.read_ahead(fd, offset, buffer, tail, KEYWORDS, NODE, 0, LogLine, MAX_LINE)


def scanned(data: bytes) -> tuple[list[bytes | LogLine], int, int]:
    items, newlines, raw = _speedups.scan(data, KEYWORDS, NODE, 0, LogLine, MAX_LINE)
    return list(items), newlines, raw


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, len(DATA) + 10), st.integers(1, len(DATA) + 10))
def test_what_it_read_and_scanned_is_what_scan_finds_in_the_same_bytes(
    offset: int, size: int
) -> None:
    fd = os.memfd_create("node0.log")
    try:
        os.write(fd, DATA)
        buffer = bytearray(size)
        got, cut, lines, newlines, raw = read_ahead(fd, offset, buffer).result()
        read = DATA[offset : offset + size]
        assert got == len(read) and bytes(buffer[:got]) == read
        assert os.lseek(fd, 0, os.SEEK_CUR) == offset + got  # (as a read leaves it)
        whole = read[: read.rfind(b"\n") + 1]
        assert cut == len(whole)
        if not whole:
            assert (lines, newlines, raw) == (None, 0, 0)
        else:
            assert lines is not None
            assert (list(lines), newlines, raw) == scanned(whole)
    finally:
        os.close(fd)


def test_a_long_read_scanned_in_two_halves_finds_what_scan_finds(tmp_path: Path) -> None:
    """A read of 512 KiB or more is scanned in two halves (two threads), cut at a line end."""
    data = workload(6000, "short", garbage=True) + workload(3000, "json")
    assert len(data) > 2 << 20
    fd = os.memfd_create("node0.log")
    try:
        os.write(fd, data)
        for offset in (0, 1, len(data) // 3):
            buffer = bytearray(len(data) - offset - 7)  # (the last line cut short)
            got, cut, lines, newlines, raw = read_ahead(fd, offset, buffer).result()
            read = data[offset : offset + len(buffer)]
            assert got == len(read) and cut == read.rfind(b"\n") + 1
            assert lines is not None
            assert (list(lines), newlines, raw) == scanned(read[:cut])
    finally:
        os.close(fd)


def test_bytes_before_the_offset_that_changed_are_told(fd: int) -> None:
    at = DATA.index(b"\n", 1000) + 1
    tail = DATA[at - 64 : at]
    assert read_ahead(fd, at, bytearray(100), tail).result()[:3] != (-1, 0, None)
    other = b"x" + tail[1:]
    assert read_ahead(fd, at, bytearray(100), other).result() == (-1, 0, None, 0, 0)
    # (more bytes before the offset than the file holds there)
    assert read_ahead(fd, 10, bytearray(100), tail).result() == (-1, 0, None, 0, 0)
    assert read_ahead(fd, len(DATA) + 64, bytearray(100), tail).result() == (-1, 0, None, 0, 0)


def test_a_nul_or_no_whole_line_is_left_to_the_line_layer(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(DATA[:500] + b"\0\0" + DATA[500:1000])
    fd = os.open(path, os.O_RDONLY)
    try:
        buffer = bytearray(2000)
        assert read_ahead(fd, 0, buffer).result() == (1002, 0, None, 0, 0)
        first = DATA.index(b"\n")
        assert read_ahead(fd, 0, bytearray(first)).result() == (first, 0, None, 0, 0)
        assert read_ahead(fd, 5000, bytearray(10)).result() == (0, 0, None, 0, 0)  # (the end)
    finally:
        os.close(fd)


def test_a_failed_read_is_an_oserror_and_it_answers_once(fd: int) -> None:
    reading = read_ahead(fd, 0, bytearray(100))
    reading.result()
    with pytest.raises(RuntimeError, match="once"):
        reading.result()
    bad = os.dup(fd)
    os.close(bad)  # (a descriptor number that is no file)
    with pytest.raises(OSError) as e:
        read_ahead(bad, 0, bytearray(100)).result()
    assert e.value.errno == 9  # EBADF
    directory = os.open(Path(__file__).parent, os.O_RDONLY)
    try:
        with pytest.raises(IsADirectoryError):
            read_ahead(directory, 0, bytearray(100)).result()
    finally:
        os.close(directory)


def test_it_reads_the_file_it_was_given_even_once_the_callers_descriptor_is_closed(
    tmp_path: Path,
) -> None:
    """It reads through a descriptor of its own: the caller's closed meanwhile, and its number
    taken by another file, change nothing it reads (nor that file's offset)."""
    path, other = tmp_path / "node0.log", tmp_path / "other.log"
    path.write_bytes(DATA)
    other.write_bytes(b"other bytes\n" * 100)
    fd = os.open(path, os.O_RDONLY)
    buffer = bytearray(len(DATA) + 10)
    reading = read_ahead(fd, 0, buffer)
    os.close(fd)
    again = os.open(other, os.O_RDONLY)  # (the lowest free number: most likely fd's)
    try:
        got, cut, lines, _, _ = reading.result()
        assert (got, cut) == (len(DATA), len(DATA)) and bytes(buffer[:got]) == DATA
        assert lines is not None and len(lines) > 0
        assert os.lseek(again, 0, os.SEEK_CUR) == 0
    finally:
        os.close(again)


def test_no_descriptor_is_left_open(fd: int) -> None:
    before = len(os.listdir("/proc/self/fd"))
    for k in range(50):
        reading = read_ahead(fd, k, bytearray(100))
        if k % 2:
            reading.result()
        del reading  # (answered or not)
    with pytest.raises(ValueError):
        read_ahead(fd, -1, bytearray(10))
    assert len(os.listdir("/proc/self/fd")) == before


def test_two_callers_at_once_each_return() -> None:
    """The thread is joined once, whoever waits for it: one caller has the answer, the other
    is told it was given (joining a thread twice would hang the second for good). A long read
    (32 MiB), so that they all wait for it at once."""
    data = DATA * (32 * 2**20 // len(DATA))
    size = (len(data), len(data))
    memfd = os.memfd_create("node0.log")
    buffer = bytearray(len(data))
    try:
        os.write(memfd, data)
        for _ in range(5):
            reading = read_ahead(memfd, 0, buffer)
            said: list[object] = []

            def ask(reading: _speedups.Reading = reading, said: list[object] = said) -> None:
                try:
                    said.append(reading.result()[0])
                except RuntimeError as e:
                    said.append(str(e))

            def wait(reading: _speedups.Reading = reading, said: list[object] = said) -> None:
                said.append(reading.wait())

            callers = [threading.Thread(target=f, daemon=True) for f in (ask, ask, wait)]
            for t in callers:
                t.start()
            for t in callers:
                t.join(timeout=30)
            assert not any(t.is_alive() for t in callers), "a caller still waits"
            answers = sorted(map(str, said))
            assert answers == sorted([str(len(data)), "a Reading answers once", str(size)])
            del reading
    finally:
        os.close(memfd)


def test_reads_run_on_a_bounded_number_of_kept_threads(fd: int) -> None:
    """Many reads under way at once: at most 16 threads are kept for them (the others read in
    the caller), and the same threads serve the next reads."""
    before = len(os.listdir("/proc/self/task"))
    for _ in range(3):
        readings = [read_ahead(fd, 0, bytearray(len(DATA))) for _ in range(40)]
        assert all(r.result()[0] == len(DATA) for r in readings)
        del readings
        assert len(os.listdir("/proc/self/task")) <= before + 16


def test_arguments_out_of_range_are_refused_before_any_thread(fd: int) -> None:
    with pytest.raises(ValueError):
        read_ahead(fd, -1, bytearray(10))
    with pytest.raises(ValueError):
        read_ahead(fd, 0, bytearray(10), b"x" * (65536 + 1))
    with pytest.raises(TypeError):
        read_ahead(fd, 0, b"read-only bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.read_ahead(fd, 0, bytearray(10), b"", KEYWORDS, NODE, 0, dict, MAX_LINE)  # type: ignore[arg-type]


def test_the_buffer_is_let_go_once_answered_or_dropped(fd: int) -> None:
    """A bytearray that something views cannot be resized: so `extend` tells whether the
    Reading (or the Lines it answered, whose items point into it) still holds it."""
    buffer = bytearray(len(DATA))
    reading = read_ahead(fd, 0, buffer)
    with pytest.raises(BufferError):
        buffer.extend(b"x")  # (being read into)
    reading.wait()
    _, _, lines, _, raw = reading.result()
    assert lines is not None and raw > 0  # (garbage: a list of lines and bytes, no view)
    buffer.extend(b"x")
    clean = workload(10)
    memfd = os.memfd_create("clean.log")
    try:
        os.write(memfd, clean)
        buffer = bytearray(len(clean))
        found = read_ahead(memfd, 0, buffer).result()[2]
        assert isinstance(found, _speedups.Lines) and len(found) == 30
        with pytest.raises(BufferError):
            buffer.extend(b"x")  # (the Lines holds it)
        del found
        buffer.extend(b"x")
        dropped = read_ahead(memfd, 0, buffer)
        del dropped  # (joined, then let go)
        buffer.extend(b"x")
    finally:
        os.close(memfd)
