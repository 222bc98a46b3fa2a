"""What the fleet benchmarks share: journals that can be ended, and per-node /metrics figures.

- `EndingJournal`: a node's journal (`_journalctl.NodeJournal`: one request a second, 10 entries
  each) that `end(now)` cuts after the requests started by then, so that what was written is a
  known number of requests a node; before that it is the endless journal.
- `totals_by`: when each request of a node's journal was complete (its `total time` entry, the
  line the exporter counts a request on), to count what was written by a given time.
- `PerNode`: the per-node sums of the few series a fleet benchmark polls, read from /metrics
  text by a line scan (no parser: at thousands of nodes a full parse costs seconds).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from _journalctl import ENTRIES_PER_REQUEST, Entry, NodeJournal

from exporter.base.times import SECOND

TOTAL_ENTRY = 5  # the `total time` line's index among a request's entries
_NODE = re.compile(r'[{,]node="([^"]*)"')


class EndingJournal(NodeJournal):
    """A node's journal that `end` cuts after the requests started by then."""

    def __init__(self, index: int, t0_us: int) -> None:
        super().__init__(index, t0_us)
        self.limit: int | None = None  # requests: none from this one on

    def end(self, now_us: int) -> int:
        """No request starts after `now_us` (those started are written whole): how many there
        are in all."""
        self.limit = max(0, (now_us - self.t0) // SECOND + 1)
        return self.limit

    def upto(self, start: int, until_us: int) -> Iterator[Entry]:
        stop = None if self.limit is None else self.limit * ENTRIES_PER_REQUEST
        for e in super().upto(start, until_us):
            if stop is not None and e.seq >= stop:
                return
            yield e


def totals_by(journal: NodeJournal, until_us: int) -> list[int]:
    """The times of the `total time` entries of the journal's requests, up to `until_us`."""
    out: list[int] = []
    r = 0
    while (t := journal.request(r)[TOTAL_ENTRY].time_us) <= until_us:
        out.append(t)
        r += 1
    return out


def written_by(totals: list[int], time_us: int) -> int:
    """How many requests were complete at `time_us` (of `totals_by`'s list)."""
    return bisect.bisect_right(totals, time_us)


@dataclass
class PerNode:
    """Per-node sums of the series asked for, from /metrics text."""

    sums: dict[str, dict[str, float]] = field(default_factory=dict)  # series -> node -> sum

    @classmethod
    def scan(cls, text: str, names: tuple[str, ...]) -> PerNode:
        """Each of `names` (a counter's or gauge's sample name) summed per `node` label."""
        prefixes = tuple(f"{n}{{" for n in names)
        sums: dict[str, dict[str, float]] = {n: {} for n in names}
        for line in text.splitlines():
            if not line.startswith(prefixes):
                continue
            name = line[: line.index("{")]
            node = _NODE.search(line)
            if node is None:
                continue
            by = sums[name]
            value = float(line.rpartition(" ")[2])
            by[node[1]] = by.get(node[1], 0.0) + value
        return cls(sums)

    def of(self, name: str) -> dict[str, float]:
        return self.sums.get(name, {})
