"""An accounting snapshot -> the Prometheus text exposition, rendered at most once per snapshot.

`SnapshotCollector` is the snapshot as prometheus_client metric families. Rendering those through
`generate_latest` costs about 0.6 ms a node (dicts, label validation and sorting for every
sample), so `Renderer` writes the same text itself from label strings made once per set of
nodes, kinds and buckets: byte for byte what `generate_latest` writes for the collector (a test
holds them equal), at a tenth of the cost or less. prometheus_client still renders the process's
own metrics.
"""

from __future__ import annotations

import gzip
import os
import platform
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
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

from exporter.accounting.accounting import MAX_MODELS, SECOND, KindCounters, NodeSnapshot, Snapshot
from exporter.base.records import REASONS
from exporter.compiled import switch as _compiled
from exporter.parse.parser import OTHER_MODELS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# The git commit the exporter was built from: this variable, else this file in the package
# (written at install), else "unknown".
REVISION_ENV = "SMLLM_EXPORTER_REVISION"
REVISION_FILE = Path(__file__).parent.parent / "REVISION"
GZIP_LEVEL = 1  # a scrape may wait for it: 2.5 times quicker than level 5, 15% bigger


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
    (
        "smllm_node_busy_seconds",
        "Length of the union of the node's slot occupancies (timed or not), "
        "accounted up to the watermark; its rate is the busy share.",
        "busy_us",
    ),
    (
        "smllm_slot_busy_seconds",
        "Sum over the node's slots of their occupied seconds, accounted up to the watermark; "
        "its rate over smllm_node_slots is slot utilisation.",
        "slot_busy_us",
    ),
    (
        "smllm_requests_aborted",
        "In-flight requests whose llama-server exited (or was replaced) before they ended.",
        "aborted",
    ),
    (
        "smllm_server_restarts",
        "llama-server restarts seen (a new PID, or a router's model instance started again).",
        "restarts",
    ),
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
# (name, help) of the per-node gauges
_PER_NODE_GAUGES: tuple[tuple[str, str], ...] = (
    ("smllm_node_requests_in_flight", "Requests started and not yet ended."),
    ("smllm_node_busy", "1 while the node has a request in flight."),
    ("smllm_node_last_request_end_timestamp_seconds", "End of the node's newest request."),
    (
        "smllm_node_oldest_in_flight_start_timestamp_seconds",
        "Start of the node's oldest request in flight.",
    ),
    ("smllm_source_up", "1 while the node's journal is being followed."),
    (
        "smllm_source_lag_seconds",
        "Exporter clock minus journal time of the newest entry read while "
        "catching up; 0 once caught up, and while the source is down.",
    ),
    (
        "smllm_source_clock_skew_seconds",
        "How far ahead of the exporter's clock the newest entry read was stamped, beyond a "
        "5 s allowance; 0 when in line. Such times never move the watermark past now.",
    ),
    ("smllm_node_slots", "Slots the node's llama-server has (its start-up line)."),
    (
        "smllm_server_up",
        "1 while the node's llama-server runs, 0 after a stop, exit or failure "
        "(its start-up lines and systemd's lines for the unit).",
    ),
    (
        "smllm_server_startup_seconds",
        "The llama-server's last start-up that reached `listening on`: from systemd's start of "
        "the unit (or its first line) to listening.",
    ),
    (
        "smllm_server_last_start_timestamp_seconds",
        "When the newest start-up of the llama-server began (in progress or done).",
    ),
    ("smllm_server_starting", "1 while a start-up has not reached `listening on`."),
    ("smllm_server_starting_seconds", "How long the start-up in progress has run; 0 when none."),
    (
        "smllm_server_start_timeout_seconds",
        "The unit's TimeoutStartSec, as configured (start_timeout_seconds).",
    ),
    (
        "smllm_server_slow_start_seconds",
        "The share of the start timeout past which a start-up is slow (slow_start_share).",
    ),
)
# (name, help, label names) of the labelled start-up gauges (see `_startup_samples`)
_STARTUP_FAMILIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "smllm_server_startup_phase_seconds",
        "The phases of the llama-server's last start-up (unit, initializing, load_model, "
        "init_slots, start_http: those its lines allowed).",
        ("node", "phase"),
    ),
    ("smllm_init_source_up", "1 while the init timeline's files can be read.", ("node",)),
    (
        "smllm_init_total_seconds",
        "A vllm-omni engine's last start-up, from its init timeline: t0 to t_end.",
        ("node",),
    ),
    (
        "smllm_init_start_timestamp_seconds",
        "When that start-up began (the timeline's t0).",
        ("node",),
    ),
    (
        "smllm_init_phase_seconds",
        "Its phases: the longest of each (stage, role, phase).",
        ("node", "phase", "role", "stage"),
    ),
    (
        "smllm_init_suggested_timeout_seconds",
        "The timeouts that would have covered it with 1.5 headroom (vllm-omni's rule).",
        ("node", "timeout"),
    ),
    (
        "smllm_init_skipped_records",
        "Malformed records in its files when last read.",
        ("node",),
    ),
)
_Sample = tuple[tuple[str, ...], float]
# (name, help, index in NodeSnapshot.untimed's (count, microseconds)) by node and reason
_PER_REASON: tuple[tuple[str, str, int], ...] = (
    (
        "smllm_requests_untimed",
        "Slot occupancies that ended without a timing block, by reason (cancelled, error, "
        "untimed: embeddings and rerank, lost: its end never came).",
        0,
    ),
    (
        "smllm_untimed_request_seconds",
        "Seconds of slot occupancies without a timing block, launch to release, by reason.",
        1,
    ),
)
# (name, help, index in NodeSnapshot.models' (requests, microseconds, tokens)) by node, model
_PER_MODEL: tuple[tuple[str, str, int], ...] = (
    (
        "smllm_model_requests",
        "Completed requests of a model instance (router mode); a node's models beyond its "
        f'first {MAX_MODELS} count under model="{OTHER_MODELS}".',
        0,
    ),
    ("smllm_model_request_seconds", "Sum of a model instance's request durations.", 1),
    ("smllm_model_tokens", "Tokens of a model instance's requests.", 2),
)
_GAUGE_DOC = dict(_PER_NODE_GAUGES)
_NODES_BUSY = "Nodes with a request in flight now."
_WATERMARK = "The watermark: concurrency, mix and busy seconds are final up to this time."
_CONCURRENCY = "Wall seconds during which exactly nodes_busy nodes were busy, up to the watermark."
_MIX = "Wall seconds by the set of kinds running, up to the watermark."
_CHECKPOINT_ERRORS = "Checkpoint writes that failed."
_BUILD_INFO = (
    "The exporter's version, git revision, Python version, and whether its compiled fast "
    "paths are on."
)


