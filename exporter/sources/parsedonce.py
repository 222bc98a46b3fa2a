"""Files parsed once per content: the known_hosts and client keys every SSH connection shares.

A fleet's nodes share one known_hosts file (`known-hosts` prints one for them all) and often one
client key. Parsed anew for each connection, the file costs memory that grows with the square
of the fleet (each of N connections holds its own copy of N hosts' keys), and an encrypted key
half a second of bcrypt each time. `Parsed` keeps one parsed value per file content (and
passphrase): the first connection parses it and the others share the value. A file that
changes is parsed again (its content is the key); the cache holds at most CACHED values, the
least recently used going first. Safe from several threads at once (the connections load them
in worker threads).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
CACHED = 64  # distinct contents kept (a fleet has a few known_hosts files and keys)


class Parsed(Generic[T]):
    """One parsed value per content: `get(data, parse)` parses `data` once."""

    def __init__(self, size: int = CACHED) -> None:
        self.size = size
        self._values: OrderedDict[bytes, T] = OrderedDict()
        self._lock = threading.Lock()
        self.parses = 0  # how many times a content was parsed (not found cached)

    def get(self, data: bytes, parse: Callable[[], T], salt: bytes = b"") -> T:
        """The value `parse` makes of `data`, parsed once per content and `salt` (a
        passphrase: hashed with the content, never kept). What `parse` raises is raised, and
        nothing is kept."""
        key = hashlib.sha256(len(salt).to_bytes(8, "big") + salt + data).digest()
        with self._lock:  # (one parse at a time: the others wait and find it)
            found = self._values.get(key)
            if found is not None:
                self._values.move_to_end(key)
                return found
            value = parse()
            self.parses += 1
            self._values[key] = value
            if len(self._values) > self.size:
                self._values.popitem(last=False)
            return value
