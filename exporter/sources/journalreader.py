"""Reads a `journal` node through systemd-python: the local journal, a directory or files, by unit.

Only the fields the parser needs are read, raw (`_get`, no per-field converters), and MESSAGE
is tested for the parser's keywords before it is decoded. The Reader is used from worker threads
only, one at a time, so the event loop never blocks. Position: the journal cursor of the last
entry read; resuming skips that entry itself. A cursor that no longer exists (vacuumed or
rotated away) resumes from its own time, with a warning and a gap.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeAlias, TypeVar

from systemd import journal

from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND, fits, iso
from exporter.parse.tokens import KEYWORDS
from exporter.sources.base import Progress, SourceError
from exporter.sources.entries import cursor_time_us
from exporter.sources.journal import JournalNode

log = logging.getLogger(__name__)
T = TypeVar("T")

BATCH = 5000  # entries per batch at most
# One compiled search for the parser's keywords: on a short MESSAGE it beats testing each.
_KEYWORD = re.compile(b"|".join(map(re.escape, KEYWORDS))).search
WAIT_US = SECOND  # how long one wait for new entries may block its thread


JournalReader: TypeAlias = journal._Reader


def open_matched(
    unit: str,
    *,
    directory: Path | None = None,
    files: tuple[Path, ...] = (),
    host: str | None = None,
) -> JournalReader:
    """A Reader of `directory`, `files` or the local journal, matched on `unit` as `journalctl
    -u` is (and on `host`'s `_HOSTNAME` if given); OSError when it cannot be opened."""
    if directory is not None:
        reader = journal._Reader(0, path=str(directory))
    elif files:
        reader = journal._Reader(0, files=[str(f) for f in files])
    else:
        reader = journal._Reader(journal.LOCAL_ONLY)
    match(reader, unit, host)
    return reader


def match(reader: JournalReader, unit: str, host: bytes | str | None = None) -> None:
    """Match `reader` on `unit` as `journalctl -u` is (and on `host`'s `_HOSTNAME` if given),
    in place of what it was matched on."""
    reader.flush_matches()
    if host is not None:
        reader.add_match(b"_HOSTNAME=" + (host.encode() if isinstance(host, str) else host))
        reader.add_conjunction()
    # what `journalctl -u UNIT` shows: the unit's own lines, and systemd's about it
    # (Started, Stopping, Failed with result ...: the parser's server state)
    reader.add_match(f"_SYSTEMD_UNIT={unit}".encode())
    reader.add_disjunction()
    reader.add_match(f"UNIT={unit}".encode())
    reader.add_match(b"_PID=1")


class JournalSource:
    """One node's journal, followed; `run` hands Batches to a queue until cancelled."""

    def __init__(
        self,
        node: str,
        unit: str,
        *,
        since_us: int,
        position: str = "",
        directory: Path | None = None,
        files: tuple[Path, ...] = (),
        batch: int = BATCH,
    ) -> None:
        self.node = node
        self.unit = unit
        self.since_us = since_us
        self.directory = directory
        self.files = files
        self.batch = batch
        self._cursor = position
        self._reader: JournalReader | None = None
        self._lock = threading.Lock()
        self._gap = False
        self._said_caught_up = False

    async def run(self, out: asyncio.Queue[Batch]) -> None:
        try:
            await asyncio.to_thread(self._locked, self.open)
            while True:
                batch = await asyncio.to_thread(self._locked, self.step)
                if batch is not None:
                    await out.put(batch)
                if batch is None or batch.caught_up:
                    await asyncio.to_thread(self._locked, self._wait)
        finally:
            await asyncio.to_thread(self._locked, self.close)

    @property
    def is_open(self) -> bool:
        """Is a journal Reader open?"""
        return self._reader is not None

    def _locked(self, fn: Callable[[], T]) -> T:
        with self._lock:
            return fn()

    def _where(self) -> str:
        if self.directory is not None:
            return f"journal directory {self.directory}"
        if self.files:
            return "journal files " + ", ".join(map(str, self.files))
        return "the local journal"

    def open(self) -> None:
        try:
            reader = open_matched(self.unit, directory=self.directory, files=self.files)
        except OSError as e:
            raise SourceError(f"node {self.node}: cannot open {self._where()}: {e}") from e
        self._reader = reader
        self._seek(reader)

    def _seek(self, reader: JournalReader) -> None:
        cursor = self._cursor
        if not cursor:
            reader.seek_realtime(self.since_us)
            log.info(
                "node %s: following %s, unit %s, from %s",
                self.node,
                self._where(),
                self.unit,
                iso(self.since_us),
            )
            return
        try:
            reader.seek_cursor(cursor)
        except (ValueError, OSError):  # not a journal cursor (the node changed its source?)
            self._gap = True
            log.warning(
                "node %s: the saved position %r is not a journal cursor: reading %s from since",
                self.node,
                cursor[:80],
                self._where(),
            )
            reader.seek_realtime(self.since_us)
            return
        if reader._next() and reader.test_cursor(cursor):
            log.info(
                "node %s: following %s, unit %s, after its saved cursor",
                self.node,
                self._where(),
                self.unit,
            )
            return  # on the entry read last: the next _next() moves past it
        at = cursor_time_us(cursor)
        self._gap = True
        log.warning(
            "node %s: the saved cursor is no longer in %s (vacuumed or rotated away): "
            "resuming from its time; entries that are gone are not counted",
            self.node,
            self._where(),
        )
        if at is None:
            reader.seek_realtime(self.since_us)
        else:
            reader.seek_realtime(at + 1)

    def step(self) -> Batch | None:
        """Read up to `batch` new entries (blocking: run it in a thread); None when none."""
        reader = self._reader
        if reader is None:
            return None
        lines: list[LogLine] = []
        entries = 0
        newest = None
        get, next_entry, realtime, node = reader._get, reader._next, reader._get_realtime, self.node
        while entries < self.batch and next_entry():
            entries += 1
            t = realtime()
            if not fits(t):  # a clock far off, a corrupt entry: its line is a parse error
                lines.append(LogLine(node, t, "", 0, "journal time out of range"))
                continue
            newest = t
            try:
                raw = get("MESSAGE")
            except KeyError:
                continue
            if not _KEYWORD(raw):
                continue
            try:
                pid = int(get("_PID"))
            except (KeyError, ValueError):
                pid = 0
            lines.append(
                LogLine(
                    node,
                    t,
                    "",
                    pid,
                    raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw),
                )
            )
        if entries:
            self._cursor = reader._get_cursor()
        caught_up = entries < self.batch
        if not entries and self._said_caught_up:
            return None
        self._said_caught_up = caught_up
        gap, self._gap = self._gap, False
        return Batch(
            node,
            tuple(lines),
            entries=entries,
            newest_us=newest,
            position=self._cursor,
            caught_up=caught_up,
            gap=gap,
        )

    def _wait(self) -> None:
        if self._reader is not None:
            self._reader.wait(WAIT_US)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def follow(node: JournalNode, since_us: int, position: str) -> JournalSource:
    """The daemon's source for a journal node, from `position` (or `since_us` without one)."""
    return JournalSource(
        node.name,
        node.unit,
        since_us=since_us,
        position=position,
        directory=node.directory,
        files=node.files,
    )


async def window(
    node: JournalNode, since_us: int, until_us: int, progress: Progress | None = None
) -> AsyncIterator[Batch]:
    """The node's entries from `since_us` to `until_us` that may matter, for a report: the
    journal is sought to the window, not read from its start (in a worker thread). (`progress`
    is for streams that take long to come: the journal is read at once.)"""
    source = JournalSource(
        node.name, node.unit, since_us=since_us, directory=node.directory, files=node.files
    )
    await asyncio.to_thread(source.open)
    try:
        while True:
            batch = await asyncio.to_thread(source.step)
            if batch is None:
                return
            yield batch
            if batch.caught_up or (batch.newest_us is not None and batch.newest_us > until_us):
                return
    finally:
        await asyncio.to_thread(source.close)