def _startup_gauges(snap: Snapshot) -> dict[str, list[float | None]]:
    """The per-node start-up gauges of each node, in node order."""
    nodes = snap.nodes
    return {
        "smllm_server_startup_seconds": [
            None if n.startup is None else n.startup.seconds for n in nodes
        ],
        "smllm_server_last_start_timestamp_seconds": [
            None if n.last_start_us is None else _s(n.last_start_us) for n in nodes
        ],
        "smllm_server_starting": [0 if n.starting_since_us is None else 1 for n in nodes],
        "smllm_server_starting_seconds": [_s(n.starting_us) for n in nodes],
        "smllm_server_start_timeout_seconds": [_s(snap.start_timeout_us)] * len(nodes),
        "smllm_server_slow_start_seconds": [_s(snap.slow_start_us)] * len(nodes),
    }


def _startup_samples(snap: Snapshot) -> list[list[_Sample]]:
    """The labelled start-up families' samples (label values as in _STARTUP_FAMILIES)."""
    phases: list[_Sample] = []
    for n in snap.nodes:
        if n.startup is not None:
            for phase, start, end in n.startup.phases():
                phases.append(((n.name, phase), _s(end - start)))
    up: list[_Sample] = []
    total: list[_Sample] = []
    t0: list[_Sample] = []
    init: list[_Sample] = []
    timeouts: list[_Sample] = []
    skipped: list[_Sample] = []
    for f in snap.init_timelines:
        up.append(((f.node,), 1.0 if f.up else 0.0))
        if f.total_s is not None:
            total.append(((f.node,), f.total_s))
        if f.t0 is not None:
            t0.append(((f.node,), f.t0))
        init += [((f.node, phase, role, stage), v) for stage, role, phase, v in f.phases]
        timeouts += [((f.node, k), float(v)) for k, v in f.suggested]
        skipped.append(((f.node,), float(f.skipped)))
    return [phases, up, total, t0, init, timeouts, skipped]


