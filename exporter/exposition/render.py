"""A snapshot -> the text of /metrics (text format 0.0.4 or OpenMetrics), written directly.

prometheus_client would render the family table (`families.FAMILIES`) through `generate_latest`
at about 0.6 ms a node (dicts, label validation and sorting for every sample). `Renderer` writes
the same text itself from label strings made once per shape of snapshot (`families.shape`), and
keeps each series' line until its value changes: byte for byte what `generate_latest` writes of
`reference.SnapshotCollector` (a test holds them equal), at a tenth of the cost or less.
The process's own metrics follow (`process.ProcessMetrics`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter

from exporter.accounting.figures import KindCounters, Snapshot
from exporter.base.times import SECOND
from exporter.exposition.build import build_info
from exporter.exposition.families import (
    FAMILIES,
    INF,
    BuildInfo,
    Column,
    DurationHistogram,
    Family,
    Found,
    LabelValues,
    PerKind,
    Shape,
    le,
    shape,
)
from exporter.exposition.numbers import go_float
from exporter.exposition.process import ProcessMetrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

_BOUND = "\x00"  # where a bucket's bound goes in its prefix


def escape(value: str) -> str:
    """A label value (or OpenMetrics help text) escaped."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def header(family: Family, openmetrics: bool) -> str:
    """A family's HELP and TYPE lines. The text format 0.0.4 names a counter by its samples'
    name (`_total`), OpenMetrics by the family's."""
    if openmetrics:
        return f"# HELP {family.name} {escape(family.help)}\n# TYPE {family.name} {family.type}\n"
    name = family.sample_name
    doc = family.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {family.type}\n"


class Labelled:
    """A family's sample prefixes (a sample's line up to its value): its labels in name order,
    as prometheus_client writes them, put in a template once."""

    def __init__(self, name: str, labels: Sequence[str]) -> None:
        order = sorted(range(len(labels)), key=labels.__getitem__)
        pairs = ",".join(f'{labels[i]}="%s"' for i in order)
        self.template = f"{name}{{{pairs}}} " if labels else f"{name} "
        self.pick: Callable[[Sequence[str]], object] = itemgetter(*order) if order else lambda _: ()

    def __call__(self, escaped: Sequence[str]) -> str:
        """The prefix of the series of these label values, escaped (`escape`)."""
        return self.template % self.pick(escaped)


class _Part:
    """One family's text in a layout."""

    def __init__(self, head: str) -> None:
        self.head = head

    def write(self, out: list[str], snap: Snapshot, checkpoint_errors: int, rows: _Rows) -> None:
        raise NotImplementedError


# per (node, kind): its counters as last rendered, their line in each PerKind family, and their
# lines in each histogram
_Row = tuple[KindCounters, list[str], list[str]]
_Rows = list[_Row]


class _PerKindPart(_Part):
    def __init__(self, head: str, index: int) -> None:
        super().__init__(head)
        self.index = index  # among the PerKind families

    def write(self, out: list[str], snap: Snapshot, checkpoint_errors: int, rows: _Rows) -> None:
        i = self.index
        out.append(self.head)
        out.extend([lines[i] for _, lines, _ in rows])


class _HistogramPart(_Part):
    def __init__(self, head: str, index: int) -> None:
        super().__init__(head)
        self.index = index  # among the histograms

    def write(self, out: list[str], snap: Snapshot, checkpoint_errors: int, rows: _Rows) -> None:
        i = self.index
        out.append(self.head)
        out.extend([histograms[i] for _, _, histograms in rows])


class _KindHistogramPart(_Part):
    """A histogram of each kind only (`histograms_per_node` off): the nodes' added up."""

    def __init__(
        self, head: str, family: DurationHistogram, prefixes: list[tuple[list[str], str, str]]
    ) -> None:
        super().__init__(head)
        self.family = family
        self.prefixes = prefixes  # per kind, as snap.kind_names: buckets', count's, sum's

    def write(self, out: list[str], snap: Snapshot, checkpoint_errors: int, rows: _Rows) -> None:
        out.append(self.head)
        for (bucket_prefixes, count, total_us), (_, counts, total) in zip(
            self.prefixes, self.family.by_kind(snap), strict=True
        ):
            out.append(histogram_lines(bucket_prefixes, count, total_us, counts, total))


