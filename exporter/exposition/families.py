"""The metric families /metrics shows, in order: name, type, help, labels, and how to read them.

`FAMILIES` is the one table. The fast renderer (`render.py`) and the prometheus_client reference
(`reference.py`) both walk it, and a test holds the metrics page's table (docs/metrics.md) to
it. Each family says how its series are read from a snapshot, in one of five ways:

- `PerKind`: one series a node and kind, a value of that pair's `KindCounters`;
- `Column`: series fixed by the snapshot's shape (`shape`), values read anew (None leaves a
  series out);
- `Found`: series found anew in each snapshot (router models, start-up phases, init timelines);
- `DurationHistogram`: a histogram of each node and kind (request, prompt-eval and generation
  durations), its buckets and sum read from that pair's `KindCounters`;
- `BuildInfo`: the exporter's build, one series of value 1.

The first three are `Series`: their `samples` are what both renderers write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter

from exporter.accounting.figures import MAX_MODELS, KindCounters, NodeSnapshot, Snapshot
from exporter.base.records import REASONS
from exporter.base.times import SECOND
from exporter.exposition.build import BUILD_LABELS
from exporter.parse.router import OTHER_MODELS

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

LabelValues = tuple[str, ...]
Sample = tuple[LabelValues, float]  # (label values, in the family's label order; value)
# (nodes with the kinds of each, bucket bounds, concurrency rows, mix labels): what a Column's
# series depend on
Shape = tuple[
    tuple[tuple[str, tuple[str, ...]], ...],
    tuple[tuple[int, ...], ...],
    bool,
    int,
    tuple[str, ...],
]


def shape(snap: Snapshot) -> Shape:
    """What a snapshot's series are set by: two snapshots of one shape have the same series in
    every family but the `Found` ones."""
    return (
        tuple((n.name, tuple(n.kinds)) for n in snap.nodes),
        (snap.buckets_us, snap.prompt_buckets_us, snap.generation_buckets_us),
        snap.histograms_per_node,
        len(snap.concurrency_us),
        tuple(snap.mix_us),
    )


@dataclass(frozen=True)
class Family:
    """One metric family: its name (a counter's samples add `_total`), type, help and label
    names (node first)."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...]

    @property
    def sample_name(self) -> str:
        """The name its samples carry (and the text format 0.0.4 names a counter by)."""
        return f"{self.name}_total" if self.type == COUNTER else self.name


@dataclass(frozen=True)
class Series(Family):
    """A family of plain samples: (label values, value) each."""

    def samples(self, snap: Snapshot, checkpoint_errors: int) -> Iterator[Sample]:
        """Its samples of `snap`, beside which `checkpoint_errors` checkpoint writes failed."""
        raise NotImplementedError


@dataclass(frozen=True)
class PerKind(Series):
    """A counter of each node and kind: `value` of its KindCounters."""

    value: Callable[[KindCounters], float]

    def samples(self, snap: Snapshot, checkpoint_errors: int) -> Iterator[Sample]:
        value = self.value
        for n in snap.nodes:
            for kind, c in n.kinds.items():
                yield (n.name, kind), value(c)


@dataclass(frozen=True)
class Column(Series):
    """Series that the snapshot's shape sets (`series`), with `values` read anew from the
    snapshot and the count of failed checkpoint writes; a value None leaves its series out."""

    series: Callable[[Snapshot], list[LabelValues]]
    values: Callable[[Snapshot, int], Sequence[float | None]]

    def samples(self, snap: Snapshot, checkpoint_errors: int) -> Iterator[Sample]:
        values = self.values(snap, checkpoint_errors)
        for labels, v in zip(self.series(snap), values, strict=True):
            if v is not None:
                yield labels, v


@dataclass(frozen=True)
class Found(Series):
    """Series found anew in each snapshot: `read` finds them."""

    read: Callable[[Snapshot], list[Sample]]

    def samples(self, snap: Snapshot, checkpoint_errors: int) -> Iterator[Sample]:
        return iter(self.read(snap))


@dataclass(frozen=True)
class DurationHistogram(Family):
    """Durations of each node and kind in the snapshot's `bounds` (`le`): each pair's
    KindCounters holds the count in each bucket (`buckets`) and their sum (`sum_us`). Of each
    kind only, the nodes' added up, when the snapshot says so (`histograms_per_node`)."""

    bounds: Callable[[Snapshot], tuple[int, ...]]
    buckets: Callable[[KindCounters], list[int]]
    sum_us: Callable[[KindCounters], int]

    def labels_of(self, snap: Snapshot) -> tuple[str, ...]:
        """Its labels in `snap` (without `le`): node and kind, or kind alone."""
        return self.labels if snap.histograms_per_node else self.labels[1:]

    def by_kind(self, snap: Snapshot) -> list[tuple[str, list[int], int]]:
        """Each kind's buckets and sum, the nodes' added up."""
        out = []
        for kind in snap.kind_names:
            counts = [0] * (len(self.bounds(snap)) + 1)
            total = 0
            for n in snap.nodes:
                c = n.kinds[kind]
                for i, v in enumerate(self.buckets(c)):
                    counts[i] += v
                total += self.sum_us(c)
            out.append((kind, counts, total))
        return out


@dataclass(frozen=True)
class BuildInfo(Family):
    """The exporter's build: one series labelled by `build.build_info`, of value 1."""


INF = "+Inf"  # the last bucket's `le`


def le(bound_us: int) -> str:
    """A histogram bucket's `le` label value."""
    return repr(bound_us / SECOND)


# -- how series and values are read ------------------------------------------------------------


def _or_none(us: int | None) -> float | None:
    return None if us is None else us / SECOND


def _per_kind(name: str, help: str, attr: str) -> PerKind:
    get = attrgetter(attr)
    if attr.endswith("_us"):
        return PerKind(name, COUNTER, help, ("node", "kind"), lambda c: get(c) / SECOND)
    return PerKind(name, COUNTER, help, ("node", "kind"), get)


def _nodes(snap: Snapshot) -> list[LabelValues]:
    return [(n.name,) for n in snap.nodes]


def _per_node(
    name: str, type: str, help: str, value: Callable[[NodeSnapshot], float | None]
) -> Column:
    return Column(name, type, help, ("node",), _nodes, lambda s, _: [value(n) for n in s.nodes])


def _node_counter(name: str, help: str, attr: str) -> Column:
    get = attrgetter(attr)
    if attr.endswith("_us"):
        return _per_node(name, COUNTER, help, lambda n: get(n) / SECOND)
    return _per_node(name, COUNTER, help, get)


def _node_gauge(name: str, help: str, value: Callable[[NodeSnapshot], float | None]) -> Column:
    return _per_node(name, GAUGE, help, value)


# the fields of NodeSnapshot.untimed's (count, microseconds) and of NodeSnapshot.models'
# (requests, microseconds, tokens)
UNTIMED_COUNT, UNTIMED_US = 0, 1
MODEL_REQUESTS, MODEL_US, MODEL_TOKENS = 0, 1, 2


def _per_reason(name: str, help: str, field: int) -> Column:
    """A counter of each node and reason: a field of NodeSnapshot.untimed."""

    def values(s: Snapshot, _: int) -> list[float]:
        if field == UNTIMED_US:
            return [n.untimed[r][field] / SECOND for n in s.nodes for r in REASONS]
        return [n.untimed[r][field] for n in s.nodes for r in REASONS]

    return Column(
        name,
        COUNTER,
        help,
        ("node", "reason"),
        lambda s: [(n.name, r) for n in s.nodes for r in REASONS],
        values,
    )


def _per_model(name: str, help: str, field: int) -> Found:
    """A counter of each node and model instance seen: a field of NodeSnapshot.models."""

    def samples(s: Snapshot) -> list[Sample]:
        models = [(n.name, m, v[field]) for n in s.nodes for m, v in n.models.items()]
        if field == MODEL_US:
            return [((node, m), v / SECOND) for node, m, v in models]
        return [((node, m), v) for node, m, v in models]

    return Found(name, COUNTER, help, ("node", "model"), samples)


QUEUE_REQUESTS, QUEUE_DEEPEST, QUEUE_WAITS = 0, 1, 2  # (NodeSnapshot.queues' fields)


def _per_queue(name: str, type: str, help: str, field: int) -> Found:
    """A figure of each node and model its router queued requests for: NodeSnapshot.queues'."""

    def samples(s: Snapshot) -> list[Sample]:
        return [((n.name, m), v[field]) for n in s.nodes for m, v in n.queues.items()]

    return Found(name, type, help, ("node", "model"), samples)


def _startups(s: Snapshot) -> list[Sample]:
    """Each node's last start-up of each kind that finished: its seconds."""
    return [
        ((n.name, start.kind), start.seconds)
        for n in s.nodes
        for start in (n.startup, n.wakeup)
        if start is not None
    ]


def _whole(name: str, type: str, help: str, value: Callable[[Snapshot, int], float]) -> Column:
    """One series without labels."""
    return Column(name, type, help, (), lambda _: [()], lambda s, e: [value(s, e)])


def _phases(s: Snapshot) -> list[Sample]:
    return [
        ((n.name, start.kind, phase), (end - begin) / SECOND)
        for n in s.nodes
        for start in (n.startup, n.wakeup)
        if start is not None
        for phase, begin, end in start.phases()
    ]


def _found_gauge(
    name: str, help: str, labels: tuple[str, ...], samples: Callable[[Snapshot], list[Sample]]
) -> Found:
    return Found(name, GAUGE, help, labels, samples)


# -- the table ---------------------------------------------------------------------------------

FAMILIES: tuple[Family, ...] = (
    _per_kind("smllm_requests", "Completed requests (timing line seen).", "requests"),
    _per_kind("smllm_request_seconds", "Sum of request durations.", "request_us"),
    _per_kind("smllm_tokens", "Tokens from the total line, or prompt + generated.", "tokens"),
    _per_kind(
        "smllm_prompt_tokens", "Prompt tokens evaluated, where the log gives them.", "prompt_tokens"
    ),
    _per_kind(
        "smllm_generated_tokens", "Generated tokens, where the log gives them.", "generated_tokens"
    ),
    _per_kind(
        "smllm_prompt_seconds", "Prompt-eval (prefill) time, where the log gives it.", "prompt_us"
    ),
    _per_kind(
        "smllm_generation_seconds", "Eval (decode) time, where the log gives it.", "generation_us"
    ),
    DurationHistogram(
        "smllm_request_duration_seconds",
        HISTOGRAM,
        "Request durations.",
        ("node", "kind"),
        attrgetter("buckets_us"),
        attrgetter("buckets"),
        attrgetter("histogram_us"),
    ),
    DurationHistogram(
        "smllm_prompt_duration_seconds",
        HISTOGRAM,
        "Each timed request's prompt-eval (prefill) time, where its timing block gives it.",
        ("node", "kind"),
        attrgetter("prompt_buckets_us"),
        attrgetter("prompt_buckets"),
        attrgetter("prompt_histogram_us"),
    ),
    DurationHistogram(
        "smllm_generation_duration_seconds",
        HISTOGRAM,
        "Each timed request's eval (decode) time, where its timing block gives it.",
        ("node", "kind"),
        attrgetter("generation_buckets_us"),
        attrgetter("generation_buckets"),
        attrgetter("generation_histogram_us"),
    ),
    _per_kind(
        "smllm_draft_tokens",
        "Speculative decoding: tokens the draft model proposed (the draft acceptance line).",
        "draft_tokens",
    ),
    _per_kind(
        "smllm_draft_accepted_tokens",
        "Speculative decoding: proposed tokens the target model accepted; over "
        "smllm_draft_tokens, the acceptance rate.",
        "draft_accepted_tokens",
    ),
    _node_counter(
        "smllm_node_busy_seconds",
        "Length of the union of the node's slot occupancies (timed or not), "
        "accounted up to the watermark; its rate is the busy share.",
        "busy_us",
    ),
    _node_counter(
        "smllm_slot_busy_seconds",
        "Sum over the node's slots of their occupied seconds, accounted up to the watermark; "
        "its rate over smllm_node_slots is slot utilisation.",
        "slot_busy_us",
    ),
    _node_counter(
        "smllm_requests_aborted",
        "In-flight requests whose llama-server exited (or was replaced) before they ended.",
        "aborted",
    ),
    _node_counter(
        "smllm_server_restarts",
        "llama-server restarts seen (a new PID, or a router's model instance started again).",
        "restarts",
    ),
    _node_counter(
        "smllm_source_reconnects", "Times the node's source had to start over.", "reconnects"
    ),
    _node_counter("smllm_source_entries", "Journal entries read.", "entries"),
    _node_counter(
        "smllm_parse_errors",
        "Lines that looked like timing lines but did not parse.",
        "parse_errors",
    ),
    _node_counter(
        "smllm_late_intervals",
        "Intervals that arrived with their start behind the watermark.",
        "late",
    ),
    _node_counter(
        "smllm_source_gaps", "Resumptions that could not continue from the saved position.", "gaps"
    ),
    _per_reason(
        "smllm_requests_untimed",
        "Slot occupancies that ended without a timing block, by reason (cancelled, error, "
        "untimed: embeddings and rerank, lost: its end never came).",
        UNTIMED_COUNT,
    ),
    _per_reason(
        "smllm_untimed_request_seconds",
        "Seconds of slot occupancies without a timing block, launch to release, by reason.",
        UNTIMED_US,
    ),
    _per_model(
        "smllm_model_requests",
        "Completed requests of a model instance (router mode); a node's models beyond its "
        f'first {MAX_MODELS} count under model="{OTHER_MODELS}".',
        MODEL_REQUESTS,
    ),
    _per_model(
        "smllm_model_request_seconds", "Sum of a model instance's request durations.", MODEL_US
    ),
    _per_model("smllm_model_tokens", "Tokens of a model instance's requests.", MODEL_TOKENS),
    _per_queue(
        "smllm_model_queued_requests",
        COUNTER,
        "Requests the router queued for an instance of a model (none was running).",
        QUEUE_REQUESTS,
    ),
    _per_queue(
        "smllm_model_queue_position_max",
        GAUGE,
        "The deepest place in the router's queue a request for the model took.",
        QUEUE_DEEPEST,
    ),
    _per_queue(
        "smllm_model_load_waits",
        COUNTER,
        "Requests that waited for the router's instance of the model to load.",
        QUEUE_WAITS,
    ),
    _node_gauge(
        "smllm_node_requests_in_flight",
        "Requests started and not yet ended.",
        attrgetter("in_flight"),
    ),
    _node_gauge(
        "smllm_node_busy",
        "1 while the node has a request in flight.",
        lambda n: 1 if n.in_flight else 0,
    ),
    _node_gauge(
        "smllm_decode_tokens_per_second",
        "The decode speed of the node's requests in flight, summed: each its last 3 s, as its "
        "n_gen line said (a long generation logs one every 3 s); 0 when none.",
        lambda n: sum(n.decode_speeds),
    ),
    _whole(
        "smllm_nodes_busy", GAUGE, "Nodes with a request in flight now.", lambda s, _: s.nodes_busy
    ),
    _whole(
        "smllm_accounted_until_timestamp_seconds",
        GAUGE,
        "The watermark: concurrency, mix and busy seconds are final up to this time.",
        lambda s, _: s.watermark_us / SECOND,
    ),
    _node_gauge(
        "smllm_node_last_request_end_timestamp_seconds",
        "End of the node's newest request.",
        lambda n: _or_none(n.last_end_us),
    ),
    _node_gauge(
        "smllm_node_oldest_in_flight_start_timestamp_seconds",
        "Start of the node's oldest request in flight.",
        lambda n: _or_none(n.oldest_in_flight_us),
    ),
    _node_gauge(
        "smllm_source_up",
        "1 while the node's journal is being followed.",
        lambda n: 1 if n.up else 0,
    ),
    _node_gauge(
        "smllm_source_lag_seconds",
        "Exporter clock minus journal time of the newest entry read while "
        "catching up; 0 once caught up, and while the source is down.",
        lambda n: n.lag_us / SECOND,
    ),
    _node_gauge(
        "smllm_source_clock_skew_seconds",
        "How far ahead of the exporter's clock the newest entry read was stamped, beyond a "
        "5 s allowance; 0 when in line. Such times never move the watermark past now.",
        lambda n: n.clock_skew_us / SECOND,
    ),
    _node_gauge(
        "smllm_node_slots",
        "Slots the node's llama-server has (its start-up line).",
        attrgetter("slots"),
    ),
    _node_gauge(
        "smllm_server_up",
        "1 while the node's llama-server runs, 0 after a stop, exit or failure "
        "(its start-up lines and systemd's lines for the unit).",
        attrgetter("server_up"),
    ),
    _found_gauge(
        "smllm_server_startup_seconds",
        "The llama-server's last start-up of each kind that finished: a start (kind=start) from "
        "systemd's start of the unit (or its first line) to `listening on`; a wake-up from "
        "sleep (kind=wake) to its reload's `n_slots`, the wait of the request that woke it.",
        ("node", "kind"),
        _startups,
    ),
    _node_gauge(
        "smllm_server_last_start_timestamp_seconds",
        "When the newest start-up of the llama-server began (in progress or done).",
        lambda n: _or_none(n.last_start_us),
    ),
    _node_gauge(
        "smllm_server_starting",
        "1 while a start-up has not reached `listening on`.",
        lambda n: 0 if n.starting_since_us is None else 1,
    ),
    _node_gauge(
        "smllm_server_starting_seconds",
        "How long the start-up in progress has run; 0 when none.",
        lambda n: n.starting_us / SECOND,
    ),
    Column(
        "smllm_server_start_timeout_seconds",
        GAUGE,
        "The unit's TimeoutStartSec, as configured (start_timeout_seconds).",
        ("node",),
        _nodes,
        lambda s, _: [s.start_timeout_us / SECOND] * len(s.nodes),
    ),
    Column(
        "smllm_server_slow_start_seconds",
        GAUGE,
        "The share of the start timeout past which a start-up is slow (slow_start_share).",
        ("node",),
        _nodes,
        lambda s, _: [s.slow_start_us / SECOND] * len(s.nodes),
    ),
    _found_gauge(
        "smllm_server_startup_phase_seconds",
        "The phases of the llama-server's last start-up of each kind (a start's unit, "
        "initializing, load_model, init_slots, start_http; a wake-up's wake, load_model: those "
        "its lines allowed).",
        ("node", "kind", "phase"),
        _phases,
    ),
    _node_gauge(
        "smllm_server_sleeping",
        "1 while the node's llama-server sleeps (--sleep-idle-seconds: its model unloaded).",
        lambda n: 1 if n.asleep else 0,
    ),
    _node_counter(
        "smllm_server_asleep_seconds",
        "Time the node's llama-server slept, the sleep in progress included.",
        "asleep_us",
    ),
    _found_gauge(
        "smllm_init_source_up",
        "1 while the init timeline's files can be read.",
        ("node",),
        lambda s: [((f.node,), 1.0 if f.up else 0.0) for f in s.init_timelines],
    ),
    _found_gauge(
        "smllm_init_total_seconds",
        "A vllm-omni engine's last start-up, from its init timeline: t0 to t_end.",
        ("node",),
        lambda s: [((f.node,), f.total_s) for f in s.init_timelines if f.total_s is not None],
    ),
    _found_gauge(
        "smllm_init_start_timestamp_seconds",
        "When that start-up began (the timeline's t0).",
        ("node",),
        lambda s: [((f.node,), f.t0) for f in s.init_timelines if f.t0 is not None],
    ),
    _found_gauge(
        "smllm_init_phase_seconds",
        "Its phases: the longest of each (stage, role, phase).",
        ("node", "phase", "role", "stage"),
        lambda s: [
            ((f.node, phase, role, stage), v)
            for f in s.init_timelines
            for stage, role, phase, v in f.phases
        ],
    ),
    _found_gauge(
        "smllm_init_suggested_timeout_seconds",
        "The timeouts that would have covered it with 1.5 headroom (vllm-omni's rule).",
        ("node", "timeout"),
        lambda s: [((f.node, k), float(v)) for f in s.init_timelines for k, v in f.suggested],
    ),
    _found_gauge(
        "smllm_init_skipped_records",
        "Malformed records in its files when last read.",
        ("node",),
        lambda s: [((f.node,), float(f.skipped)) for f in s.init_timelines],
    ),
    Column(
        "smllm_concurrency_seconds",
        COUNTER,
        "Wall seconds during which exactly nodes_busy nodes were busy, up to the watermark.",
        ("nodes_busy",),
        lambda s: [(str(k),) for k in range(len(s.concurrency_us))],
        lambda s, _: [v / SECOND for v in s.concurrency_us],
    ),
    Column(
        "smllm_mix_seconds",
        COUNTER,
        "Wall seconds by the set of kinds running, up to the watermark.",
        ("mix",),
        lambda s: [(label,) for label in s.mix_us],
        lambda s, _: [v / SECOND for v in s.mix_us.values()],
    ),
    _whole(
        "smllm_checkpoint_errors",
        COUNTER,
        "Checkpoint writes that failed.",
        lambda _, errors: errors,
    ),
    BuildInfo(
        "smllm_exporter_build_info",
        GAUGE,
        "The exporter's version, git revision, Python version, and whether its compiled fast "
        "paths are on.",
        BUILD_LABELS,
    ),
)