def _revision() -> str:
    value = os.environ.get(REVISION_ENV, "").strip()
    if not value:
        try:
            value = REVISION_FILE.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            value = ""
    value = value.splitlines()[0].strip()[:64] if value else ""
    return value or "unknown"


def build_info(version: str) -> dict[str, str]:
    """smllm_exporter_build_info's labels, by name: the exporter's version, its git revision
    (or "unknown"), the Python version, and "true" when the compiled fast paths are on."""
    compiled = _compiled.speedups is not None and _compiled.accounting is not None
    return {
        "compiled": "true" if compiled else "false",
        "python": platform.python_version(),
        "revision": _revision(),
        "version": version,
    }


class SnapshotCollector(Collector):
    """A prometheus_client custom collector over whichever snapshot is current: the reference
    that `Renderer.text` writes quicker."""

    def __init__(self, version: str, build: dict[str, str] | None = None) -> None:
        self.version = version
        self.build = build_info(version) if build is None else build
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
        for name, doc, i in _PER_REASON:
            fam = CounterMetricFamily(name, doc, labels=["node", "reason"])
            for n in nodes:
                for reason in REASONS:
                    v = n.untimed[reason][i]
                    fam.add_metric([n.name, reason], _s(v) if i else v)
            yield fam
        for name, doc, i in _PER_MODEL:
            fam = CounterMetricFamily(name, doc, labels=["model", "node"])
            for n in nodes:
                for model, values in n.models.items():
                    fam.add_metric([model, n.name], _s(values[i]) if i == 1 else values[i])
            yield fam
        yield from self._gauges(snap)
        conc = CounterMetricFamily("smllm_concurrency_seconds", _CONCURRENCY, labels=["nodes_busy"])
        for k, v in enumerate(snap.concurrency_us):
            conc.add_metric([str(k)], _s(v))
        yield conc
        mix = CounterMetricFamily("smllm_mix_seconds", _MIX, labels=["mix"])
        for label, v in snap.mix_us.items():
            mix.add_metric([label], _s(v))
        yield mix
        yield CounterMetricFamily(
            "smllm_checkpoint_errors", _CHECKPOINT_ERRORS, value=self.checkpoint_errors
        )
        info = GaugeMetricFamily("smllm_exporter_build_info", _BUILD_INFO, labels=list(self.build))
        info.add_metric(list(self.build.values()), 1)
        yield info

    def _histogram(self, snap: Snapshot) -> Metric:
        fam = HistogramMetricFamily(
            "smllm_request_duration_seconds", "Request durations.", labels=["node", "kind"]
        )
        bounds = [_le(b) for b in snap.buckets_us] + ["+Inf"]
        for n in snap.nodes:
            for kind, c in n.kinds.items():
                fam.add_metric([n.name, kind], _cumulative(bounds, c), _s(c.histogram_us))
        return fam

    def _gauges(self, snap: Snapshot) -> Iterator[Metric]:
        def per_node(
            name: str, values: list[tuple[NodeSnapshot, float | None]]
        ) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(name, _GAUGE_DOC[name], labels=["node"])
            for n, v in values:
                if v is not None:
                    fam.add_metric([n.name], v)
            return fam

        nodes = snap.nodes
        yield per_node("smllm_node_requests_in_flight", [(n, n.in_flight) for n in nodes])
        yield per_node("smllm_node_busy", [(n, 1 if n.in_flight else 0) for n in nodes])
        yield GaugeMetricFamily("smllm_nodes_busy", _NODES_BUSY, value=snap.nodes_busy)
        yield GaugeMetricFamily(
            "smllm_accounted_until_timestamp_seconds", _WATERMARK, value=_s(snap.watermark_us)
        )
        yield per_node(
            "smllm_node_last_request_end_timestamp_seconds",
            [(n, None if n.last_end_us is None else _s(n.last_end_us)) for n in nodes],
        )
        yield per_node(
            "smllm_node_oldest_in_flight_start_timestamp_seconds",
            [
                (n, None if n.oldest_in_flight_us is None else _s(n.oldest_in_flight_us))
                for n in nodes
            ],
        )
        yield per_node("smllm_source_up", [(n, 1 if n.up else 0) for n in nodes])
        yield per_node("smllm_source_lag_seconds", [(n, _s(n.lag_us)) for n in nodes])
        yield per_node("smllm_source_clock_skew_seconds", [(n, _s(n.clock_skew_us)) for n in nodes])
        yield per_node("smllm_node_slots", [(n, n.slots) for n in nodes])
        yield per_node("smllm_server_up", [(n, n.server_up) for n in nodes])
        for name, column in _startup_gauges(snap).items():
            yield per_node(name, list(zip(nodes, column, strict=True)))
        for (name, doc, labels), samples in zip(
            _STARTUP_FAMILIES, _startup_samples(snap), strict=True
        ):
            fam = GaugeMetricFamily(name, doc, labels=list(labels))
            for label_values, v in samples:
                fam.add_metric(list(label_values), v)
            yield fam


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
    """One rendering of /metrics, served from memory (the HTTP layer gzips it when asked)."""

    body: bytes


