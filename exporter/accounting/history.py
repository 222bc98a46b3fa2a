"""Each node's figures at every whole BIN_US of the last hour, as the watermark passes it.

The status page's shares and marks are read from these samples: a node's busy share over a
window is the growth of its busy seconds between two samples divided by the window, exactly
as Prometheus's `rate()` reads the same counters, so the page and the alerts agree. The
accounting takes a sample each time its watermark passes a multiple of BIN_US (it sweeps up
to that time first: the figures in a sample are final up to its time). Samples older than
`span_us` behind the newest are dropped; the memory is O(nodes x span / bin).

Pure: no clock, no I/O; times are integer microseconds since the epoch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.accounting import idle
from exporter.base.times import SECOND

BIN_US = 10 * SECOND  # how often a sample is taken (of the watermark's time)
SPAN_US = 3600 * SECOND  # how far back samples are kept


@dataclass(frozen=True, slots=True)
class Sample:
    """The figures final up to `at_us` (a multiple of the bin), per node in History.nodes
    order; the counters cumulative."""

    at_us: int
    busy_us: tuple[int, ...]  # each node's busy (union) microseconds
    concurrency_us: tuple[int, ...]  # index k: microseconds with exactly k nodes busy
    # its figures known: journal followed, server not stopped and not asleep
    known: tuple[bool, ...]
    up_since_us: tuple[int | None, ...]  # since when its journal has been followed (None: not)
    idle_since_us: tuple[int | None, ...]  # since when the idle rule has held (None: not)
    total_busy_us: int  # node-microseconds busy: the sum over nodes (mean nodes busy x time)


class History:
    """The samples of the last `span_us`, oldest first (see the module docstring)."""

    def __init__(self, nodes: Sequence[str], bin_us: int = BIN_US, span_us: int = SPAN_US) -> None:
        self.nodes = tuple(nodes)
        self.bin_us = bin_us
        self.span_us = span_us
        self.samples: deque[Sample] = deque()
        self._by_time: dict[int, Sample] = {}

    def due(self, lo_us: int, hi_us: int, now_us: int) -> range:
        """The sample times a sweep from `lo_us` to `hi_us` passes: the multiples of the bin in
        (lo, hi], those within `span_us` of `hi_us` and of `now_us` only (a backlog's older
        part is swept whole)."""
        b = self.bin_us
        first = max(lo_us // b + 1, -(-(max(hi_us, now_us) - self.span_us) // b))
        return range(first * b, (hi_us // b) * b + 1, b)

    def add(
        self,
        at_us: int,
        busy_us: Sequence[int],
        concurrency_us: Sequence[int],
        up: Sequence[bool],
        known: Sequence[bool],
    ) -> Sample:
        """Take the sample at `at_us` (after the newest: an older one is ignored)."""
        last = self.samples[-1] if self.samples else None
        if last is not None and at_us <= last.at_us:
            return last
        previous = last if last is not None and last.at_us == at_us - self.bin_us else None
        up_since = _since(up, None if previous is None else previous.up_since_us, at_us)
        busy = tuple(busy_us)
        then = self._by_time.get(at_us - idle.WINDOW_US)
        holds = idle.condition(at_us, busy, None if then is None else then.busy_us, known, up_since)
        idle_since = _since(holds, None if previous is None else previous.idle_since_us, at_us)
        sample = Sample(
            at_us,
            busy,
            tuple(concurrency_us),
            tuple(known),
            up_since,
            idle_since,
            sum(busy),
        )
        self.samples.append(sample)
        self._by_time[at_us] = sample
        while self.samples and self.samples[0].at_us < at_us - self.span_us:
            del self._by_time[self.samples.popleft().at_us]
        return sample

    def at(self, t_us: int) -> Sample | None:
        """The sample taken at `t_us`, if any."""
        return self._by_time.get(t_us)

    @property
    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None


def _since(
    holds: Sequence[bool], before: Sequence[int | None] | None, at_us: int
) -> tuple[int | None, ...]:
    """Per node, since when a flag has held: its time in the sample before (`before`, None
    after a gap) if it held then too, else `at_us`; None where it does not hold."""
    return tuple(
        None if not h else (at_us if before is None or before[i] is None else before[i])
        for i, h in enumerate(holds)
    )
