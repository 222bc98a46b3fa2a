"""The line layer: a node's bytes -> the journal lines that may matter, as LogLines.

Every source that reads text (dump files, `journalctl` over SSH, the report's inputs) hands its
bytes to one `LineReader`, which
- frames them into lines, carrying a partial last line to the next call; a NUL byte ends a
  line too (a run of them is what a power cut leaves where data was never written): the text
  after a run is a line of its own, read as any other, and the part of a line cut short before
  it is a line as well (a parse error if it holds a keyword); the NULs themselves are no entry,
  and no line of `FILE:LINE`, which counts newlines only;
- finds the lines that hold a parser keyword (`KEYWORDS`), skipping the rest unread (compiled:
  one Wu-Manber pass, with the plain short-iso-precise and usual JSON shapes decoded there too);
- decodes the others with `entries.EntryDecoder`; a keyword line that is neither format is a
  parse error named by where it is (`FILE:LINE`);
- caps a line at MAX_LINE bytes: a longer one holding a keyword is one parse error, skipped in
  linear time and bounded memory, however long it grows.
A line with no keyword is never an error: it cannot carry a request, so the daemon and the
report, which read through this same layer, count the same parse errors for the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

from exporter.base.records import Batch, LogLine
from exporter.compiled.switch import WHOLE_LINES, speedups
from exporter.parse.tokens import KEYWORDS as PARSER_KEYWORDS
from exporter.sources.entries import EntryDecoder, EntryError

MAX_LINE = 1 << 20
# The parser's keywords, and JSON entries whose MESSAGE is not UTF-8 (an array of bytes),
# whatever the spacing journalctl puts around the colon.
KEYWORDS = (*PARSER_KEYWORDS, b'"MESSAGE":[', b'"MESSAGE": [', b'"MESSAGE" : [')
_LONGEST = max(map(len, KEYWORDS))
_ERRORS_KEPT = 100  # error texts kept per chunk (all are counted)
# A read ahead is scanned in two halves (two threads) when the lines it finds are sparse, more
# than SPARSE_BYTES of the stream a line, as the last chunk's were (journal JSON: about 1 KB a
# line): then finding them takes longer than using them. Dense lines (short-iso-precise, about
# 170 bytes) are used about as fast as they are found, on the other core: a third thread there
# only took turns with the two.
SPARSE_BYTES = 400
NUL = b"\0"
NEWLINE = b"\n"
# what `_scan` answers: the keyword lines, the newlines, how many of the lines are left raw
Found = tuple[Sequence[bytes | LogLine], int, int]

if TYPE_CHECKING:
    from exporter.compiled._speedups import Reading


def find_lines(data: bytes) -> list[bytes]:
    """The lines of `data` (newline-separated) that hold a keyword, in order: the pure-Python
    reference of the compiled scan's search. One `bytes.find` pass per keyword: a C-speed
    search, where an alternation regex would try every keyword at every byte."""
    find, rfind = data.find, data.rfind
    starts: set[int] = set()
    for keyword in KEYWORDS:
        at = find(keyword)
        while at >= 0:
            starts.add(rfind(b"\n", 0, at) + 1)
            end = find(b"\n", at)
            if end < 0:
                break
            at = find(keyword, end)
    lines = []
    for start in sorted(starts):
        end = find(b"\n", start)
        lines.append(data[start:] if end < 0 else data[start:end])
    return lines


def _scan(data: bytes | bytearray | memoryview, node: str, since_us: int, max_line: int) -> Found:
    """The keyword lines of `data` (whole lines), the newlines in it and how many of the lines
    are left raw: compiled, each line of a usual shape comes decoded (dropped when older than
    `since_us`), all of them as one `Lines` when none is left raw; pure, all raw."""
    if speedups is not None:
        found: Found = speedups.scan(data, KEYWORDS, node, since_us, LogLine, max_line)
        return found
    if not isinstance(data, bytes):
        data = bytes(data)
    lines: list[bytes | LogLine] = list(find_lines(data))
    return lines, data.count(b"\n"), len(lines)


def join(parts: Sequence[Sequence[LogLine]]) -> Sequence[LogLine]:
    """The lines of `parts`, in order, as one sequence: compiled, one `Lines` (whose LogLines
    are made only when asked for; the parser reads the common ones straight from the bytes)."""
    if len(parts) == 1 and type(parts[0]) in WHOLE_LINES:  # (a chunk's one Lines: not copied)
        return parts[0]
    if speedups is not None:
        joined: Sequence[LogLine] = speedups.join(parts)
        return joined
    return tuple(chain.from_iterable(parts))


@dataclass(slots=True)
class Chunk:
    """What one call of a LineReader found: the lines that may matter (newer than `since`), in
    parts, the parse errors it named, the entries (lines) it read, and the newest entry's time
    and cursor."""

    parts: list[Sequence[LogLine]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    entries: int = 0
    newest_us: int | None = None
    cursor: str = ""  # of the newest entry that has one ("" for short-iso text)

    @property
    def lines(self) -> Sequence[LogLine]:
        return join(self.parts)

    def add(self, later: Chunk) -> None:
        """What a later call found, after this."""
        self.parts += later.parts
        self.errors += later.errors
        self.entries += later.entries
        if later.newest_us is not None:
            self.newest_us = later.newest_us
        if later.cursor:
            self.cursor = later.cursor

    def batch(self, node: str, *, position: str = "", caught_up: bool, gap: bool = False) -> Batch:
        """What a source hands over of this chunk."""
        return Batch(
            node,
            self.lines,
            entries=self.entries,
            newest_us=self.newest_us,
            position=position,
            caught_up=caught_up,
            errors=tuple(self.errors),
            gap=gap,
        )


class Ahead:
    """A read under way (`LineReader.read_ahead`): into `buffer`, from `offset` of the file,
    whose bytes before it were `tail`."""

    __slots__ = ("buffer", "followed", "offset", "reading", "tail")

    def __init__(self, reading: Reading, buffer: bytearray, offset: int, tail: bytes) -> None:
        self.reading, self.buffer, self.offset, self.tail = reading, buffer, offset, tail
        self.followed = False  # the next read started from the end of its last whole line


class LineReader:
    """One node's byte stream, framed and decoded; see the module docstring. `where` names the
    stream in errors (a file name, `ssh host`); `lineno` is the lines read so far (so an error
    says `where:N`; `first_line` when the stream does not start at its first line)."""

    def __init__(
        self,
        node: str,
        *,
        since_us: int = 0,
        where: str = "",
        first_line: int | None = 1,
        max_line: int = MAX_LINE,
    ) -> None:
        self.node = node
        self.since_us = since_us
        self.where = where or node
        self.max_line = max_line
        self.decoder = EntryDecoder(node)
        self.offset = 0  # bytes read in whole lines (and long lines skipped)
        self.lineno = 0  # lines read
        self._first = first_line
        self._partial = b""
        self._skipping = False  # inside a line longer than max_line
        self._skipped_keyword = False  # ... which holds a keyword
        self._skipped_tail = b""  # its last bytes, for a keyword across two reads
        self._skip_bytes = 0  # its length so far
        self._found = 0
        self._sparse = True  # were the last chunk's lines sparse (see SPARSE_BYTES)?

    def feed(self, data: bytes | bytearray) -> Chunk:
        """The next bytes of the stream (a bytearray is read as it is, never kept: the Lines
        made of it hold it until they are done with)."""
        chunk = Chunk()
        # `data` as it is framed (each NUL a line end), `raw` as it came: the same length, and
        # the same object when there is no NUL (the usual case: a single memchr pass to know)
        raw = data
        if NUL in data:
            data = data.replace(NUL, NEWLINE)
        if self._skipping:
            at = self._skip(data, raw, chunk)
            if self._skipping:
                return chunk
            same = raw is data
            data = data[at:]
            raw = data if same else raw[at:]
        cut = data.rfind(b"\n") + 1
        if not cut:
            self._partial += data
            if len(self._partial) > self.max_line:
                self._start_skip(chunk)
            return chunk
        start = 0
        if self._partial:  # the line begun before: on its own, so the rest is never copied
            start = data.find(b"\n") + 1
            head = self._partial + data[:start]
            raw_head = head if raw is data else self._partial + raw[:start]
            self._partial = b""
            self._decode(head, 0, len(head), chunk, raw_head)
        if start < cut:
            self._decode(data, start, cut, chunk, raw)
        self._partial = bytes(data[cut:])
        if len(self._partial) > self.max_line:
            self._start_skip(chunk)
        return chunk

    def read_ahead(self, fd: int, end: int, buffer: bytearray, tail: bytes) -> Ahead | None:
        """The bytes of the regular file `fd` after `end` (where the bytes fed so far end;
        `tail`: the bytes before it, as they were) read into `buffer` and their whole lines
        scanned, in a thread of the compiled module's own that needs no interpreter lock; the
        partial line carried is read again with them (dropped here). `take` makes its answer a
        Chunk. None without the compiled module, while a long line is skipped, or when the
        partial line is as long as `tail` (the bytes before it would not be checked) or half
        the buffer (read again, it would leave too little room for new bytes)."""
        back = len(self._partial)
        if speedups is None or self._skipping or (tail and back >= len(tail)):
            return None
        if 2 * back > len(buffer):
            return None
        offset, before = end - back, tail[: len(tail) - back]
        reading: Reading = speedups.read_ahead(
            fd,
            offset,
            buffer,
            before,
            KEYWORDS,
            self.node,
            self.since_us,
            LogLine,
            self.max_line,
            self._sparse,
        )
        self._partial = b""
        return Ahead(reading, buffer, offset, before)

    def read_on(self, fd: int, ahead: Ahead, buffer: bytearray, tail_size: int) -> Ahead | None:
        """The read after `ahead`, started once `ahead` is done and before its answer is
        taken, from the end of the last whole line it read: its answer is made and applied
        while the next bytes are read, and the partial line after its lines is read again, not
        carried. It checks the `tail_size` bytes before its offset. None when `ahead` did not
        fill its buffer with whole lines (or the partial line after them took half of it)."""
        got, cut = ahead.reading.wait()
        if got != len(ahead.buffer) or not cut or 2 * (got - cut) > got:
            return None
        before = memoryview(ahead.buffer)[max(0, cut - tail_size) : cut].tobytes()
        tail = (ahead.tail + before)[-tail_size:] if tail_size else b""
        after = self.read_ahead(fd, ahead.offset + cut, buffer, tail)
        ahead.followed = after is not None
        return after

    def take(self, ahead: Ahead, got: int, cut: int, found: Found) -> Chunk:
        """What `feed(ahead.buffer[:got])` finds, from the whole lines a Reading scanned
        (`found`: its answer, as `_scan`'s) before `cut`; the partial line after them carried,
        unless the read after it reads it again (`read_on`)."""
        chunk = Chunk()
        self._scanned(ahead.buffer, 0, cut, chunk, ahead.buffer, found)
        if not ahead.followed:
            self._partial = bytes(memoryview(ahead.buffer)[cut:got])
            if len(self._partial) > self.max_line:
                self._start_skip(chunk)
        return chunk

    def end(self) -> Chunk:
        """The end of the stream: its last line, if no newline ended it."""
        chunk = Chunk()
        if self._skipping:
            self._skip(NEWLINE, NEWLINE, chunk)
        elif self._partial:
            whole, self._partial = self._partial + b"\n", b""
            self._decode(whole, 0, len(whole), chunk, whole)
        return chunk

    def _decode(
        self, data: bytes | bytearray, start: int, end: int, chunk: Chunk, raw: bytes | bytearray
    ) -> None:
        """The whole lines data[start:end] (read without copying them); `raw`: the same bytes
        before NULs became line ends (`data` itself when there were none)."""
        view = data if start == 0 and end == len(data) else memoryview(data)[start:end]
        items, entries, n_raw = _scan(view, self.node, self.since_us, self.max_line)
        self._scanned(data, start, end, chunk, raw, (items, entries, n_raw))

    def _scanned(
        self,
        data: bytes | bytearray,
        start: int,
        end: int,
        chunk: Chunk,
        raw: bytes | bytearray,
        found: Found,
    ) -> None:
        """What `_decode` found in data[start:end] (`found`: as `_scan` answers) into `chunk`."""
        items, entries, n_raw = found
        self._sparse = end - start > SPARSE_BYTES * max(1, len(items))
        if raw is not data:  # entries and line numbers count newlines, not NULs
            entries = raw.count(NEWLINE, start, end)
        if not n_raw:  # all decoded already (compiled, on the usual shapes)
            if items:
                chunk.parts.append(items)  # type: ignore[arg-type]
        else:
            lines: list[LogLine] = []
            chunk.parts.append(lines)
            whole = bytes(memoryview(data)[start:end])  # (only where a line is left raw: rare)
            lines_of = whole if raw is data else raw[start:end]
            since_us, decode = self.since_us, self.decoder.decode
            self._found = 0  # where in `whole` the error search goes on
            for item in items:
                if type(item) is LogLine:
                    lines.append(item)
                    continue
                assert isinstance(item, bytes)
                if len(item) > self.max_line:
                    why = f"a line of {len(item):,} bytes, longer than {self.max_line:,}: skipped"
                    self._error(chunk, (whole, lines_of), item, why)
                    continue
                try:
                    line = decode(item)
                except EntryError as e:  # holds a keyword but is no journal line: it counts
                    self._error(chunk, (whole, lines_of), item, f"{e}: {item[:200]!r}")
                    continue
                if line is not None and line.time_us >= since_us:
                    lines.append(line)
        self._newest(data, start, end, chunk)
        chunk.entries += entries
        self.offset += end - start
        self.lineno += entries

    def _newest(self, data: bytes | bytearray, start: int, end: int, chunk: Chunk) -> None:
        """The newest line with a time (not a `-- Boot --` note) in data[start:end], and its
        cursor; each of the last lines copied alone."""
        for _ in range(16):
            while end > start and data[end - 1] == 10:  # (b"\n")
                end -= 1
            if end <= start:
                return
            first = max(data.rfind(b"\n", start, end) + 1, start)
            if end - first <= self.max_line:
                try:
                    line = self.decoder.decode(bytes(data[first:end]))
                except EntryError:
                    line = None
                if line is not None:
                    chunk.newest_us, chunk.cursor = line.time_us, line.cursor
                    return
            end = first

    def _error(
        self, chunk: Chunk, region: tuple[bytes, bytes | bytearray], line: bytes, why: str
    ) -> None:
        """`line`, found in `region` (the bytes decoded, framed and as they came), is `why`."""
        if len(chunk.errors) >= _ERRORS_KEPT:
            chunk.errors.append(f"{self.where}: {why[:60]}")
            return
        whole, lines_of = region
        at = whole.find(line, self._found)  # (the items come in order)
        while at > 0 and whole[at - 1] != NEWLINE[0]:  # (a whole line, not its text in another)
            at = whole.find(line, at + 1)
        if at >= 0:
            self._found = at + len(line)
        into = lines_of.count(NEWLINE, 0, at) if at >= 0 else 0
        chunk.errors.append(f"{self._place(into)}: {why}")

    def _place(self, lines_into: int) -> str:
        """`where:N` for the line `lines_into` lines after the ones read so far."""
        if self._first is None:
            return f"{self.where} (at byte {self.offset:,} + {lines_into} lines)"
        return f"{self.where}:{self._first + self.lineno + lines_into}"

    # -- lines longer than max_line ----------------------------------------------------------

    def _start_skip(self, chunk: Chunk) -> None:
        partial, self._partial = self._partial, b""
        self._skipping = True
        self._skipped_keyword = bool(find_lines(partial))
        self._skipped_tail = partial[-_LONGEST:]
        self._skip_bytes = len(partial)

    def _skip(self, data: bytes | bytearray, raw: bytes | bytearray, chunk: Chunk) -> int:
        """Bytes of a line too long to keep (`raw` as they came): look for its end (and for a
        keyword in it); how many of them it took."""
        nl = data.find(b"\n")
        part = data if nl < 0 else data[:nl]
        if not self._skipped_keyword:
            self._skipped_keyword = bool(find_lines(self._skipped_tail + part))
        self._skip_bytes += len(part)
        if nl < 0:
            self._skipped_tail = (self._skipped_tail + part)[-_LONGEST:]
            return len(data)
        if self._skipped_keyword:
            why = f"a line of {self._skip_bytes:,} bytes, longer than {self.max_line:,}: skipped"
            chunk.errors.append(f"{self._place(0)}: {why}")
        newline = raw[nl] != NUL[0]  # (ended by a NUL: the line goes on after it)
        chunk.entries += newline
        self.offset += self._skip_bytes + 1
        self.lineno += newline
        self._skipping, self._skipped_tail = False, b""
        return nl + 1
