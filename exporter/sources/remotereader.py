"""Reads `journal-remote` nodes: one reader per collector directory, each entry to its host's node.

The nodes of one directory and unit share a `Collector`: it reads the directory's files
(`sources/remotefiles.py`, each file in its own order), matched on the unit as `journalctl -u`
would be. Each entry goes to the node whose host is its `_HOSTNAME`; an entry of a host no node
reads is skipped (and that host logged once).

Every node keeps its own places: in each file it read from, the seqnum of its last entry there
(its position names them all). A seqnum orders a file's entries exactly, whatever their times;
in a file a node has not read from (the host came from a new address), an entry counts from the
node's start on. A node that joins late makes the files be read again from its places; the
other nodes skip what they had. journal-upload sends the entry at its saved
cursor again after a restart, and journal-remote stores it twice: an entry already seen (its
boot ID, monotonic and wall-clock times and its MESSAGE) is dropped.

No task of its own reads: the first node's task reads for all and puts each node's Batches on
the daemon's queue itself (a node's Batch that finds the queue full waits in the node's inbox,
and the node's task hands it on, in order). When that task ends, the next node takes over. The
files are read in one worker thread at a time, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from exporter.base.records import Batch, LogLine
from exporter.base.times import fits
from exporter.parse.tokens import KEYWORDS
from exporter.sources.base import Progress, SourceError
from exporter.sources.journalreader import JournalReader
from exporter.sources.remote import RemoteNode
from exporter.sources.remotefiles import Files, Place, Plan, seqnum_of

log = logging.getLogger(__name__)

# entries per step at most: BATCH, or BATCH_PER_HOST a host if more. A step that stops short
# of the end says its nodes have not caught up; so a step must hold what a busy fleet writes
# between two polls, or every node would flap between caught up and not at every step.
BATCH, BATCH_PER_HOST = 5000, 40
POLL_S = 0.5  # how long the reader rests, once every file was read to its end
MAX_FILES = 8  # files a node keeps its place in (a host that moved: its old address's file)
# entries remembered per host, to drop one stored twice: journal-upload sends again the entry
# at its saved cursor, the host's last before it stopped, so the copy follows it closely
RECENT = 16
UNKNOWN_LOGGED = 1024  # hosts no node reads, logged once each, at most this many
_KEYWORD = re.compile(b"|".join(map(re.escape, KEYWORDS))).search

# a hash of an entry's monotonic time, boot ID, wall-clock time and MESSAGE (entries of one
# time are common: a timing block's lines come in one write)
Key = int


class Host:
    """One node reading its host's entries: its places (the last entry it read in each file),
    its start, the entries it saw last, its inbox."""

    def __init__(self, node: str, host: str, since_us: int, position: str) -> None:
        self.node = node
        self.host = host
        places = [p for p in map(Place.of, position.split()) if p is not None]
        self.places: dict[str, Place] = {p.seqnum_id: p for p in places}
        # a file new to it: from `since`, or after the newest entry its position names
        self.start_us = max((p.time_us for p in places), default=since_us)
        self._after = bool(places)
        self._recent: deque[Key] = deque()
        self._seen: set[Key] = set()
        self.said_caught_up = False
        self.active = True
        # where its Batches go (the daemon's queue); those that find it full wait in the inbox
        # for this node's task to hand them on. None in the inbox: the reader is free, take it
        self.out: asyncio.Queue[Batch] | None = None
        self.inbox: asyncio.Queue[Batch | None] = asyncio.Queue()
        self.relaying = False  # its task holds a Batch from the inbox (the queue was full)
        # what one step gathered
        self.lines: list[LogLine] = []
        self.entries = 0
        self.newest_us: int | None = None
        self.moved = False  # a place changed this step

    @property
    def position(self) -> str:
        """Its places, as a Batch's position: the newest last."""
        return " ".join(p.text for p in sorted(self.places.values(), key=_time))

    def takes(self, seqnum_id: str, seqnum: int, time_us: int, key: Key) -> bool:
        """Is this entry (`seqnum` of the file `seqnum_id`, at `time_us`) new to the node
        (after its place in that file, or, in a file it has not read from, not before its
        start; not one seen already)? It is remembered either way."""
        seen, recent = self._seen, self._recent
        if key in seen:
            return False
        if len(recent) == RECENT:
            seen.discard(recent.popleft())
        recent.append(key)
        seen.add(key)
        places = self.places
        was = places.get(seqnum_id)
        if was is not None:
            if seqnum <= was.seqnum:
                return False
        elif time_us < self.start_us or (self._after and time_us == self.start_us):
            return False
        places[seqnum_id] = Place(seqnum_id, seqnum, time_us)
        self.moved = True
        if was is None and len(places) > MAX_FILES:
            del places[min(places.values(), key=_time).seqnum_id]
        return True

    def hand(self, batch: Batch) -> None:
        """Put `batch` (of the reader's task) on the node's queue, straight when nothing of the
        node waits before it and there is room; in its inbox otherwise (its task hands it on)."""
        out = self.out
        if out is not None and not self.relaying and self.inbox.empty() and not out.full():
            out.put_nowait(batch)
        else:
            self.inbox.put_nowait(batch)

    def batch(self, caught_up: bool) -> Batch | None:
        """What this step gathered, as a Batch (None when there is nothing to say: no entry,
        and caught up or not as it said last; a node that said it was caught up says it is not
        when a step stops short of the end, though it got nothing, or its time would be taken
        as read up to now)."""
        if not self.entries and self.said_caught_up == caught_up:
            return None
        self.said_caught_up = caught_up
        batch = Batch(
            self.node,
            tuple(self.lines),
            entries=self.entries,
            newest_us=self.newest_us,
            position=self.position if self.moved else "",
            caught_up=caught_up,
        )
        self.lines, self.entries, self.newest_us, self.moved = [], 0, None, False
        return batch


