"""An accounting snapshot -> Prometheus metric families, rendered once per snapshot."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass

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
from prometheus_client.registry import Collector

from exporter.accounting import SECOND, KindCounters, NodeSnapshot, Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _s(us: int) -> float:
    return us / SECOND


# (name, help, value of one (node, kind) counter set)
_PER_KIND: tuple[tuple[str, str, str], ...] = (
    ("smllm_requests", "Completed requests (timing line seen).", "requests"),
    ("smllm_request_seconds", "Sum of request durations.", "request_us"),
    ("smllm_tokens", "Tokens from the total line, or prompt + generated.", "tokens"),
    ("smllm_prompt_tokens", "Prompt tokens evaluated, where the log gives them.", "prompt_tokens"),
    ("smllm_generated_tokens", "Generated tokens, where the log gives them.", "generated_tokens"),
    ("smllm_prompt_seconds", "Prompt-eval (prefill) time, where the log gives it.", "prompt_us"),
    ("smllm_generation_seconds", "Eval (decode) time, where the log gives it.", "generation_us"),
)
# (name, help, value of one node)
_PER_NODE_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("smllm_requests_cancelled", "Requests started and stopped, never timed.", "cancelled"),
    (
        "smllm_node_busy_seconds",
        "Length of the union of the node's request intervals, "
        "accounted up to the watermark; its rate is the busy share.",
        "busy_us",
    ),
    ("smllm_requests_aborted", "In-flight requests ended by a llama-server restart.", "aborted"),
    ("smllm_server_restarts", "llama-server restarts seen (a new PID).", "restarts"),
    ("smllm_source_reconnects", "Times the node's source had to start over.", "reconnects"),
    ("smllm_source_entries", "Journal entries read.", "entries"),
    (
        "smllm_parse_errors",
        "Lines that looked like timing lines but did not parse.",
        "parse_errors",
    ),
    (
        "smllm_late_intervals",
        "Intervals that arrived with their start behind the watermark.",
        "late",
    ),
    ("smllm_source_gaps", "Resumptions that could not continue from the saved position.", "gaps"),
)


class SnapshotCollector(Collector):
    """A prometheus_client custom collector over whichever snapshot is current."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.snapshot: Snapshot | None = None
        self.checkpoint_errors = 0

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        nodes = snap.nodes
        for name, doc, attr in _PER_KIND:
            scale = attr.endswith("_us")
            fam = CounterMetricFamily(name, doc, labels=["node", "kind"])
            for n in nodes:
                for kind, c in n.kinds.items():
                    v = getattr(c, attr)
                    fam.add_metric([n.name, kind], _s(v) if scale else v)
            yield fam
        yield self._histogram(snap)
        for name, doc, attr in _PER_NODE_COUNTERS:
            fam = CounterMetricFamily(name, doc, labels=["node"])
            for n in nodes:
                v = getattr(n, attr)
                fam.add_metric([n.name], _s(v) if attr.endswith("_us") else v)
            yield fam
        yield from self._gauges(snap)
        conc = CounterMetricFamily(
            "smllm_concurrency_seconds",
            "Wall seconds during which exactly nodes_busy nodes were busy, up to the watermark.",
            labels=["nodes_busy"],
        )
        for k, v in enumerate(snap.concurrency_us):
            conc.add_metric([str(k)], _s(v))
        yield conc
        mix = CounterMetricFamily(
            "smllm_mix_seconds",
            "Wall seconds by the set of kinds running, up to the watermark.",
            labels=["mix"],
        )
        for label, v in snap.mix_us.items():
            mix.add_metric([label], _s(v))
        yield mix
        yield CounterMetricFamily(
            "smllm_checkpoint_errors",
            "Checkpoint writes that failed.",
            value=self.checkpoint_errors,
        )
        info = GaugeMetricFamily(
            "smllm_exporter_build_info", "The exporter's version.", labels=["version"]
        )
        info.add_metric([self.version], 1)
        yield info

    def _histogram(self, snap: Snapshot) -> Metric:
        fam = HistogramMetricFamily(
            "smllm_request_duration_seconds", "Request durations.", labels=["node", "kind"]
        )
        bounds = [_le(b) for b in snap.buckets_us] + ["+Inf"]
        for n in snap.nodes:
            for kind, c in n.kinds.items():
                fam.add_metric([n.name, kind], _cumulative(bounds, c), _s(c.request_us))
        return fam

    def _gauges(self, snap: Snapshot) -> Iterator[Metric]:
        def per_node(
            name: str, doc: str, values: list[tuple[NodeSnapshot, float | None]]
        ) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(name, doc, labels=["node"])
            for n, v in values:
                if v is not None:
                    fam.add_metric([n.name], v)
            return fam

        nodes = snap.nodes
        yield per_node(
            "smllm_node_requests_in_flight",
            "Requests started and not yet ended.",
            [(n, n.in_flight) for n in nodes],
        )
        yield per_node(
            "smllm_node_busy",
            "1 while the node has a request in flight.",
            [(n, 1 if n.in_flight else 0) for n in nodes],
        )
        yield GaugeMetricFamily(
            "smllm_nodes_busy", "Nodes with a request in flight now.", value=snap.nodes_busy
        )
        yield GaugeMetricFamily(
            "smllm_accounted_until_timestamp_seconds",
            "The watermark: concurrency, mix and busy seconds are final up to this time.",
            value=_s(snap.watermark_us),
        )
        yield per_node(
            "smllm_node_last_request_end_timestamp_seconds",
            "End of the node's newest request.",
            [(n, None if n.last_end_us is None else _s(n.last_end_us)) for n in nodes],
        )
        yield per_node(
            "smllm_node_oldest_in_flight_start_timestamp_seconds",
            "Start of the node's oldest request in flight.",
            [
                (n, None if n.oldest_in_flight_us is None else _s(n.oldest_in_flight_us))
                for n in nodes
            ],
        )
        yield per_node(
            "smllm_source_up",
            "1 while the node's journal is being followed.",
            [(n, 1 if n.up else 0) for n in nodes],
        )
        yield per_node(
            "smllm_source_lag_seconds",
            "Exporter clock minus journal time of the newest entry read while "
            "catching up; 0 once caught up.",
            [(n, _s(n.lag_us)) for n in nodes],
        )


def _le(us: int) -> str:
    return repr(us / SECOND)


def _cumulative(bounds: list[str], c: KindCounters) -> list[tuple[str, float]]:
    total = 0
    out = []
    for le, count in zip(bounds, c.buckets, strict=True):
        total += count
        out.append((le, float(total)))
    return out


@dataclass(frozen=True)
class Exposition:
    """One rendering of /metrics, plain and gzipped, served from memory."""

    body: bytes
    gzipped: bytes


class Renderer:
    """Renders snapshots, with the process's own metrics beside them."""

    def __init__(self, version: str) -> None:
        self.collector = SnapshotCollector(version)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.registry.register(ProcessCollector(registry=None))
        self.registry.register(PlatformCollector(registry=None))

    def render(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> Exposition:
        self.collector.snapshot = snapshot
        self.collector.checkpoint_errors = checkpoint_errors
        body = generate_latest(self.registry)
        return Exposition(body, gzip.compress(body, compresslevel=5))