class Renderer:
    """Renders snapshots, with the process's own metrics beside them, in the text format 0.0.4
    (`render`) or OpenMetrics 1.0.0 (`render_openmetrics`); from any thread, one render at a
    time (it keeps what it rendered last, to render only what changed)."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.build = build_info(version)
        self.process = CollectorRegistry(auto_describe=False)
        self.process.register(ProcessCollector(registry=None))
        self.process.register(PlatformCollector(registry=None))
        self._layouts: dict[bool, _Layout] = {}  # by format: OpenMetrics?
        self._lock = threading.Lock()

    def render(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> Exposition:
        with self._lock:
            body = self.text(snapshot, checkpoint_errors).encode()
            return Exposition(body + generate_latest(self.process))

    def render_openmetrics(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> Exposition:
        """The OpenMetrics exposition: what prometheus_client's OpenMetrics generate_latest
        makes of a SnapshotCollector over it and the process collectors (`# EOF` last)."""
        with self._lock:
            body = self.openmetrics_text(snapshot, checkpoint_errors).encode()
            return Exposition(body + _openmetrics(self.process))

    def text(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> str:
        """The snapshot's part of the exposition: what `generate_latest` makes of a
        SnapshotCollector over it."""
        return self._layout(snapshot, openmetrics=False).render(snapshot, checkpoint_errors)

    def openmetrics_text(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> str:
        """The snapshot's part of the OpenMetrics exposition (without `# EOF`)."""
        return self._layout(snapshot, openmetrics=True).render(snapshot, checkpoint_errors)

    def _layout(self, snapshot: Snapshot, openmetrics: bool) -> _Layout:
        shape = _Layout.shape_of(snapshot)
        layout = self._layouts.get(openmetrics)
        if layout is None or layout.shape != shape:
            layout = self._layouts[openmetrics] = _Layout(shape, self.build, openmetrics)
        return layout


def _openmetrics(registry: CollectorRegistry) -> bytes:
    """prometheus_client's OpenMetrics generate_latest (untyped there)."""
    return cast(bytes, generate_openmetrics(registry))  # type: ignore[no-untyped-call]


# What a scrape asks for: (OpenMetrics?, gzipped?)
_Kind = tuple[bool, bool]


