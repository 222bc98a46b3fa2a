"""Past windows as the daemon would have served them, every step: OpenMetrics for backfill.

`Replay` runs the daemon's own ingest step (pipeline.apply_batch, the parser's flush, the
accounting's watermark) over a window's lines in time order, with "now" moving one `step` at a
time: at each step every node's lines up to then are in, and the snapshot is what /metrics
would have shown at that moment (the watermark-accounted counters as of that step's watermark,
the gauges as of the step). Counters start at 0 at `since`.

`write` renders each snapshot as the daemon renders it (collector.Renderer, OpenMetrics) and
writes the samples with their timestamps in the form `promtool tsdb create-blocks-from
openmetrics` takes: each series' samples together and in time order, `# EOF` at the end. The
process's own metrics and smllm_exporter_build_info are left out. With `part_seconds` it writes
one file per part (promtool's blocks are two hours: a part of that is one block), each valid on
its own, so memory holds one part's samples at a time, whatever the window.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.accounting import SECOND, Accounting, Snapshot
from exporter.collector import Renderer
from exporter.kinds import Kinds
from exporter.logline import Batch, LogLine
from exporter.parse import Parser
from exporter.pipeline import apply_batch

BLOCK_S = 2 * 3600  # promtool's block: a part of the output
LEFT_OUT = ("smllm_exporter_build_info", "smllm_checkpoint_errors")  # (the process's own)


@dataclass(frozen=True)
class Settings:
    """What the daemon's config says of accounting (the same defaults)."""

    kinds: Kinds
    max_request_us: int = 600 * SECOND
    stall_us: int = 300 * SECOND
    buckets_s: tuple[float, ...] | None = None
    slots: int = 1
    clock_allowance_us: int = 60 * SECOND
    start_timeout_us: int = 90 * SECOND
    slow_start_share: float = 0.8


class Replay:
    """Every node's lines of a window, then `snapshots` from since to until, one a step."""

    def __init__(
        self, nodes: Sequence[str], settings: Settings, since_us: int, until_us: int, step_us: int
    ) -> None:
        if step_us <= 0 or until_us < since_us:
            raise ValueError("step must be positive and until at or after since")
        self.nodes, self.settings = list(nodes), settings
        self.since_us, self.until_us, self.step_us = since_us, until_us, step_us
        self.lines: dict[str, list[LogLine]] = {n: [] for n in nodes}
        # per node, each batch: (its first line, its end, the entries it read but gave no line
        # for, its unreadable lines' errors)
        self.batches: dict[str, list[tuple[int, int, int, tuple[str, ...]]]] = {
            n: [] for n in nodes
        }

    def add(self, batch: Batch) -> None:
        """One source Batch (a node's, in order): its lines, the entries it read without a
        line for them (spread over its lines as they are applied) and its unreadable lines'
        errors (counted with its first line, as the daemon counts them with the batch)."""
        lines = self.lines[batch.node]
        start = len(lines)
        lines.extend(batch.lines)
        extra = max(0, batch.entries - (len(lines) - start))
        self.batches[batch.node].append((start, len(lines), extra, tuple(batch.errors)))

    def snapshots(self) -> Iterator[tuple[int, Snapshot]]:
        """The snapshot at since, at every step after, and at until. Between two steps the
        daemon's ticks come with the lines: each node's lines of one TICK_US are applied with
        "now" at its end, and the watermark moved then (a request longer than max_request
        is placed against the watermark as it then was, as in the daemon)."""
        s = self.settings
        extra: dict[str, Any] = {} if s.buckets_s is None else {"buckets_s": s.buckets_s}
        acc = Accounting(
            self.nodes,
            s.kinds,
            origin_us=self.since_us,
            max_request_us=s.max_request_us,
            stall_us=s.stall_us,
            clock_allowance_us=s.clock_allowance_us,
            start_timeout_us=s.start_timeout_us,
            slow_start_share=s.slow_start_share,
            **extra,
        )
        parsers = {n: Parser(n, slots=s.slots, gone_us=s.max_request_us) for n in self.nodes}
        feeds = {n: _Feed(self.lines[n], self.batches[n]) for n in self.nodes}
        t = self.since_us
        while True:
            for tick in _ticks(feeds.values(), t):
                for n in self.nodes:
                    feeds[n].apply(tick, parsers[n], acc)
                acc.advance(tick)
            yield t, acc.snapshot()
            if t >= self.until_us:
                return
            t = min(t + self.step_us, self.until_us)


TICK_US = SECOND // 2  # the daemon's tick (tick_seconds) while batches come


