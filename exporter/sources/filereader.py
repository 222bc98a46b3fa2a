"""Reads a `file` node's dump: followed like `tail -F` (the daemon), or over a window (the report).

Both read in large chunks through the line layer (`sources/lines.py`). Following handles
appends, a partial last line (waited for), truncation or a rewrite in place (the bytes before
the read position changed: read again from the start), the file replaced by a new one (the old
one read to its end first; the file it left, back at the path, goes on from where it was) and a
file that does not exist yet; its position is (device, inode, byte offset after the last whole
line read). A FIFO is opened and read without blocking: no writer yet, or nothing written, is
nothing to read, polled again; what a writer sends later is read. Anything else that is not a
regular file (a device such as `/dev/zero`, a socket, a directory), the path or the file a
symlink there leads to, is refused unopened as the node's error, and the path polled until a
dump is there again. Its blocking calls
run in order on the file sources' shared pool of threads (`sources/pool.py`), which the daemon's
shutdown never waits for longer than CLOSE_WAIT_SECONDS (a read stuck on a hung file system
holds nothing up). A window reads
what an operator hands the report: a plain or gzip dump (told by its magic bytes), `-` for
standard input, a pipe or a process substitution.
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import io
import logging
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

from exporter.base.records import Batch
from exporter.sources.base import Progress, SourceError
from exporter.sources.file import FileNode, FilePosition
from exporter.sources.lines import Ahead, Chunk, Found, LineReader
from exporter.sources.pool import FILES
from exporter.sources.readahead import BACKLOG_READS, CHUNK, READ_SIZE, Buffers, DumpReads

log = logging.getLogger(__name__)

# Steps queued ahead while a backlog is read, when the ingest loop has nothing else queued:
# the thread reads the next chunk while the loop applies the last, instead of waiting for the
# loop to ask. Only into an empty queue: a fleet's backlogs hold no more batches than before.
READ_AHEAD = 2
STDIN = Path("-")
_GZIP_MAGIC = b"\x1f\x8b"
CLOSE_WAIT_SECONDS = 0.25  # how long a cancelled source waits for its thread to close the file
# the bytes before the read position, compared with the file before each read: a rewrite in
# place (the same inode) that left the file as long or longer changes them; an append does not
FINGERPRINT = 4096
LINE_ENDS = (b"\n", b"\0")  # what a saved position follows: a newline, or a NUL (lines.py)
FOLLOWED = (stat.S_IFREG, stat.S_IFIFO)  # the kinds of file followed (a FIFO as a stream)
KINDS = {
    stat.S_IFREG: "a regular file",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}
T = TypeVar("T")


class FileSource:
    """One node's dump file, followed; `run` hands Batches to a queue until cancelled."""

    def __init__(
        self,
        node: str,
        path: Path,
        *,
        since_us: int,
        position: str = "",
        poll_seconds: float = 0.25,
        chunk: int = CHUNK,
    ) -> None:
        self.node = node
        self.path = path
        self.since_us = since_us
        self.poll_seconds = poll_seconds
        self.chunk = chunk
        self._resume = FilePosition.parse(position) if position else None
        self._reader = LineReader(node, since_us=since_us, where=str(path))
        self._file: io.BufferedReader | io.FileIO | None = None
        self._stream = False  # a FIFO: read, never sought
        self._dev = self._ino = 0
        self._said = ""  # why the path is not followed, as last said ("" while it is)
        self._said_caught_up = False
        self._tail = b""  # the FINGERPRINT bytes of the open file before the read position
        self._at = 0  # the read position in the open file (a FIFO has none)
        # the file last left for another at the path, where it was left and the bytes before
        self._left: tuple[FilePosition, bytes] | None = None
        self._backlog = False
        self._buffers = Buffers()
        self._lock = threading.Lock()
        self._gap = False  # the saved position could not be resumed: say so in the next batch
        self._ahead: Ahead | None = None  # the backlog's next read, under way (see `_read_on`)

    async def run(self, out: asyncio.Queue[Batch]) -> None:
        worker = FILES.serial(f"file source {self.node}")
        ahead: collections.deque[asyncio.Future[Batch | None]] = collections.deque()
        try:
            while True:
                batch = await (ahead.popleft() if ahead else worker.submit(self._locked_step))
                backlog = batch is not None and batch.up and not batch.caught_up
                if backlog and out.empty():  # (see READ_AHEAD)
                    ahead.extend(
                        worker.submit(self._locked_step) for _ in range(READ_AHEAD - len(ahead))
                    )
                if batch is not None:
                    await out.put(batch)
                if not backlog and not ahead:
                    await asyncio.sleep(self.poll_seconds)
        finally:
            for step in ahead:  # (what they read, the next source reads again)
                step.cancel()
            # a step cancelled while its thread still reads: the file is closed once that read
            # returns; the daemon's shutdown waits for it a moment at most
            if not await worker.finish(self.close, CLOSE_WAIT_SECONDS):
                log.warning(
                    "node %s: a read of %s is still stuck; it is closed once the read returns",
                    self.node,
                    self.path,
                )

    @property
    def closed(self) -> bool:
        """Has a file been opened and closed again (the source is done with it)?"""
        return self._file is not None and self._file.closed

    def _locked_step(self) -> Batch | None:
        with self._lock:
            return self.step()

    def close(self) -> None:
        """Close the file followed, if one is open (blocking: run it in a thread)."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
            if ahead is not None:  # (its thread reads the file: it is done first)
                ahead.reading.wait()
            if self._file is not None:
                self._file.close()

    def step(self) -> Batch | None:
        """Read what is new (blocking file I/O: run it in a thread); None when nothing changed."""
        if self._file is None:
            why = self._open()
            if why:
                return self._not_followed(why)
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            size = len(ahead.buffer)
            data, scanned = self._took(ahead)
        else:
            # a backlog (the last read was full) in larger reads: fewer hand-overs to the loop
            size = self.chunk * BACKLOG_READS if self._backlog else self.chunk
            data, scanned = self._read(size), None
        self._backlog = len(data) >= self.chunk
        # a short read reached the end; after a full one, only a size shows it (asked only when
        # the read ends in a NUL: the backlog's reads skip the call, and the read that ends
        # exactly at the end is told by the next, which finds nothing)
        nul_last = data[-1:] == b"\0" and not self._stream
        at_end = self._stream or len(data) < size or (nul_last and self._is_at_end())
        if nul_last and at_end:
            data = self._held_back(data)
        if data and not self._stream:
            self._tail = (self._tail + data[-FINGERPRINT:])[-FINGERPRINT:]
        if not data:
            return self._at_end()
        if scanned is None or ahead is None:
            chunk = self._reader.feed(data)
        else:
            chunk = self._reader.take(ahead, *scanned)
        # a FIFO is read to its end when a read did not fill the buffer: it has no size
        self._said_caught_up = len(data) < size if self._stream else at_end
        batch = self._batch(chunk, self._said_caught_up)
        if self._backlog and not at_end and not self._stream and self._ahead is None:
            self._read_on()
        return batch

    def _read_on(self) -> None:
        """A backlog's next read, read and scanned in a thread of its own (compiled) while the
        batch just read is applied: taken by the next step."""
        assert self._file is not None
        buffer = self._buffers.take(self.chunk * BACKLOG_READS)
        self._ahead = self._reader.read_ahead(self._file.fileno(), self._at, buffer, self._tail)

    def _took(self, ahead: Ahead) -> tuple[bytes | bytearray, tuple[int, int, Found] | None]:
        """What the read under way read, and what it scanned (None when the line layer is to
        frame the bytes: they hold a NUL or no whole line). The bytes before it changed: the
        file is read again from its start, as `_read` does."""
        assert self._file is not None
        self._at, self._tail = ahead.offset, ahead.tail
        size = len(ahead.buffer)
        buffer = self._buffers.take(self.chunk * BACKLOG_READS)
        self._ahead = self._reader.read_on(self._file.fileno(), ahead, buffer, FINGERPRINT)
        try:
            got, cut, lines, newlines, raw = ahead.reading.result()
        except OSError:  # (as a read's; should the source go on, it reads from there again)
            self._seek(self._at)
            raise
        if got < 0:
            shorter = os.fstat(self._file.fileno()).st_size < self._at
            self._restart("was truncated" if shorter else "was rewritten in place")
            return self._read(size), None
        self._at += got
        data = ahead.buffer if got == size else bytes(memoryview(ahead.buffer)[:got])
        return data, None if lines is None else (got, cut, (lines, newlines, raw))

    def _held_back(self, data: bytes | bytearray) -> bytes | bytearray:
        """`data` but the NULs that end the file: not read yet (a gap its writer has yet to
        fill, on NFS or by a writer that reserves its space; or a power cut's, read once
        something follows them), so the bytes that fill it are read where they land."""
        kept = data.rstrip(b"\0")
        self._seek(self._at - (len(data) - len(kept)))
        return kept

    def _read(self, size: int) -> bytes | bytearray:
        """The next `size` bytes at most. Of a regular file, after a look at the FINGERPRINT
        bytes before them: should they not be the bytes read before, the file was truncated or
        rewritten in place, and is read again from its start. (Two calls: each gives up the
        interpreter lock and waits to take it back while the loop applies a batch, so a step
        makes as few as it can. The descriptor's offset is kept where the reading is, as
        `lsof -o` and /proc/PID/fdinfo show it.)"""
        assert self._file is not None
        fd = self._file.fileno()
        if self._stream:
            try:
                return os.read(fd, size)
            except BlockingIOError:  # a writer, but nothing written yet
                return b""
        if self._tail and self._pread(len(self._tail), self._at - len(self._tail)) != self._tail:
            shorter = os.fstat(fd).st_size < self._at
            self._restart("was truncated" if shorter else "was rewritten in place")
        buf = self._buffers.take(size)
        n = os.readv(fd, [buf])
        self._at += n
        if n == size:
            return buf
        self._buffers.clear()  # (read to the end: no backlog to read into them)
        return bytes(memoryview(buf)[:n])

    def _not_followed(self, why: str) -> Batch | None:
        """The path holds no file to follow: said once (until it changes), then polled."""
        if why == self._said:
            return None
        self._said = why
        log.warning("node %s: %s; waiting for a dump file there", self.node, why)
        return Batch(self.node, up=False, error=why)

    def _restart(self, what: str) -> None:
        assert self._file is not None
        log.warning("node %s: %s %s; reading it again from the start", self.node, self.path, what)
        self._seek(0)
        self._reader = LineReader(self.node, since_us=self.since_us, where=str(self.path))
        self._said_caught_up = False
        self._tail = b""

    def _seek(self, offset: int) -> None:
        """Read the open file from `offset` on."""
        assert self._file is not None
        self._at = os.lseek(self._file.fileno(), offset, os.SEEK_SET)

    def _pread(self, size: int, offset: int) -> bytes:
        assert self._file is not None
        return os.pread(self._file.fileno(), size, offset) if offset >= 0 else b""

    def _batch(self, chunk: Chunk, caught_up: bool) -> Batch:
        position = str(FilePosition(self._dev, self._ino, self._reader.offset))
        return chunk.batch(self.node, position=position, caught_up=caught_up, gap=self._take_gap())

    def _take_gap(self) -> bool:
        gap, self._gap = self._gap, False
        return gap

    def _open(self) -> str:
        """Open the dump at the path: "" when it is followed, else why not (said as the node's
        error). Anything but a regular file or a FIFO is refused unopened (opening a device
        may do something: a tape rewinds, a watchdog starts)."""
        try:
            why = self._refused(os.stat(self.path))  # (through a symlink: what it leads to)
            if why:
                return why
            # O_NONBLOCK: opening a FIFO no writer has opened would block until one does
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return f"{self.path} does not exist"
        try:
            st = os.fstat(fd)
            why = self._refused(st)  # (replaced since the stat)
            self._stream = stat.S_ISFIFO(st.st_mode)
            if not why and not self._stream:
                os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        if why:
            os.close(fd)
            return why
        f: io.BufferedReader | io.FileIO = (
            io.FileIO(fd, "rb") if self._stream else os.fdopen(fd, "rb")
        )
        self._file, self._dev, self._ino = f, st.st_dev, st.st_ino
        self._said = ""
        self._said_caught_up = False
        self._start(st)
        return ""

    def _refused(self, st: os.stat_result) -> str:
        """Why a file of `st` is not followed ("" when it is)."""
        kind = stat.S_IFMT(st.st_mode)
        if kind in FOLLOWED:
            return ""
        what = KINDS.get(kind, f"a file of mode {st.st_mode:o}")
        via = f" (a symlink to {os.path.realpath(self.path)})" if self.path.is_symlink() else ""
        return f"{self.path}{via} is {what}, not a dump file: not read"

    def _start(self, st: os.stat_result) -> None:
        """Where to read the file just opened: where it was left (the same file back at the
        path), at the saved position, or from its start."""
        self._reader = LineReader(self.node, since_us=self.since_us, where=str(self.path))
        self._tail, self._at = b"", 0
        resume, self._resume = self._resume, None
        left, self._left = self._left, None
        if self._stream:
            # what a FIFO held was taken by the reads before: follow it from where it is
            log.info("node %s: following %s (a FIFO: no position to resume)", self.node, self.path)
        elif left is not None and left[0].of(st) and self._before(left[0].offset) == left[1]:
            self._go_on(left[0].offset)
            log.info(
                "node %s: %s is the file it followed before, again: going on from byte %d",
                self.node,
                self.path,
                left[0].offset,
            )
        elif resume is not None and resume.of(st) and self._ends_a_line(resume.offset):
            self._go_on(resume.offset)
            log.info("node %s: following %s from byte %d", self.node, self.path, resume.offset)
        elif resume is not None:
            self._gap = True
            log.warning(
                "node %s: %s is not the file of the saved position (replaced, truncated or "
                "rewritten while the exporter was down): reading it from its start; "
                "what the old file held after that position is lost",
                self.node,
                self.path,
            )
        else:
            log.info("node %s: following %s from its start", self.node, self.path)

    def _go_on(self, offset: int) -> None:
        """Read the open file from `offset`, after a whole line."""
        assert self._file is not None
        self._reader = LineReader(
            self.node, since_us=self.since_us, where=str(self.path), first_line=None
        )
        self._reader.offset = offset
        self._seek(offset)
        self._tail = self._before(offset)

    def _before(self, offset: int) -> bytes:
        """The FINGERPRINT bytes of the open file before `offset`."""
        start = max(0, offset - FINGERPRINT)
        return self._pread(offset - start, start)

    def _ends_a_line(self, offset: int) -> bool:
        """Does a line end just before `offset` (as before every saved position)? A file
        rewritten in place to as long or longer seldom has one there."""
        return offset == 0 or self._pread(1, offset - 1) in LINE_ENDS

    def _is_at_end(self) -> bool:
        assert self._file is not None
        return self._at >= os.fstat(self._file.fileno()).st_size

    def _at_end(self) -> Batch | None:
        """At the end of the open file: has it been truncated or replaced?"""
        assert self._file is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None  # moved away and not yet replaced: keep what we have
        if (st.st_dev, st.st_ino) != (self._dev, self._ino):
            log.info("node %s: %s was replaced; reading what is there now", self.node, self.path)
            if not self._stream:  # (should it come back, it goes on from here)
                at = self._reader.offset
                self._left = FilePosition(self._dev, self._ino, at), self._before(at)
            self._file.close()
            self._file = None
            return self.step()
        if not self._stream and st.st_size < self._at:
            self._restart("was truncated")
            return self.step()
        if self._said_caught_up:
            return None
        self._said_caught_up = True
        return Batch(
            self.node,
            caught_up=True,
            position=str(FilePosition(self._dev, self._ino, self._reader.offset)),
        )


def follow(node: FileNode, since_us: int, position: str) -> FileSource:
    """The daemon's source for a file node, from `position` (or `since_us` without one)."""
    return FileSource(node.name, node.path, since_us=since_us, position=position)


