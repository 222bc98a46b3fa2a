"""What /metrics takes from prometheus_client: the reference rendering, and the process's metrics.

`SnapshotCollector` is a prometheus_client collector of the family table (`families.FAMILIES`)
over whichever snapshot is current: what `generate_latest` writes of it is the reference that the
fast renderer (`render.py`) writes byte for byte, quicker. `ProcessReference` is
prometheus_client's rendering of the process's own `process_*` and `python_*` metrics, which
`process.py` writes without it. This is the one module that imports prometheus_client; the
daemon does not import it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import cast

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.openmetrics.exposition import (
    generate_latest as generate_openmetrics,
)
from prometheus_client.registry import Collector

from exporter.accounting.figures import Snapshot
from exporter.base.times import SECOND
from exporter.exposition.build import build_info
from exporter.exposition.families import (
    COUNTER,
    FAMILIES,
    INF,
    BuildInfo,
    DurationHistogram,
    Family,
    Series,
    le,
)


class SnapshotCollector(Collector):
    """A prometheus_client custom collector over whichever snapshot is current (`snapshot`,
    None: nothing), with the count of failed checkpoint writes beside it."""

    def __init__(self, version: str, build: dict[str, str] | None = None) -> None:
        self.version = version
        self.build = build_info(version) if build is None else build
        self.snapshot: Snapshot | None = None
        self.checkpoint_errors = 0

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        for family in FAMILIES:
            yield self._metric(family, snap)

    def _metric(self, family: Family, snap: Snapshot) -> Metric:
        name, doc, labels = family.name, family.help, list(family.labels)
        if isinstance(family, DurationHistogram):
            return _histogram(family, snap)
        if isinstance(family, BuildInfo):
            info = GaugeMetricFamily(name, doc, labels=list(self.build))
            info.add_metric(list(self.build.values()), 1)
            return info
        if not isinstance(family, Series):
            raise TypeError(f"{name}: a {type(family).__name__} is not rendered here")
        made = CounterMetricFamily if family.type == COUNTER else GaugeMetricFamily
        metric = made(name, doc, labels=labels)
        for values, v in family.samples(snap, self.checkpoint_errors):
            metric.add_metric(list(values), v)
        return metric


def _histogram(family: DurationHistogram, snap: Snapshot) -> Metric:
    metric = HistogramMetricFamily(family.name, family.help, labels=list(family.labels_of(snap)))
    bounds = [le(b) for b in family.bounds(snap)] + [INF]
    if not snap.histograms_per_node:
        for kind, counts, total_us in family.by_kind(snap):
            running = list(itertools.accumulate(counts))
            buckets = [(b, float(n)) for b, n in zip(bounds, running, strict=True)]
            metric.add_metric([kind], buckets, total_us / SECOND)
        return metric
    for n in snap.nodes:
        for kind, c in n.kinds.items():
            total, buckets = 0, []
            for bound, count in zip(bounds, family.buckets(c), strict=True):
                total += count
                buckets.append((bound, float(total)))
            metric.add_metric([n.name, kind], buckets, family.sum_us(c) / SECOND)
    return metric


class ProcessReference:
    """The process's own metrics as prometheus_client's collectors write them: the original
    that `process.ProcessMetrics` is held to."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ProcessCollector(registry=None))
        self.registry.register(PlatformCollector(registry=None))

    def text(self) -> bytes:
        """In the text format 0.0.4."""
        return generate_latest(self.registry)

    def openmetrics(self) -> bytes:
        """In OpenMetrics 1.0.0, `# EOF` last."""
        return cast(bytes, generate_openmetrics(self.registry))  # type: ignore[no-untyped-call]
