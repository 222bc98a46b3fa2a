"""A collector's journal files, each read in its own order: a host that uploads late is not skipped.

One systemd-python Reader over a whole directory merges its files by time and never goes back:
entries that reach one host's file after newer ones were read from another would be passed
over. So every file has a Reader of its own, matched on the unit, and each is read to its end
in turn. The directory is looked at on every step: a new file (a new host, or a file the
collector started after rotating one) is opened, a file gone (vacuumed) is closed, and an
archived file (its name holds `@`) is closed once read to its end: it never changes again.
Blocking throughout: used from one worker thread at a time.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.sources.base import SourceError
from exporter.sources.journalreader import JournalReader, open_matched

log = logging.getLogger(__name__)

FileKey = tuple[int, int]  # a file's device and inode: the same file, whatever its name


@dataclass
class Opened:
    """One journal file being read: its Reader, its name when opened, archived or not."""

    reader: JournalReader
    name: str
    archived: bool


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

    def __len__(self) -> int:
        return len(self._open)

    def scan(self, since_us: int) -> None:
        """Open the files not open yet (from `since_us`), close those gone."""
        try:
            found = list(os.scandir(self.directory))
        except OSError as e:
            raise SourceError(f"cannot read the collector's directory {self.directory}: {e}") from e
        present: set[FileKey] = set()
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
            if key not in self._open and key not in self._done:
                self._add(key, entry.name, since_us)
        for key in [k for k in self._open if k not in present]:
            self._open.pop(key).reader.close()
        self._done &= present

    def _add(self, key: FileKey, name: str, since_us: int) -> None:
        path = self.directory / name
        try:
            reader = open_matched(self.unit, files=(path,), host=self.only)
        except OSError as e:  # (a file half made, or damaged: looked at again next time)
            log.warning("journal-remote %s: cannot open %s: %s", self.directory, name, e)
            return
        reader.seek_realtime(max(0, since_us))
        self._open[key] = Opened(reader, name, archived="@" in name)

    def seek(self, since_us: int) -> None:
        """Read every file again from `since_us` (archived ones read already included)."""
        for opened in self._open.values():
            opened.reader.seek_realtime(max(0, since_us))
        self._done.clear()

    def entries(self, budget: int) -> Iterator[JournalReader]:
        """Each file's new entries, a file to its end before the next, up to `budget` in all:
        the Reader, on each entry in turn. `exhausted` says after whether every file was read
        to its end."""
        keys = list(self._open)
        self.exhausted = True
        if not keys:
            return
        start = self._turn % len(keys)
        for key in keys[start:] + keys[:start]:
            opened = self._open[key]
            reader = opened.reader
            while budget > 0 and reader._next():
                budget -= 1
                yield reader
            if budget <= 0:
                self.exhausted = False
                self._turn = keys.index(key)  # (the next step goes on with this file)
                return
            if opened.archived:
                reader.close()
                del self._open[key]
                self._done.add(key)

    def close(self) -> None:
        for opened in self._open.values():
            opened.reader.close()
        self._open.clear()
