"""Past windows as the daemon would have served them, every step: OpenMetrics for backfill.

`Replay` runs the daemon's own ingest step (ingest.step: apply_batch, the tick's flush, the
accounting's watermark) over a window's lines in time order, with "now" moving one `step` at a
time: at each step every node's lines up to then are in, and the snapshot is what /metrics
would have shown at that moment (the watermark-accounted counters as of that step's watermark,
the gauges as of the step). Counters start at 0 at `since`.

`write` renders each snapshot as the daemon renders it (exposition.render.Renderer,
OpenMetrics) and writes the samples with their timestamps in the form `promtool tsdb
create-blocks-from openmetrics` takes: each series' samples together and in time order, `# EOF`
at the end. The process's own metrics and smllm_exporter_build_info are left out. With
`part_seconds` it writes one file per part (promtool's blocks are two hours: a part of that is
one block), each valid on its own, so memory holds one part's samples at a time, whatever the
window. Each file is written as outfile.opened writes (a regular file replaced whole, a device
or FIFO in place).

Its `Settings` are the daemon's (exporter/ingest/settings.py). `estimate` sizes a backfill
(its steps times the series of a snapshot) before anything is read, and `too_big` refuses one
over MAX_SAMPLES or over the room left where it goes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import Snapshot
from exporter.accounting.settings import Settings
from exporter.base.outfile import opened
from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND
from exporter.exposition.render import Renderer
from exporter.ingest.step import apply_batch, flush
from exporter.parse.parser import Parser

BLOCK_S = 2 * 3600  # promtool's block: a part of the output
LEFT_OUT = ("smllm_exporter_build_info", "smllm_checkpoint_errors")  # (the process's own)


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
        acc = _accounting(self.nodes, s, self.since_us)
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


def _accounting(nodes: Sequence[str], s: Settings, origin_us: int) -> Accounting:
    return Accounting(nodes, s, origin_us=origin_us)


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
        flush(parser, acc, now_us)


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
    with opened(path) as f:
        for header, series in families.values():
            f.write("\n".join(header) + "\n")
            for samples in series.values():
                f.write("\n".join(samples) + "\n")
        f.write("# EOF\n")
    return path


# What one backfill may write: a year of three nodes at a 1 m step, or a month of fifteen at
# 15 s (about 80 series a node), some 20 GB; more is a mistake (a window of years at 1 s).
MAX_SAMPLES = 250_000_000
VALUE_BYTES = 10  # a sample's value, on average (counters grow to 10-17 characters)


@dataclass(frozen=True)
class Size:
    """What a backfill would write: its steps, the series each step has (at least: those of
    the window's start) and the bytes a sample takes on average."""

    steps: int
    series: int
    sample_bytes: int

    @property
    def samples(self) -> int:
        return self.steps * self.series

    @property
    def bytes(self) -> int:
        return self.samples * self.sample_bytes


def estimate(
    nodes: Sequence[str], settings: Settings, since_us: int, until_us: int, step_us: int
) -> Size:
    """The size of a backfill of `nodes` over the window at `step_us`, before anything is read
    or written: its steps times the series of one rendered snapshot."""
    text = Renderer("0").openmetrics_text(_accounting(nodes, settings, since_us).snapshot())
    series = [
        line.rpartition(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#") and not line.startswith(LEFT_OUT)
    ]
    steps = -(-(until_us - since_us) // step_us) + 1
    stamp = len(_stamp(until_us + SECOND // 3))  # (a fraction of a second: its longest)
    each = -(-sum(map(len, series)) // max(len(series), 1)) + VALUE_BYTES + stamp + 3
    return Size(steps, len(series), each)


def too_big(size: Size, room_bytes: int | None) -> str:
    """Why a backfill of `size` is refused (over MAX_SAMPLES, or more than the room left where
    it goes), or ""."""
    what = (
        f"{size.steps:,} steps of {size.series:,} series: {size.samples:,} samples, about "
        f"{_gb(size.bytes)}"
    )
    if size.samples > MAX_SAMPLES:
        return (
            f"the backfill would write {what}, over the bound of {MAX_SAMPLES:,} samples "
            f"(about {_gb(MAX_SAMPLES * size.sample_bytes)}): give a shorter window or a longer "
            "--step, and backfill the rest in another run"
        )
    if room_bytes is not None and size.bytes > room_bytes:
        return (
            f"the backfill would write {what}, and its file system has {_gb(room_bytes)} free: "
            "give a shorter window, a longer --step or another place"
        )
    return ""


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"