class Published:
    """A snapshot as /metrics is to show it: rendered when a scrape first asks for it (most of
    the snapshots, one a second, are never scraped), in the format it asks for, gzipped when one
    first accepts gzip, and served from memory after. A scraper that came for the snapshot
    before is likely to come again: for it this one is made ahead (`prepare_like`), and while
    that is under way scrapes are answered with the one before, already made."""

    def __init__(
        self,
        renderer: Renderer,
        snapshot: Snapshot,
        checkpoint_errors: int,
        previous: Published | None = None,
    ) -> None:
        self.renderer = renderer
        self.snapshot = snapshot
        self.checkpoint_errors = checkpoint_errors
        self.bodies: dict[_Kind, bytes] = {}  # each body once made, by (OpenMetrics?, gzipped?)
        self.scraped: _Kind | None = None  # what a scrape asked for last
        self._previous = previous if previous is not None and previous.scraped is not None else None
        if previous is not None:
            previous._previous = None  # no chain of old snapshots
        self._making = False
        self._lock = threading.Lock()

    @property
    def plain(self) -> bytes | None:
        """The text-format body, once rendered."""
        return self.bodies.get((False, False))

    @property
    def gzipped(self) -> bytes | None:
        """The text-format body gzipped, once asked for."""
        return self.bodies.get((False, True))

    def ready(self, gzipped: bool, openmetrics: bool = False) -> bytes | None:
        """For a scrape: the body if it is made already (or, while it is being made, the one
        before), else None: then call `body`."""
        kind = self.scraped = (openmetrics, gzipped)
        body = self.bodies.get(kind)
        before = self._previous
        if body is None and self._making and before is not None:
            body = before.bodies.get(kind)
        return body

    def body(self, gzipped: bool, openmetrics: bool = False) -> bytes:
        """For a scrape: the body, made on the first call that needs it (milliseconds: call it
        from a worker thread), from memory after."""
        kind = self.scraped = (openmetrics, gzipped)
        return self._make(kind)

    def prepare_like(self, previous: Published) -> None:
        """Make now what a scrape asked of `previous`, if one did."""
        if previous.scraped is not None:
            self._make(previous.scraped)

    def _make(self, kind: _Kind) -> bytes:
        openmetrics, gzipped = kind
        with self._lock:
            self._making = True
            try:
                plain = self.bodies.get((openmetrics, False))
                if plain is None:
                    render = (
                        self.renderer.render_openmetrics if openmetrics else self.renderer.render
                    )
                    plain = render(self.snapshot, self.checkpoint_errors).body
                    self.bodies[openmetrics, False] = plain
                if not gzipped:
                    return plain
                zipped = self.bodies.get(kind)
                if zipped is None:
                    zipped = gzip.compress(plain, compresslevel=GZIP_LEVEL)
                    self.bodies[kind] = zipped
                self._previous = None  # made, both ways: the one before is not needed
                return zipped
            finally:
                self._making = False


# -- the text exposition, written directly ----------------------------------------------------

# (nodes with the kinds of each, bucket bounds, concurrency rows, mix labels)
_Shape = tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[int, ...], int, tuple[str, ...]]


_SPECIAL = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}


def _go(value: float) -> str:
    """prometheus_client's `floatToGoString`, quicker on the finite values snapshots hold."""
    s = repr(float(value))
    dot = s.find(".")
    if dot < 0:  # inf, nan, or already in exponent form
        return _SPECIAL.get(s, s)
    if dot > 6 and value > 0:  # Go switches to exponents sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _labelled(name: str, labels: Sequence[str], values: Sequence[str], v: float) -> str:
    pairs = ",".join(f'{k}="{_esc(x)}"' for k, x in zip(labels, values, strict=True))
    return f"{name}{{{pairs}}} {_go(v)}\n"


