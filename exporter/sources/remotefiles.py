"""A collector's journal files, each read in its own order: a host that uploads late is not skipped.

One systemd-python Reader over a whole directory merges its files by time and never goes back:
entries that reach one host's file after newer ones were read from another would be passed
over. So every file has a Reader of its own, matched on the unit, and each is read to its end
in turn, the file whose first entry is oldest first (a host that moved: its old address's file,
then its new one's). While a file is behind (a backlog), a step reads each file only up to a
slice of time past the one furthest behind, so that the nodes' times move on together. The
directory is looked at on every step: a new file (a new host, or a file the collector started
after rotating one) is opened, a file gone (vacuumed) is closed, and an archived file (its name
holds `@`) is closed once read to its end: it never changes again.

Where a file is read from is a `Plan`'s: the first entry a node has not read there, by seqnum
when the node has read from that file before (exact, whatever the times), by time otherwise. A
file is only ever sought back, never forward: what a node has not read yet is never passed.
(Hosts behind one address share a file, and a host whose upload lags puts older times after
newer ones: there a seek by time is approximate. Only a node without a place in that file, one
new to it, seeks so.)

A Reader maps the parts of its file it has read, and keeps them mapped (up to 512 MiB): the
file's pages then count in the exporter's resident memory, growing as the file does. So a file
is opened again where it stands, which lets them go: after every REMAP_ENTRIES entries read
from it (a backlog, a busy fleet), and every REMAP_S once read to its end.
Blocking throughout: used from one worker thread at a time.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from exporter.base.times import SECOND
from exporter.sources.base import SourceError
from exporter.sources.journalreader import JournalReader, match, open_matched

log = logging.getLogger(__name__)

FileKey = tuple[int, int]  # a file's device and inode: the same file, whatever its name
# A file is opened again after REMAP_ENTRIES entries read from it (at most; fewer when more
# files are open, REMAP_TOTAL shared among them), and every REMAP_S once read to its end (see
# the module docstring). Reading an entry maps about 4.5 KB of its file: at 20 files, opened
# again every 1,000 entries they kept 127 MB mapped at most, every 4,000 365 MB, never 2 GB.
REMAP_ENTRIES, REMAP_TOTAL, REMAP_MIN, REMAP_S = 4_000, 48_000, 500, 10.0
# While a file is behind, a step reads every file up to this far past the one furthest behind:
# the nodes' times move on together, and the cluster figures with them (the intervals held for
# them, until every node has passed their time, stay few).
SLICE_US, MAX_SLICE_US = 10 * SECOND, 86_400 * SECOND
_CURSOR_FIELD = re.compile(r"(?:^|;)([sit])=([0-9a-fA-F]+)")


class Place(NamedTuple):
    """An entry of one file: the file's seqnum ID, the entry's seqnum there, and its time."""

    seqnum_id: str
    seqnum: int
    time_us: int

    @classmethod
    def of(cls, cursor: str) -> Place | None:
        """The place a journal cursor (or `text`) names; None when it is not one."""
        fields = dict(_CURSOR_FIELD.findall(cursor))
        if len(fields) != 3:
            return None
        return cls(fields["s"], int(fields["i"], 16), int(fields["t"], 16))

    @property
    def text(self) -> str:
        """As a cursor names it (`seek_cursor` takes it)."""
        return f"s={self.seqnum_id};i={self.seqnum:x};t={self.time_us:x}"


def seqnum_of(cursor: str) -> tuple[str, int] | None:
    """The file's seqnum ID and the entry's seqnum, from a cursor as the Reader gives it
    (`s=ID;i=SEQNUM;b=...`: read for every entry, so by position, not by pattern); None when
    it is not one."""
    s, _, rest = cursor.partition(";")
    i, _, _ = rest.partition(";")
    if not (s.startswith("s=") and i.startswith("i=")):
        return None
    try:
        return s[2:], int(i[2:], 16)
    except ValueError:
        return None


class Plan:
    """Where the files are read from, for nodes each with its places (the last entry it read
    in each file it read from) and its start (the time it reads a file new to it from)."""

    def __init__(self, nodes: Iterable[tuple[Mapping[str, Place], int]]) -> None:
        self._first: dict[str, int] = {}  # by file: the lowest seqnum a node read up to
        self._by_start: list[tuple[int, Mapping[str, Place]]] = []
        for places, start_us in nodes:
            for sid, place in places.items():
                self._first[sid] = min(self._first.get(sid, place.seqnum), place.seqnum)
            self._by_start.append((start_us, places))
        self._by_start.sort(key=lambda n: n[0])

    def __bool__(self) -> bool:
        return bool(self._by_start)

    def target(self, seqnum_id: str) -> tuple[int | None, int | None]:
        """For the file of `seqnum_id`: the lowest seqnum a node read up to there, and the
        earliest start of a node that has not read from it (each None when there is none)."""
        start = next((t for t, places in self._by_start if seqnum_id not in places), None)
        return self._first.get(seqnum_id), start


@dataclass
class Opened:
    """One journal file being read: its Reader, name, file (seqnum ID), what it was read up to
    (a seqnum), whether it is archived, and when it was opened."""

    reader: JournalReader
    key: FileKey
    name: str
    seqnum_id: str | None
    at: int | None
    archived: bool
    since: float  # (monotonic seconds)
    read: int  # entries read since it was opened
    head_us: int  # the time of its first entry (files are read oldest first)
    # the time of the entry it stands before, as far as known (at least its head's); and
    # whether the last step read it to its end
    next_us: int = 0
    ended: bool = False


class Files:
    """The journal files of `directory`, each with a Reader matched on `unit` (and on `only`'s
    `_HOSTNAME`, for a report's one node)."""

    def __init__(self, directory: Path, unit: str, only: str | None = None) -> None:
        self.directory = directory
        self.unit = unit
        self.only = only
        self.exhausted = False  # the last `entries` read every file to its end
        self._open: dict[FileKey, Opened] = {}
        self._done: set[FileKey] = set()  # archived files read to their end
        self._turn = 0  # the file the next `entries` starts with
        self._slice_us = SLICE_US  # how far past the file furthest behind a step reads

    def __len__(self) -> int:
        return len(self._open)

    def scan(self, plan: Plan) -> None:
        """Open the files not open yet (each where `plan` says), close those gone."""
        try:
            found = list(os.scandir(self.directory))
        except OSError as e:
            raise SourceError(f"cannot read the collector's directory {self.directory}: {e}") from e
        present: set[FileKey] = set()
        added = False
        for entry in found:
            if not entry.name.endswith(".journal"):
                continue  # (`.journal~`: a file journald set aside as corrupt)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # (gone meanwhile)
            if not stat.S_ISREG(st.st_mode):
                continue
            key = (st.st_dev, st.st_ino)
            present.add(key)
            opened = self._open.get(key)
            if opened is not None and opened.name != entry.name:  # (rotated: archived now)
                opened.name, opened.archived = entry.name, "@" in entry.name
            if key not in self._open and key not in self._done:
                added = self._add(key, entry.name, plan) or added
        for key in [k for k in self._open if k not in present]:
            self._open.pop(key).reader.close()
        self._done &= present
        if added:  # (a host that moved: its old address's file before its new one's)
            self._open = dict(sorted(self._open.items(), key=lambda kv: kv[1].head_us))

    def _add(self, key: FileKey, name: str, plan: Plan) -> bool:
        """Open a file found: whether it was opened."""
        try:
            reader = open_matched(self.unit, files=(self.directory / name,), host=self.only)
        except OSError as e:  # (a file half made, or damaged: looked at again next time)
            log.warning("journal-remote %s: cannot open %s: %s", self.directory, name, e)
            return False
        reader.seek_head()
        first = _here(reader) if reader._next() else None
        head_us = first.time_us if first is not None else 1 << 62
        opened = Opened(
            reader, key, name, None, None, "@" in name, time.monotonic(), 0, head_us, head_us
        )
        self._open[key] = opened
        if first is None:  # (empty as yet: read from its head)
            reader.seek_head()
            return True
        opened.seqnum_id = first.seqnum_id
        self._place(opened, plan, new=True)
        return True

    def _place(self, opened: Opened, plan: Plan, new: bool = False) -> None:
        """Seek `opened` to where `plan` says: a file just opened anywhere, one being read back
        only (never past what it has not read)."""
        sid, reader = opened.seqnum_id, opened.reader
        if sid is None:
            return
        seqnum, start_us = plan.target(sid)
        if start_us is not None:  # (where a node new to this file reads it from)
            reader.seek_realtime(max(0, start_us))
            landing = _here(reader) if reader._next() else _after_last(reader)
            if landing is not None and (seqnum is None or landing.seqnum < seqnum):
                seqnum = landing.seqnum
        stands = None if new or opened.at is None else opened.at + 1
        if stands is not None and (seqnum is None or seqnum > stands):
            seqnum = stands
        if seqnum is None:  # (no node of `plan` reads this file: from what comes next)
            last = _after_last(reader)
            seqnum = 1 if last is None else last.seqnum
        reader.seek_cursor(f"s={sid};i={seqnum:x}")
        opened.at = seqnum - 1
        if seqnum != stands:  # (sent back: what it stands before is not known now)
            opened.next_us, opened.ended = opened.head_us, False

    def rewind(self, plan: Plan) -> None:
        """Read every file again from where `plan` says, if that is before where it stands
        (nodes that joined), and the archived files read already too."""
        for opened in self._open.values():
            self._place(opened, plan)
        self._done.clear()

    def entries(self, budget: int) -> Iterator[JournalReader]:
        """Each file's new entries, a file to its end before the next, up to `budget` in all:
        the Reader, on each entry in turn. While a file is behind (a backlog), every file is
        read only up to SLICE_US past the one furthest behind, so that the nodes' times move
        on together. `exhausted` says after whether every file was read to its end."""
        keys = list(self._open)
        self.exhausted = True
        if not keys:
            return
        behind = [o.next_us for o in self._open.values() if not o.ended]
        horizon = min(behind) + self._slice_us if behind else None
        start, given = self._turn % len(keys), budget
        for key in keys[start:] + keys[:start]:
            opened = self._open[key]
            budget -= yield from self._file(opened, budget, horizon)
            self.exhausted &= opened.ended
            if budget <= 0:
                self._turn = keys.index(key)  # (the next step goes on with this file)
            if opened.ended and opened.archived:
                opened.reader.close()
                del self._open[key]
                self._done.add(key)
            elif opened.ended and time.monotonic() - opened.since >= REMAP_S:
                self._reopen(opened)
            if budget <= 0:
                self._slice_us = SLICE_US
                return
        # a long backlog of a quiet node is read in longer slices: a step that read
        # little doubles the next one's (one that filled its budget starts again from SLICE_US)
        if horizon is not None and given - budget < given // 4:
            self._slice_us = min(self._slice_us * 2, MAX_SLICE_US)

    def _file(
        self, opened: Opened, budget: int, horizon: int | None
    ) -> Generator[JournalReader, None, int]:
        """Up to `budget` of one file's entries, to its end (`ended`) or to the first past
        `horizon`; opened again every few thousand entries. Returns how many."""
        read = 0
        opened.ended = False
        remap = max(REMAP_MIN, min(REMAP_ENTRIES, REMAP_TOTAL // len(self._open)))
        while read < budget:
            if opened.read >= remap:
                _stand(opened)
                self._reopen(opened)
            reader = opened.reader
            if not reader._next():
                opened.ended = True
                break
            if horizon is not None and (t := reader._get_realtime()) > horizon:
                opened.next_us = t
                _back(reader)
                break
            read += 1
            opened.read += 1
            yield reader
        if read:
            _stand(opened)
        return read

    def _reopen(self, opened: Opened) -> None:
        """`opened`'s file opened again where it stands (its pages unmapped)."""
        opened.since, opened.read = time.monotonic(), 0
        if opened.seqnum_id is None or opened.at is None:
            return
        cursor = f"s={opened.seqnum_id};i={opened.at + 1:x}"
        path = self.directory / opened.name
        try:
            # The collector renames a file it rotates, and its new file takes the name and
            # may go on with the same seqnums: opened by name, it must be the same inode.
            if _key_of(path) != opened.key:
                raise OSError("it was rotated")
            reader = open_matched(self.unit, files=(path,), host=self.only)
            if _key_of(path) != opened.key:
                reader.close()
                raise OSError("it was rotated")
            reader.seek_cursor(cursor)
        except OSError as e:  # (renamed or gone meanwhile: go on with the one open)
            log.debug("journal-remote %s: %s not opened again: %s", self.directory, opened.name, e)
            return
        opened.reader.close()
        opened.reader = reader

    def close(self) -> None:
        for opened in self._open.values():
            opened.reader.close()
        self._open.clear()


def hosts_seen(directory: Path, unit: str) -> list[bytes]:
    """The host names (`_HOSTNAME`) that entries of `unit` in `directory`'s journal files carry,
    sorted; OSError when the directory cannot be read."""
    if not directory.is_dir():
        raise OSError(f"{directory} is not a directory")
    reader = open_matched(unit, directory=directory)
    try:
        seen = []
        for host in sorted(reader.query_unique("_HOSTNAME")):
            match(reader, unit, host)
            reader.seek_head()
            if reader._next():
                seen.append(host)
        return seen
    finally:
        reader.close()


def _key_of(path: Path) -> FileKey:
    st = path.stat(follow_symlinks=False)
    return st.st_dev, st.st_ino


def _stand(opened: Opened) -> None:
    """Note where `opened` stands: the entry its Reader is on, the last read."""
    here = _here(opened.reader)
    if here is not None:
        opened.seqnum_id, opened.at = here.seqnum_id, here.seqnum


def _back(reader: JournalReader) -> None:
    """Step `reader` back off the entry it is on: its next is that entry again."""
    if not reader._previous():  # (it was the first: before it is the head)
        reader.seek_head()


def _here(reader: JournalReader) -> Place | None:
    """The place of the entry `reader` is on."""
    try:
        return Place.of(reader._get_cursor())
    except OSError:
        return None


def _after_last(reader: JournalReader) -> Place | None:
    """The place just past the file's last entry (its seqnum + 1): where what is appended next
    is; None for a file with no entry."""
    reader.seek_tail()
    last = _here(reader) if reader._previous() else None
    return None if last is None else Place(last.seqnum_id, last.seqnum + 1, last.time_us)