def _ticks(feeds: Iterable[_Feed], t_us: int) -> list[int]:
    """The ticks up to `t_us`: the end of every TICK_US in which some node has lines not yet
    applied, then `t_us` itself."""
    ticks: set[int] = set()
    for feed in feeds:
        ticks.update(feed.ticks(t_us))
    return [*sorted(tick for tick in ticks if tick < t_us), t_us]


class _Feed:
    """One node's lines handed over as the daemon's source hands them: each tick's as a Batch
    (with the entries and errors of the batches they came in), caught up."""

    def __init__(
        self, lines: list[LogLine], batches: list[tuple[int, int, int, tuple[str, ...]]]
    ) -> None:
        self.lines, self.batches = lines, batches
        self.times = [line.time_us for line in lines]
        self.done = 0  # lines applied
        self.batch = 0  # the batch the next line is in
        self.counted = 0  # of that batch's extra entries
        self.told = False  # its errors

    def ticks(self, t_us: int) -> list[int]:
        j = bisect.bisect_right(self.times, t_us, lo=self.done)
        return sorted({-(-self.times[k] // TICK_US) * TICK_US for k in range(self.done, j)})

    def apply(self, now_us: int, parser: Parser, acc: Accounting) -> None:
        i = self.done
        j = bisect.bisect_right(self.times, now_us, lo=i)
        entries, errors = j - i, list[str]()
        while self.batch < len(self.batches):
            start, end, extra, errs = self.batches[self.batch]
            if start > j or (start == j and end > j):
                break
            if not self.told:
                errors += errs
                self.told = True
            share = extra if end == start else extra * (min(j, end) - start) // (end - start)
            entries += share - self.counted
            self.counted = share
            if j < end:
                break
            self.batch, self.counted, self.told = self.batch + 1, 0, False
        batch = Batch(
            parser.node,
            tuple(self.lines[i:j]),
            entries=entries,
            newest_us=self.lines[j - 1].time_us if j > i else None,
            caught_up=True,
            errors=tuple(errors),
        )
        apply_batch(batch, parser, acc, now_us)
        self.done = j
        flushed = parser.flush(acc.read_until(parser.node, now_us))
        if flushed:
            acc.add_all(flushed)


def write(
    snapshots: Iterator[tuple[int, Snapshot]],
    out: Callable[[int], Path],
    version: str,
    part_seconds: int | None = None,
) -> list[Path]:
    """The snapshots as OpenMetrics with timestamps, into `out(part)` (one part, 0, when
    `part_seconds` is None); returns the files written."""
    renderer = Renderer(version)
    written: list[Path] = []
    part = -1
    families: dict[str, tuple[list[str], dict[str, list[str]]]] = {}
    for t, snap in snapshots:
        this = 0 if part_seconds is None else t // (part_seconds * SECOND)  # (as promtool)
        if this != part:
            if families:
                written.append(_flush(families, out(part)))
            families, part = {}, this
        _take(renderer.openmetrics_text(snap), t, families)
    if families or not written:
        written.append(_flush(families, out(max(part, 0))))
    return written


def _take(
    text: str, t_us: int, families: dict[str, tuple[list[str], dict[str, list[str]]]]
) -> None:
    """One exposition's samples, stamped `t_us`, into `families` (by family, then series, in
    the order they first came); a family's header lines are kept from its first exposition."""
    stamp = _stamp(t_us)
    family: tuple[list[str], dict[str, list[str]]] | None = None
    fresh = False  # the family's header is being read for the first time
    for line in text.splitlines():
        if line.startswith("# "):
            name = line.split(" ", 3)[2]
            if name in LEFT_OUT:
                family = None
                continue
            if family is None or name not in families or families[name] is not family:
                fresh = name not in families
                family = families.setdefault(name, ([], {}))
            if fresh:
                family[0].append(line)
            continue
        if family is None or not line:
            continue
        series, _, value = line.rpartition(" ")
        family[1].setdefault(series, []).append(f"{series} {value} {stamp}")


def _stamp(t_us: int) -> str:
    whole, frac = divmod(t_us, SECOND)
    return f"{whole}" if not frac else f"{whole}.{frac:06d}".rstrip("0")


def _flush(families: Mapping[str, tuple[list[str], dict[str, list[str]]]], path: Path) -> Path:
    """One part: every family's header once, then each series' samples, `# EOF`."""
    temp = path.with_name(f".{path.name}.tmp")
    try:
        with temp.open("w", encoding="utf-8") as f:
            for header, series in families.values():
                f.write("\n".join(header) + "\n")
                for samples in series.values():
                    f.write("\n".join(samples) + "\n")
            f.write("# EOF\n")
        temp.replace(path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path