# what one step of the reader made: each node's Batch, and whether the end was reached
Step = tuple[list[tuple["Host", Batch]], bool]


class Collector:
    """One directory's reader, shared by the nodes of its hosts (see the module docstring)."""

    def __init__(self, directory: Path, unit: str, only: str | None = None) -> None:
        self.directory = directory
        self.unit = unit
        self.only = only  # a host matched in the journal itself (a report's one node)
        self.hosts: dict[str, Host] = {}
        self.runner: Host | None = None
        self.drained = asyncio.Event()  # a node's task took a Batch from its inbox
        self._files: Files | None = None
        self._lock = threading.Lock()  # the files: one thread at a time
        self._join_lock = threading.Lock()  # `hosts` and `_joined`
        self._joined: list[Host] = []  # nodes that joined since the last step: files rewound
        self._pending: Step | None = None
        self._unknown: set[bytes] = set()  # hosts no node read, noted
        self._unsaid: list[bytes] = []  # of them, those not said yet

    @property
    def busy(self) -> bool:
        """Is a step under way (in a worker thread)?"""
        return self._lock.locked()

    def join(self, host: Host) -> None:
        """Hand `host`'s entries to it from its places on (the files are read again from
        there, if need be, from the next step on)."""
        with self._join_lock:
            self.hosts[host.host] = host
            self._joined.append(host)

    def leave(self, host: Host) -> None:
        host.active = False
        with self._join_lock:
            if self.hosts.get(host.host) is host:
                del self.hosts[host.host]
        self.drained.set()  # (the reader may wait for room in its inbox)

    async def read(self, me: Host, out: asyncio.Queue[Batch]) -> None:
        """Read for every node until cancelled (or the reader fails: SourceError), as `me`'s task;
        then the next node's task takes over."""
        self.runner = me
        try:
            while True:
                gathered, caught_up = await asyncio.to_thread(self._step)
                self._pending = None  # (taken: a runner cancelled before this leaves it)
                # the other nodes' first, without waiting: a cancel while this task waits for
                # room for its own would lose theirs (read, their places moved on)
                own = [batch for host, batch in gathered if host is me]
                for host, batch in gathered:
                    if host is not me and host.active:
                        host.hand(batch)
                for batch in own:
                    await out.put(batch)
                await self._room()
                if caught_up:
                    await asyncio.sleep(POLL_S)
        finally:
            self.runner = None
            for host in self.hosts.values():
                host.inbox.put_nowait(None)

    async def _room(self) -> None:
        """Wait until no node's task has more than one Batch waiting to be handed on."""
        while any(h.inbox.qsize() > 1 for h in self.hosts.values()):
            self.drained.clear()
            await self.drained.wait()

    def _step(self) -> Step:
        """Read up to a step's entries (blocking: in a worker thread), each to its host's node:
        the Batches made, and whether the end was reached. A step a cancelled reader's task
        took is handed to the next first."""
        with self._lock:
            if self._pending is None:
                self._pending = self._read()
            return self._pending

    def _read(self) -> Step:
        with self._join_lock:  # (nodes that join meanwhile wait for the next step)
            hosts, joined, self._joined = dict(self.hosts), self._joined, []
        self._say_unheard(hosts)
        files = self._files
        if files is None:
            files = self._files = Files(self.directory, self.unit, self.only)
        elif joined:
            files.rewind(Plan((h.places, h.start_us) for h in joined))
        files.scan(Plan((h.places, h.start_us) for h in hosts.values()))
        self._entries(files, {h.encode(): host for h, host in hosts.items()})
        caught_up = files.exhausted
        out: list[tuple[Host, Batch]] = []
        for host in hosts.values():
            batch = host.batch(caught_up)
            if batch is not None:
                out.append((host, batch))
        return out, caught_up

    def _entries(self, files: Files, hosts: dict[bytes, Host]) -> None:
        """Read up to a step's entries into their hosts' gathered lines."""
        # (per entry: so the Reader's methods are looked up once a file, not once an entry)
        last: JournalReader | None = None
        for reader in files.entries(max(BATCH, BATCH_PER_HOST * len(hosts))):
            if reader is not last:
                last = reader
                get, realtime, monotonic = reader._get, reader._get_realtime, reader._get_monotonic
                cursor = reader._get_cursor
            try:
                name = get("_HOSTNAME")
            except KeyError:
                continue
            host = hosts.get(name)
            if host is None:
                self._unheard(name)
                continue
            t = realtime()
            mono, boot = monotonic()
            try:
                raw = get("MESSAGE")
            except KeyError:
                raw = b""
            here = seqnum_of(cursor())
            if here is None or not host.takes(here[0], here[1], t, hash((mono, boot, t, raw))):
                continue
            host.entries += 1
            if not fits(t):  # a clock far off, a corrupt entry: its line is a parse error
                host.lines.append(LogLine(host.node, t, "", 0, "journal time out of range"))
                continue
            host.newest_us = t
            if _KEYWORD(raw):
                host.lines.append(_line(get, raw, host.node, t))

    def _unheard(self, name: bytes) -> None:
        """Note that `name`'s entries are in the directory but no node of this step reads them
        (said at the next step, unless a node that joined meanwhile reads them)."""
        if name not in self._unknown and len(self._unknown) < UNKNOWN_LOGGED:
            self._unknown.add(name)
            self._unsaid.append(name)

    def _say_unheard(self, hosts: Mapping[str, Host]) -> None:
        """Say once each host noted by `_unheard` that no node reads yet."""
        for name in self._unsaid:
            shown = name.decode("utf-8", "replace")
            if shown in hosts:
                self._unknown.discard(name)  # (read now: said if no node reads it again)
                continue
            log.info(
                "journal-remote %s: host %s is there, but no node reads it", self.directory, shown
            )
        self._unsaid.clear()

    def close(self) -> None:
        with self._lock:
            if self._files is not None:
                self._files.close()
                self._files = None