async def window(
    node: FileNode, since_us: int, until_us: int, progress: Progress | None = None
) -> AsyncIterator[Batch]:
    """A dump's entries from `since_us` on, read to its end or a little past `until_us`, as
    Batches. Its path may be `-` (standard input), a pipe, or gzip (by its magic bytes). A
    regular file is read right here, a chunk at a time (from the page cache, it does not block
    for long, and a worker thread would only contend for the GIL); anything else in a worker
    thread. (`progress` is for streams that take long to come: a dump is read at once.)"""
    name, path = node.name, node.path
    f = await asyncio.to_thread(_open_dump, name, path)
    reader = LineReader(name, since_us=since_us, where="<stdin>" if path == STDIN else str(path))
    regular = path != STDIN and path.is_file() and not isinstance(f, gzip.GzipFile)
    reads = DumpReads(f.fileno(), reader, name, path) if regular else None

    def next_chunk() -> tuple[Chunk, bool]:
        data = _read(f, name, path)
        return (reader.feed(data) if data else reader.end()), bool(data)

    try:
        while True:
            chunk, more = reads.next() if reads is not None else await asyncio.to_thread(next_chunk)
            yield chunk.batch(name, caught_up=not more)
            if not more or (chunk.newest_us is not None and chunk.newest_us > until_us):
                return
    finally:
        if reads is not None:
            reads.close()  # (before the file: a read may be under way)
        if path != STDIN:
            f.close()


def _open_dump(node: str, path: Path) -> BinaryIO:
    if path == STDIN:
        raw: BinaryIO = sys.stdin.buffer
    else:
        try:
            kind = stat.S_IFMT(path.stat().st_mode)
            if kind not in FOLLOWED:  # (a device is never opened: /dev/zero reads without end)
                what = KINDS.get(kind, "no dump file")
                raise SourceError(f"node {node}: {path} is {what}, not a dump file: not read")
            raw = path.open("rb")
        except OSError as e:
            raise SourceError(f"node {node}: cannot read {path}: {e.strerror or e}") from None
    buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(cast(Any, raw))
    try:
        magic = buffered.peek(2)[:2]
    except OSError as e:
        raise SourceError(f"node {node}: cannot read {path}: {e.strerror or e}") from None
    if magic == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[return-value]
    return buffered


def _read(f: BinaryIO, node: str, path: Path) -> bytes:
    """The next chunk of a window's stream: a backlog's size (a window is all backlog)."""
    try:
        return f.read(READ_SIZE)
    except (OSError, EOFError, gzip.BadGzipFile) as e:  # (EOFError: a gzip stream cut short)
        raise SourceError(f"node {node}: cannot read {path}: {e}") from None
