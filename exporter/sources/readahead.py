"""A file's reads ahead: the buffers they go into, and a regular dump read chunk by chunk.

Compiled, a read ahead (`LineReader.read_ahead`) reads a file's next bytes and scans their
lines in a thread that never takes the interpreter lock, while the caller applies the chunk
before. Its buffer is held until the Lines made of it are done with; `Buffers` hands out the
ones nothing holds any more, so a backlog's reads reuse the same few. `DumpReads` reads a
regular dump for the report's window that way (without the compiled module, one read at a
time, the same bytes).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from exporter.sources.base import SourceError
from exporter.sources.lines import Ahead, Chunk, LineReader

CHUNK = 1 << 20
BACKLOG_READS = 4  # chunks read at once while a backlog is read
# Buffers a file's reads go into, reused while a backlog is read: a Batch holds its buffer
# until its lines are applied, so a few are in use at once. Fresh memory for every read
# instead faulted each page in zeroed: a tenth of the reading path on JSON dumps. Dropped once
# the file is read to its end.
READ_BUFFERS = 4
READ_SIZE = CHUNK * BACKLOG_READS  # a window's reads (a window is all backlog)


class Buffers:
    """At most `kept` buffers, each handed out again once nothing else holds it."""

    def __init__(self, kept: int = READ_BUFFERS) -> None:
        self.kept = kept
        self._buffers: list[bytearray] = []

    def take(self, size: int) -> bytearray:
        """A buffer of `size` bytes that nothing holds (no Lines views it, no Batch or chunk
        refers to it); a fresh one, not kept, when all that are kept are in use."""
        for buf in self._buffers:
            # held by the list, by `buf` and by getrefcount's argument, and by nothing else
            if sys.getrefcount(buf) == 3:
                if len(buf) == size:
                    return buf
                self._buffers.remove(buf)  # (free, but of the size of another read: its slot)
                break
        if len(self._buffers) >= self.kept:
            return bytearray(size)
        self._buffers.append(bytearray(size))
        return self._buffers[-1]

    def clear(self) -> None:
        """The kept buffers let go (read to the end: no backlog to read into them)."""
        self._buffers.clear()


class DumpReads:
    """A regular dump's chunks from its start, for a window (see the module docstring): `fd`
    is the dump's, left open (and alone) by the caller until `close`."""

    def __init__(
        self, fd: int, reader: LineReader, node: str, path: Path, size: int = READ_SIZE
    ) -> None:
        self.fd, self.reader, self.node, self.path = fd, reader, node, path
        self.size = size  # (each read's)
        self.end = 0  # where the bytes read so far end
        self.buffers = Buffers()
        self.ahead = self._start()

    def next(self) -> tuple[Chunk, bool]:
        """The next chunk, and whether there may be more (False at the end)."""
        ahead, self.ahead = self.ahead, None
        try:
            got, chunk = self._read() if ahead is None else self._took(ahead)
        except OSError as e:
            raise SourceError(f"node {self.node}: cannot read {self.path}: {e}") from None
        if chunk is None:
            return self.reader.end(), False
        if got == self.size and self.ahead is None:  # (a short read reached the end)
            self.ahead = self._start()
        return chunk, True

    def close(self) -> None:
        """The read under way, if any, waited for: the file may be closed then."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            ahead.reading.wait()

    def _start(self) -> Ahead | None:
        return self.reader.read_ahead(self.fd, self.end, self.buffers.take(self.size), b"")

    def _read(self) -> tuple[int, Chunk | None]:
        """One read here (no read ahead: pure Python, or a long line carried)."""
        data = os.pread(self.fd, self.size, self.end)
        self.end += len(data)
        return len(data), self.reader.feed(data) if data else None

    def _took(self, ahead: Ahead) -> tuple[int, Chunk | None]:
        """What the read ahead read (the partial line given back read again with it); the next
        read under way meanwhile, when it can be (`LineReader.read_on`)."""
        self.ahead = self.reader.read_on(self.fd, ahead, self.buffers.take(self.size), 0)
        got, cut, lines, newlines, raw = ahead.reading.result()
        self.end = ahead.offset + got
        if not got:
            return 0, None
        if lines is None:  # (a NUL, or no whole line: the line layer frames them)
            return got, self.reader.feed(memoryview(ahead.buffer)[:got].tobytes())
        return got, self.reader.take(ahead, got, cut, (lines, newlines, raw))
