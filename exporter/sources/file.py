"""Follows a journal dump file like `tail -F`, in large chunks, skipping lines that cannot matter.

Handles appends, a partial last line (waited for), truncation (read again from the start), the
file replaced by a new one (the old one read to its end first) and a file that does not exist
yet. Its position is (device, inode, byte offset after the last whole line read).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from exporter.logline import Batch, LogLine
from exporter.parse import KEYWORDS
from exporter.sources.dump import DumpLineError, LineDecoder

log = logging.getLogger(__name__)

CHUNK = 1 << 20
# The parser's keywords, and JSON entries whose MESSAGE is not UTF-8 (an array of bytes),
# whatever the spacing journalctl puts around the colon.
_KEYWORDS = (*KEYWORDS, b'"MESSAGE":[', b'"MESSAGE": [', b'"MESSAGE" : [')


@dataclass(frozen=True)
class FilePosition:
    dev: int
    ino: int
    offset: int

    def __str__(self) -> str:
        return f"{self.dev}:{self.ino}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> FilePosition | None:
        try:
            dev, ino, offset = (int(x) for x in text.split(":"))
        except ValueError:
            return None
        return cls(dev, ino, offset) if offset >= 0 else None


def relevant_lines(data: bytes) -> list[bytes]:
    """The lines of `data` (whole lines, newline-separated) that contain a keyword, in order.

    One `bytes.find` pass per keyword: a C-speed search, where an alternation regex would try
    every keyword at every byte."""
    find, rfind = data.find, data.rfind
    starts: set[int] = set()
    for keyword in _KEYWORDS:
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


def _compiled_scan() -> Callable[..., tuple[list[bytes | LogLine], int, int]] | None:
    """The compiled `relevant_lines` that also decodes plain short-iso-precise lines (setup.py
    builds it wherever a C compiler is)."""
    try:
        from exporter._speedups import scan as compiled
    except ImportError:  # pragma: no cover - CI insists on the compiled module
        return None
    return compiled


_scan = _compiled_scan()


def scan(data: bytes, node: str, since_us: int) -> tuple[list[bytes | LogLine], int, int]:
    """`relevant_lines(data)`, the number of lines in `data`, and how many of the lines are
    bytes; where the compiled module is built, each plain short-iso-precise line comes already
    decoded to a LogLine of `node` (and left out when older than `since_us`), the rest as bytes
    for `LineDecoder`."""
    if _scan is not None:
        return _scan(data, _KEYWORDS, node, since_us, LogLine)
    lines: list[bytes | LogLine] = list(relevant_lines(data))
    return lines, data.count(b"\n"), len(lines)


def last_lines(data: bytes, most: int = 16) -> Iterator[bytes]:
    """The last lines of `data` (whole lines), newest first, at most `most` of them."""
    end = len(data.rstrip(b"\n"))
    for _ in range(most):
        if end <= 0:
            return
        start = data.rfind(b"\n", 0, end) + 1
        yield data[start:end]
        end = start - 1


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
        self._decoder = LineDecoder(node)
        self._file: io.BufferedReader | None = None
        self._dev = self._ino = 0
        self._offset = 0  # after the last whole line handed over
        self._partial = b""
        self._said_missing = False
        self._said_caught_up = False
        self._lock = threading.Lock()
        self._gap = False  # the saved position could not be resumed: say so in the next batch

    async def run(self, out: asyncio.Queue[Batch]) -> None:
        try:
            while True:
                batch = await asyncio.to_thread(self._locked_step)
                if batch is not None:
                    await out.put(batch)
                if batch is None or batch.caught_up or not batch.up:
                    await asyncio.sleep(self.poll_seconds)
        finally:
            # a step cancelled while its thread still reads: close once that thread is done
            await asyncio.to_thread(self._close)

    def _locked_step(self) -> Batch | None:
        with self._lock:
            return self.step()

    def _close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()

    def step(self) -> Batch | None:
        """Read what is new (blocking file I/O: run it in a thread); None when nothing changed."""
        if self._file is None and not self._open():
            if self._said_missing:
                return None
            self._said_missing = True
            log.warning("node %s: %s does not exist yet; waiting for it", self.node, self.path)
            return Batch(self.node, up=False, error=f"{self.path} does not exist")
        assert self._file is not None
        data = self._file.read(self.chunk)
        if not data:
            return self._at_end()
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        whole = data[:cut]
        self._offset += cut
        self._said_caught_up = self._is_at_end()
        return self._batch(whole, self._said_caught_up)

    def _batch(self, whole: bytes, caught_up: bool) -> Batch:
        lines: list[LogLine] = []
        errors: list[str] = []
        since_us = self.since_us
        items, entries, n_raw = scan(whole, self.node, since_us)
        if not n_raw:  # all decoded already (the compiled scan, on plain lines)
            lines = cast("list[LogLine]", items)
        for item in items if n_raw else ():
            if type(item) is LogLine:
                lines.append(item)
                continue
            assert isinstance(item, bytes)
            try:
                line = self._decoder.decode(item)
            except DumpLineError as e:  # holds a keyword but is no journal line: it counts
                errors.append(f"{self.path}: {e}: {item[:200]!r}")
                continue
            if line is not None and line.time_us >= since_us:
                lines.append(line)
        newest = None
        for raw in last_lines(whole):  # the newest line with a time (not a `-- Boot --` note)
            try:
                line = self._decoder.decode(raw)
            except DumpLineError:
                continue
            if line is not None:
                newest = line.time_us
                break
        return Batch(
            self.node,
            tuple(lines),
            entries=entries,
            newest_us=newest,
            position=str(FilePosition(self._dev, self._ino, self._offset)),
            caught_up=caught_up,
            errors=tuple(errors),
            gap=self._take_gap(),
        )

    def _take_gap(self) -> bool:
        gap, self._gap = self._gap, False
        return gap

    def _open(self) -> bool:
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            return False
        st = os.fstat(f.fileno())
        self._file, self._dev, self._ino = f, st.st_dev, st.st_ino
        self._offset, self._partial = 0, b""
        self._said_missing = self._said_caught_up = False
        resume = self._resume
        self._resume = None
        if (
            resume is not None
            and (resume.dev, resume.ino) == (st.st_dev, st.st_ino)
            and resume.offset <= st.st_size
        ):
            self._offset = resume.offset
            f.seek(resume.offset)
            log.info("node %s: following %s from byte %d", self.node, self.path, resume.offset)
        elif resume is not None:
            self._gap = True
            log.warning(
                "node %s: %s is not the file of the saved position (replaced or "
                "truncated while the exporter was down): reading it from its start; "
                "what the old file held after that position is lost",
                self.node,
                self.path,
            )
        else:
            log.info("node %s: following %s from its start", self.node, self.path)
        return True

    def _is_at_end(self) -> bool:
        assert self._file is not None
        return self._file.tell() >= os.fstat(self._file.fileno()).st_size

    def _at_end(self) -> Batch | None:
        """At the end of the open file: has it been truncated or replaced?"""
        assert self._file is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None  # moved away and not yet replaced: keep what we have
        if (st.st_dev, st.st_ino) != (self._dev, self._ino):
            log.info("node %s: %s was replaced; reading the new file", self.node, self.path)
            self._file.close()
            self._file = None
            return self.step()
        if st.st_size < self._file.tell():
            log.warning(
                "node %s: %s was truncated; reading it again from the start", self.node, self.path
            )
            self._file.seek(0)
            self._offset, self._partial, self._said_caught_up = 0, b"", False
            return self.step()
        if self._said_caught_up:
            return None
        self._said_caught_up = True
        return Batch(
            self.node,
            caught_up=True,
            position=str(FilePosition(self._dev, self._ino, self._offset)),
        )