def _line(get: Callable[[str], bytes], raw: bytes, node: str, time_us: int) -> LogLine:
    """The entry's LogLine (`raw`: its MESSAGE, which may matter to the parser)."""
    try:
        pid = int(get("_PID"))
    except (KeyError, ValueError):
        pid = 0
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return LogLine(node, time_us, "", pid, text)


# the collectors of the running event loop, by directory and unit
_COLLECTORS: dict[tuple[asyncio.AbstractEventLoop, str, str], Collector] = {}


def collectors() -> list[Collector]:
    """The collectors reading now, of every event loop."""
    return list(_COLLECTORS.values())


class RemoteSource:
    """One node of a collector's directory, followed: its entries come from the directory's one
    reader (which this node's task runs while it is the first); `run` hands Batches to a queue
    until cancelled."""

    def __init__(self, node: RemoteNode, since_us: int, position: str) -> None:
        self.config = node
        self.since_us = since_us
        self.position = position

    async def run(self, out: asyncio.Queue[Batch]) -> None:
        node = self.config
        key = (asyncio.get_running_loop(), str(node.directory), node.unit)
        collector = _COLLECTORS.get(key)
        if collector is None:
            collector = _COLLECTORS[key] = Collector(node.directory, node.unit)
        me = Host(node.name, node.host, self.since_us, self.position)
        me.out = out
        collector.join(me)
        try:
            while True:
                if collector.runner is None:
                    await collector.read(me, out)
                item = await me.inbox.get()
                collector.drained.set()
                if item is not None:
                    me.relaying = True
                    try:
                        await out.put(item)
                    finally:
                        me.relaying = False
        except SourceError as e:
            raise SourceError(f"node {node.name}: {e}") from e
        finally:
            collector.leave(me)
            if not collector.hosts and _COLLECTORS.get(key) is collector:
                del _COLLECTORS[key]
                await asyncio.to_thread(collector.close)


def follow(node: RemoteNode, since_us: int, position: str) -> RemoteSource:
    """The daemon's source for a journal-remote node, from `position` (or `since_us`)."""
    return RemoteSource(node, since_us, position)


async def window(
    node: RemoteNode, since_us: int, until_us: int, progress: Progress | None = None
) -> AsyncIterator[Batch]:
    """The node's entries from `since_us` to `until_us` that may matter, for a report: its host
    matched in the journal itself, read in a worker thread. (`progress` is for streams that
    take long to come: the directory is read at once.)"""
    collector = Collector(node.directory, node.unit, only=node.host)
    me = Host(node.name, node.host, since_us, "")
    collector.join(me)
    try:
        while True:
            try:
                gathered, end = await asyncio.to_thread(collector._step)
            except SourceError as e:
                raise SourceError(f"node {node.name}: {e}") from e
            collector._pending = None
            for _, batch in gathered:
                yield batch
                if batch.newest_us is not None and batch.newest_us > until_us:
                    end = True
            if end:
                return
    finally:
        await asyncio.to_thread(collector.close)


def _time(place: Place) -> int:
    return place.time_us