class _ColumnPart(_Part):
    """A Column family's lines; a series whose value did not change keeps its line."""

    def __init__(self, head: str, family: Column, prefixes: list[str]) -> None:
        super().__init__(head)
        self.values = family.values
        self.prefixes = prefixes
        self.last: tuple[Sequence[float | None], list[str]] = (
            [None] * len(prefixes),
            [""] * len(prefixes),
        )

    def write(self, out: list[str], snap: Snapshot, checkpoint_errors: int, rows: _Rows) -> None:
        values = self.values(snap, checkpoint_errors)
        old_values, old_lines = self.last
        lines = [
            old if v == was else "" if v is None else f"{p}{go_float(v)}\n"
            for p, v, was, old in zip(self.prefixes, values, old_values, old_lines, strict=True)
        ]
        self.last = (values, lines)
        out.append(self.head)
        out.extend(lines)


class _FoundPart(_Part):
    """A Found family's lines, written anew each time (few: router models, start-ups)."""

    def __init__(self, head: str, family: Found) -> None:
        super().__init__(head)
        self.family = family
        self.labelled = Labelled(family.sample_name, family.labels)

    def write(self, out: list[str], snap: Snapshot, checkpoint_errors: int, rows: _Rows) -> None:
        labelled = self.labelled
        out.append(self.head)
        out.extend(
            f"{labelled(tuple(map(escape, values)))}{go_float(v)}\n"
            for values, v in self.family.read(snap)
        )


class _FixedPart(_Part):
    def write(self, out: list[str], snap: Snapshot, checkpoint_errors: int, rows: _Rows) -> None:
        out.append(self.head)


class _Layout:
    """Every sample's name and labels for one shape of snapshot, made once, so that a render
    only formats the values (and only those that changed)."""

    def __init__(self, snap: Snapshot, build: dict[str, str], openmetrics: bool = False) -> None:
        self.shape: Shape = shape(snap)
        # each Column's series' label values, escaped, by the function that lists them
        # (families of one node each share theirs)
        self.series: dict[Callable[[Snapshot], list[LabelValues]], list[LabelValues]] = {}
        self.escaped = {n.name: escape(n.name) for n in snap.nodes}  # label values, escaped
        self.escaped.update((k, escape(k)) for n in snap.nodes for k in n.kinds)
        pairs = [(self.escaped[n.name], self.escaped[k]) for n in snap.nodes for k in n.kinds]
        self.kinds = [f for f in FAMILIES if isinstance(f, PerKind)]
        self.per_kind = [(f.value, self._prefixes(f, pairs)) for f in self.kinds]
        self.histograms = [f for f in FAMILIES if isinstance(f, DurationHistogram)]
        self.per_node = snap.histograms_per_node
        series = pairs if self.per_node else [(escape(k),) for k in snap.kind_names]
        self.histogram = [self._histogram(f, snap, series) for f in self.histograms]
        # per (node, kind): the counters last rendered; snapshots share counters that did not
        # change, so most rows are reused
        self._rows: list[_Row | None] = [None] * len(pairs)
        self.parts = [self._part(f, snap, build, openmetrics) for f in FAMILIES]

    def _prefixes(self, family: Family, escaped: Sequence[LabelValues]) -> list[str]:
        labelled = Labelled(family.sample_name, family.labels)
        template, pick = labelled.template, labelled.pick
        return [template % pick(values) for values in escaped]

    def _escaped(self, family: Column, snap: Snapshot) -> list[LabelValues]:
        """A Column's series' label values, escaped."""
        series = self.series.get(family.series)
        if series is None:
            escaped = self.escaped
            series = [
                tuple([escaped.get(v) or escaped.setdefault(v, escape(v)) for v in values])
                for values in family.series(snap)
            ]
            self.series[family.series] = series
        return series

    def _part(
        self, family: Family, snap: Snapshot, build: dict[str, str], openmetrics: bool
    ) -> _Part:
        head = header(family, openmetrics)
        if isinstance(family, PerKind):
            return _PerKindPart(head, self.kinds.index(family))
        if isinstance(family, DurationHistogram):
            h = self.histograms.index(family)
            if not self.per_node:
                return _KindHistogramPart(head, family, self.histogram[h])
            return _HistogramPart(head, h)
        if isinstance(family, Column):
            return _ColumnPart(head, family, self._prefixes(family, self._escaped(family, snap)))
        if isinstance(family, Found):
            return _FoundPart(head, family)
        if isinstance(family, BuildInfo):
            labelled = Labelled(family.name, list(build))
            return _FixedPart(f"{head}{labelled(list(map(escape, build.values())))}1.0\n")
        raise TypeError(f"{family.name}: a {type(family).__name__} is not rendered here")

    @staticmethod
    def _histogram(
        f: DurationHistogram, snap: Snapshot, pairs: Sequence[LabelValues]
    ) -> list[tuple[list[str], str, str]]:
        """Per series (node and kind, or kind), escaped: its bucket lines' prefixes, its
        count's and its sum's."""
        bounds = [le(b) for b in f.bounds(snap)] + [INF]
        labels = f.labels_of(snap)
        bucket = Labelled(f"{f.name}_bucket", (*labels, "le"))
        count = Labelled(f"{f.name}_count", labels)
        total = Labelled(f"{f.name}_sum", labels)
        out = []
        for pair in pairs:
            # (one prefix a pair, split where its bound goes: an escaped value holds no `="`)
            before, after = bucket((*pair, _BOUND)).split(f'="{_BOUND}"')
            buckets = [f'{before}="{bound}"{after}' for bound in bounds]
            out.append((buckets, count(pair), total(pair)))
        return out

    def render(self, snap: Snapshot, checkpoint_errors: int) -> str:
        rows = self._rows
        i = 0
        for n in snap.nodes:
            for c in n.kinds.values():
                row = rows[i]
                if row is None or row[0] is not c:
                    histograms = (
                        [self._histogram_lines(h, i, c) for h in range(len(self.histogram))]
                        if self.per_node
                        else []
                    )
                    rows[i] = (c, self._per_kind_lines(i, c), histograms)
                i += 1
        done = [row for row in rows if row is not None]
        out: list[str] = []
        for part in self.parts:
            part.write(out, snap, checkpoint_errors, done)
        return "".join(out)

    def _per_kind_lines(self, i: int, c: KindCounters) -> list[str]:
        return [f"{prefixes[i]}{go_float(value(c))}\n" for value, prefixes in self.per_kind]

    def _histogram_lines(self, h: int, i: int, c: KindCounters) -> str:
        family = self.histograms[h]
        bucket_prefixes, count, total_us = self.histogram[h][i]
        return histogram_lines(
            bucket_prefixes, count, total_us, family.buckets(c), family.sum_us(c)
        )