def _esc(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _header(name: str, doc: str, kind: str, openmetrics: bool = False) -> str:
    """A family's HELP and TYPE lines. `name` is the family's: a counter's samples add _total,
    which the text format 0.0.4 names the family by, and OpenMetrics does not."""
    if openmetrics:
        doc = _esc(doc)
    else:
        doc = doc.replace("\\", r"\\").replace("\n", r"\n")
        if kind == "counter":
            name += "_total"
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


class _Layout:
    """Every sample's name and labels for one shape of snapshot, made once, so that a render
    only formats the values."""

    def __init__(self, shape: _Shape, build: dict[str, str], openmetrics: bool = False) -> None:
        self.shape = shape

        def header(name: str, doc: str, kind: str) -> str:
            return _header(name, doc, kind, openmetrics)

        nodes, buckets_us, rows, mixes = shape
        pairs = [(_esc(n), _esc(k)) for n, kinds in nodes for k in kinds]
        names = [_esc(n) for n, _ in nodes]
        self.per_kind = [
            (
                header(name, doc, "counter"),
                attrgetter(attr),
                attr.endswith("_us"),
                [f'{name}_total{{kind="{k}",node="{n}"}} ' for n, k in pairs],
            )
            for name, doc, attr in _PER_KIND
        ]
        h = "smllm_request_duration_seconds"
        self.histogram_header = header(h, "Request durations.", "histogram")
        bounds = [_le(b) for b in buckets_us] + ["+Inf"]
        self.histogram = [
            (
                [f'{h}_bucket{{kind="{k}",le="{le}",node="{n}"}} ' for le in bounds],
                f'{h}_count{{kind="{k}",node="{n}"}} ',
                f'{h}_sum{{kind="{k}",node="{n}"}} ',
            )
            for n, k in pairs
        ]
        # per (node, kind): the counters last rendered, their line in each per-kind family and
        # their histogram; snapshots share counters that did not change, so most are reused
        self._rendered: list[tuple[KindCounters, list[str], str] | None] = [None] * len(pairs)
        # per per-node family: the values last rendered and their lines
        self._columns: dict[str, tuple[Sequence[float | None], list[str]]] = {}
        self.per_node = [
            (
                header(name, doc, "counter"),
                attrgetter(attr),
                attr.endswith("_us"),
                [f'{name}_total{{node="{n}"}} ' for n in names],
            )
            for name, doc, attr in _PER_NODE_COUNTERS
        ]
        self.gauges = {
            name: (header(name, doc, "gauge"), [f'{name}{{node="{n}"}} ' for n in names])
            for name, doc in _PER_NODE_GAUGES
        }
        self.per_reason = [
            (
                header(name, doc, "counter"),
                i,
                [f'{name}_total{{node="{n}",reason="{r}"}} ' for n in names for r in REASONS],
            )
            for name, doc, i in _PER_REASON
        ]
        self.per_model = [
            (header(name, doc, "counter"), f"{name}_total", i) for name, doc, i in _PER_MODEL
        ]
        self.startup_families = [
            (header(name, doc, "gauge"), name, labels) for name, doc, labels in _STARTUP_FAMILIES
        ]
        self.nodes_busy = header("smllm_nodes_busy", _NODES_BUSY, "gauge") + "smllm_nodes_busy "
        w = "smllm_accounted_until_timestamp_seconds"
        self.watermark = header(w, _WATERMARK, "gauge") + f"{w} "
        c = "smllm_concurrency_seconds_total"
        self.concurrency = header(c.removesuffix("_total"), _CONCURRENCY, "counter")
        self.concurrency_rows = [f'{c}{{nodes_busy="{k}"}} ' for k in range(rows)]
        m = "smllm_mix_seconds_total"
        self.mix = header(m.removesuffix("_total"), _MIX, "counter")
        self.mix_rows = [f'{m}{{mix="{_esc(label)}"}} ' for label in mixes]
        e = "smllm_checkpoint_errors_total"
        self.checkpoint_errors = (
            header(e.removesuffix("_total"), _CHECKPOINT_ERRORS, "counter") + f"{e} "
        )
        b = "smllm_exporter_build_info"
        labels = ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(build.items()))
        self.tail = header(b, _BUILD_INFO, "gauge") + f"{b}{{{labels}}} 1.0\n"

    @staticmethod
    def shape_of(snap: Snapshot) -> _Shape:
        return (
            tuple((n.name, tuple(n.kinds)) for n in snap.nodes),
            snap.buckets_us,
            len(snap.concurrency_us),
            tuple(snap.mix_us),
        )

    def render(self, snap: Snapshot, checkpoint_errors: int) -> str:
        nodes = snap.nodes
        counters = [c for n in nodes for c in n.kinds.values()]
        out: list[str] = []
        add, extend = out.append, out.extend
        rendered = self._rendered
        for i, c in enumerate(counters):
            done = rendered[i]
            if done is None or done[0] is not c:
                rendered[i] = (c, self._per_kind_lines(i, c), self._histogram_lines(i, c))
        done_all = cast(list[tuple[KindCounters, list[str], str]], rendered)
        for f, (header, *_) in enumerate(self.per_kind):
            add(header)
            extend([lines[f] for _, lines, _ in done_all])
        add(self.histogram_header)
        extend([histogram for _, _, histogram in done_all])
        for header, get, scale, prefixes in self.per_node:
            add(header)
            values = [get(n) / SECOND for n in nodes] if scale else [get(n) for n in nodes]
            extend(self._column(header, prefixes, values))
        for header, i, prefixes in self.per_reason:
            add(header)
            extend(
                self._column(
                    header,
                    prefixes,
                    [
                        n.untimed[r][i] / SECOND if i else n.untimed[r][i]
                        for n in nodes
                        for r in REASONS
                    ],
                )
            )
        for header, name, i in self.per_model:  # (router mode: few, and rendered each time)
            add(header)
            for n in nodes:
                node = _esc(n.name)
                extend(
                    f'{name}{{model="{_esc(m)}",node="{node}"}} '
                    f"{_go(v[i] / SECOND if i == 1 else v[i])}\n"
                    for m, v in n.models.items()
                )
        self._gauge(out, "smllm_node_requests_in_flight", [n.in_flight for n in nodes])
        self._gauge(out, "smllm_node_busy", [1 if n.in_flight else 0 for n in nodes])
        add(f"{self.nodes_busy}{_go(snap.nodes_busy)}\n")
        add(f"{self.watermark}{_go(snap.watermark_us / SECOND)}\n")
        self._gauge(
            out,
            "smllm_node_last_request_end_timestamp_seconds",
            [None if n.last_end_us is None else n.last_end_us / SECOND for n in nodes],
        )
        self._gauge(
            out,
            "smllm_node_oldest_in_flight_start_timestamp_seconds",
            [
                None if n.oldest_in_flight_us is None else n.oldest_in_flight_us / SECOND
                for n in nodes
            ],
        )
        self._gauge(out, "smllm_source_up", [1 if n.up else 0 for n in nodes])
        self._gauge(out, "smllm_source_lag_seconds", [n.lag_us / SECOND for n in nodes])
        self._gauge(
            out, "smllm_source_clock_skew_seconds", [n.clock_skew_us / SECOND for n in nodes]
        )
        self._gauge(out, "smllm_node_slots", [n.slots for n in nodes])
        self._gauge(out, "smllm_server_up", [n.server_up for n in nodes])
        for name, values in _startup_gauges(snap).items():
            self._gauge(out, name, values)
        for (header, name, labels), samples in zip(
            self.startup_families, _startup_samples(snap), strict=True
        ):
            add(header)
            extend(_labelled(name, labels, values, v) for values, v in samples)
        add(self.concurrency)
        extend(
            [
                f"{p}{_go(v / SECOND)}\n"
                for p, v in zip(self.concurrency_rows, snap.concurrency_us, strict=True)
            ]
        )
        add(self.mix)
        extend(
            [
                f"{p}{_go(v / SECOND)}\n"
                for p, v in zip(self.mix_rows, snap.mix_us.values(), strict=True)
            ]
        )
        add(f"{self.checkpoint_errors}{_go(checkpoint_errors)}\n")
        add(self.tail)
        return "".join(out)

    def _per_kind_lines(self, i: int, c: KindCounters) -> list[str]:
        return [
            f"{prefixes[i]}{_go(get(c) / SECOND if scale else get(c))}\n"
            for _, get, scale, prefixes in self.per_kind
        ]

    def _histogram_lines(self, i: int, c: KindCounters) -> str:
        bucket_prefixes, count, total_us = self.histogram[i]
        out = []
        running = 0
        for p, n in zip(bucket_prefixes, c.buckets, strict=True):
            running += n
            out.append(f"{p}{_go(running)}\n")
        out.append(f"{count}{_go(running)}\n{total_us}{_go(c.histogram_us / SECOND)}\n")
        return "".join(out)

    def _gauge(self, out: list[str], name: str, values: Sequence[float | None]) -> None:
        header, prefixes = self.gauges[name]
        out.append(header)
        out.extend(self._column(header, prefixes, values))

    def _column(self, key: str, prefixes: list[str], values: Sequence[float | None]) -> list[str]:
        """One per-node family's lines ("" where the value is None); a node whose value did
        not change since the last render keeps its line."""
        old_values, old_lines = self._columns.get(key, ((), []))
        if len(old_values) != len(values):
            old_values, old_lines = [None] * len(values), [""] * len(values)
        lines = [
            old if v == was else "" if v is None else f"{p}{_go(v)}\n"
            for p, v, was, old in zip(prefixes, values, old_values, old_lines, strict=True)
        ]
        self._columns[key] = (values, lines)
        return lines