def histogram_lines(
    bucket_prefixes: Sequence[str], count: str, total_us: str, counts: Sequence[int], sum_us: int
) -> str:
    """A histogram series' lines: its buckets (cumulative), its count and its sum."""
    out = []
    running = 0
    for p, n in zip(bucket_prefixes, counts, strict=True):
        running += n
        out.append(f"{p}{go_float(running)}\n")
    out.append(f"{count}{go_float(running)}\n{total_us}{go_float(sum_us / SECOND)}\n")
    return "".join(out)


@dataclass(frozen=True)
class Exposition:
    """One rendering of /metrics, served from memory (the HTTP layer gzips it when asked)."""

    body: bytes


class Renderer:
    """Renders snapshots, with the process's own metrics after them, in the text format 0.0.4
    (`render`) or OpenMetrics 1.0.0 (`render_openmetrics`); from any thread, one render at a
    time (it keeps what it rendered last, to render only what changed)."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.build = build_info(version)
        self.process = ProcessMetrics()
        self._layouts: dict[bool, _Layout] = {}  # by format: OpenMetrics?
        self._lock = threading.Lock()

    def render(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> Exposition:
        with self._lock:
            body = self.text(snapshot, checkpoint_errors).encode()
            return Exposition(body + self.process.text())

    def render_openmetrics(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> Exposition:
        """The OpenMetrics exposition: what prometheus_client's OpenMetrics generate_latest
        makes of a SnapshotCollector over it and the process collectors (`# EOF` last)."""
        with self._lock:
            body = self.openmetrics_text(snapshot, checkpoint_errors).encode()
            return Exposition(body + self.process.openmetrics())

    def text(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> str:
        """The snapshot's part of the exposition: what `generate_latest` makes of a
        SnapshotCollector over it."""
        return self._layout(snapshot, openmetrics=False).render(snapshot, checkpoint_errors)

    def openmetrics_text(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> str:
        """The snapshot's part of the OpenMetrics exposition (without `# EOF`)."""
        return self._layout(snapshot, openmetrics=True).render(snapshot, checkpoint_errors)

    def _layout(self, snapshot: Snapshot, openmetrics: bool) -> _Layout:
        layout = self._layouts.get(openmetrics)
        if layout is None or layout.shape != shape(snapshot):
            layout = self._layouts[openmetrics] = _Layout(snapshot, self.build, openmetrics)
        return layout
