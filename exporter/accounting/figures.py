"""The figures the accounting keeps: per-kind counters, each node's state, and their snapshots.

`KindCounters` and `NodeState` are what `Accounting` changes as records arrive (the compiled
`_accounting.add_all` reads and adds to them by attribute name: contract.py). `NodeSnapshot`
and `Snapshot` are the frozen copies scrapes, pages and reports read (docs/design.md,
"Snapshot").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.base.records import REASONS
from exporter.parse.router import OTHER_MODELS
from exporter.startup.llama import START, Startup, Tracker
from exporter.startup.phases import Figures

MAX_MODELS = 64  # model instances counted per node under their own name (a router serves a few)


@dataclass(slots=True)
class KindCounters:
    requests: int = 0
    request_us: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prompt_us: int = 0
    generation_us: int = 0
    buckets: list[int] = field(default_factory=list)  # per bucket, not cumulative; last is +Inf
    histogram_us: int = 0  # the durations the buckets hold (request_us since they last changed)
    # the prompt-eval and eval (generation) times of the timed requests whose block gave them,
    # in their own buckets, with the sums those hold
    prompt_buckets: list[int] = field(default_factory=list)
    prompt_histogram_us: int = 0
    generation_buckets: list[int] = field(default_factory=list)
    generation_histogram_us: int = 0
    # speculative decoding: the tokens the draft model proposed, and those the target accepted
    draft_tokens: int = 0
    draft_accepted_tokens: int = 0

    def copy(self) -> KindCounters:
        c = KindCounters(
            self.requests,
            self.request_us,
            self.tokens,
            self.prompt_tokens,
            self.generated_tokens,
            self.prompt_us,
            self.generation_us,
        )
        c.buckets = list(self.buckets)
        c.histogram_us = self.histogram_us
        c.prompt_buckets = list(self.prompt_buckets)
        c.prompt_histogram_us = self.prompt_histogram_us
        c.generation_buckets = list(self.generation_buckets)
        c.generation_histogram_us = self.generation_histogram_us
        c.draft_tokens, c.draft_accepted_tokens = self.draft_tokens, self.draft_accepted_tokens
        return c


@dataclass(slots=True)
class NodeState:
    """Everything known of one node."""

    newest_us: int  # journal time of the newest entry read (in line with the clocks)
    up: bool = False
    caught_up: bool = False
    down_since_us: int | None = None
    behind_since_us: int | None = None  # since when it has not been caught up (down or not)
    behind_newest_us: int = 0  # its newest entry's time when that was last looked at
    start_lines: bool = False  # this llama-server logs launch lines
    # (slot, task) -> start; (slot, task, model) for a model instance's in router mode
    in_flight: dict[tuple[int, int] | tuple[int, int, str], int] = field(default_factory=dict)
    busy_us: int = 0
    slot_busy_us: int = 0
    last_end_us: int | None = None
    end_in_line_us: int | None = None  # last_end_us as the last batch in line left it
    entries: int = 0
    # occupancies without a timing block by reason: [count, microseconds]
    untimed: dict[str, list[int]] = field(
        default_factory=lambda: {reason: [0, 0] for reason in REASONS}
    )
    slots: int | None = None  # what the server said it has
    server_up: int | None = None  # its llama-server runs (1) or not (0); None: not known
    models: dict[str, list[int]] = field(default_factory=dict)  # [requests, us, tokens]
    aborted: int = 0
    restarts: int = 0
    parse_errors: int = 0
    late: int = 0
    reconnects: int = 0
    gaps: int = 0
    lag_us: int = 0
    clock_skew_us: int = 0  # how far ahead of now its newest entry was, beyond the allowance
    kinds: dict[str, KindCounters] = field(default_factory=dict)
    startups: Tracker = field(default_factory=lambda: Tracker(""))  # its server's start-ups
    asleep_since_us: int | None = None  # its llama-server sleeps since (None: it does not)
    asleep_us: int = 0  # the time it slept, its sleeps that ended
    # router mode: by model, [requests queued for an instance, the deepest place in the queue
    # one took, requests that waited for an instance to load]
    queues: dict[str, list[int]] = field(default_factory=dict)
    # requests in flight (in_flight's keys) -> their decode speed, hundredths of a token per
    # second, as their last n_gen line said
    decoding: dict[tuple[int, int] | tuple[int, int, str], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    name: str
    kinds: dict[str, KindCounters]
    busy_us: int
    slot_busy_us: int
    in_flight: int
    oldest_in_flight_us: int | None
    last_end_us: int | None
    up: bool
    lag_us: int
    clock_skew_us: int
    entries: int
    untimed: dict[str, tuple[int, int]]  # reason -> (count, microseconds)
    slots: int | None
    server_up: int | None
    models: dict[str, tuple[int, int, int]]  # model -> (requests, microseconds, tokens)
    aborted: int
    restarts: int
    parse_errors: int
    late: int
    reconnects: int
    gaps: int
    startup: Startup | None = None  # its llama-server's last start-up that reached listening
    wakeup: Startup | None = None  # its last wake-up from sleep that was done
    starting_since_us: int | None = None  # when the start-up in progress began (None: none)
    starting_us: int = 0  # how long it has run, as of the latest `advance`
    last_start_us: int | None = None  # when the newest start-up began
    start_lines: bool = False  # its llama-server logs launch lines (requests in flight known)
    asleep: bool = False  # its llama-server sleeps (`--sleep-idle-seconds`)
    asleep_us: int = 0  # how long it has slept, in all, as of the latest `advance`
    queues: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # NodeState.queues
    # the decode speed of each request in flight that logged one (tokens per second)
    decode_speeds: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent copy of every figure, for scrapes and reports."""

    nodes: tuple[NodeSnapshot, ...]
    kind_names: tuple[str, ...]
    buckets_us: tuple[int, ...]
    prompt_buckets_us: tuple[int, ...]
    generation_buckets_us: tuple[int, ...]
    histograms_per_node: bool  # the histograms' series: each node and kind, else each kind
    concurrency_us: tuple[int, ...]  # index k: exactly k nodes busy
    mix_us: dict[str, int]
    watermark_us: int
    start_timeout_us: int  # the unit's TimeoutStartSec, as configured
    slow_start_us: int  # the share of it past which a start-up is slow
    init_timelines: tuple[Figures, ...] = ()  # the init-timeline nodes', as last read

    @property
    def nodes_busy(self) -> int:
        return sum(1 for n in self.nodes if n.in_flight)


def node_snapshot(
    name: str, ns: NodeState, kinds: dict[str, KindCounters], now_us: int
) -> NodeSnapshot:
    """The snapshot of node `name` (its per-kind counters copied already: `kinds`), as of the
    accounting's latest now."""
    return NodeSnapshot(
        name=name,
        kinds=kinds,
        busy_us=ns.busy_us,
        slot_busy_us=ns.slot_busy_us,
        in_flight=len(ns.in_flight),
        oldest_in_flight_us=min(ns.in_flight.values()) if ns.in_flight else None,
        last_end_us=ns.last_end_us,
        up=ns.up,
        lag_us=ns.lag_us,
        clock_skew_us=ns.clock_skew_us,
        entries=ns.entries,
        untimed={r: (n, us) for r, (n, us) in ns.untimed.items()},
        slots=ns.slots,
        server_up=ns.server_up,
        models={m: (n, us, t) for m, (n, us, t) in ns.models.items()},
        aborted=ns.aborted,
        restarts=ns.restarts,
        parse_errors=ns.parse_errors,
        late=ns.late,
        reconnects=ns.reconnects,
        gaps=ns.gaps,
        start_lines=ns.start_lines,
        asleep=ns.asleep_since_us is not None,
        asleep_us=asleep_us(ns, now_us),
        queues={m: (q, deepest, waits) for m, (q, deepest, waits) in ns.queues.items()},
        decode_speeds=_decode_speeds(ns),
        **_startup_figures(ns, now_us),
    )


def asleep_us(ns: NodeState, now_us: int) -> int:
    """How long the node's server has slept in all: its sleep in progress up to `now_us` (a
    sleeping server logs nothing), or while its source catches up, as far as its journal was
    read."""
    since = ns.asleep_since_us
    if since is None:
        return ns.asleep_us
    return ns.asleep_us + max(0, (now_us if ns.caught_up else ns.newest_us) - since)


def _decode_speeds(ns: NodeState) -> tuple[float, ...]:
    """The decode speeds of the requests still in flight (the others' are dropped here)."""
    decoding = ns.decoding
    if not decoding:
        return ()
    if any(key not in ns.in_flight for key in decoding):
        ns.decoding = decoding = {k: v for k, v in decoding.items() if k in ns.in_flight}
    return tuple(v / 100 for v in decoding.values())


def _startup_figures(ns: NodeState, now_us: int) -> dict[str, Any]:
    """A node's start-up figures. A wake-up from sleep in progress is not starting (the unit's
    TimeoutStartSec bounds no wake-up). A start-up in progress whose server has served a request
    since it began is no longer starting (a build that logs no `listening on`)."""
    tracker = ns.startups
    last = tracker.last
    current = tracker.current
    if current is not None and current.kind != START:  # (a wake-up: no unit start to bound)
        current = None
    since = None if current is None else current.start_us
    if since is not None and (
        (ns.last_end_us is not None and ns.last_end_us >= since)
        or any(t >= since for t in ns.in_flight.values())
    ):
        since = None
    newest = current if current is not None else last
    return {
        "startup": last,
        "wakeup": tracker.last_wake,
        "starting_since_us": since,
        # (while its source catches up, as far as its journal was read)
        "starting_us": 0
        if since is None
        else max(0, (now_us if ns.caught_up else ns.newest_us) - since),
        "last_start_us": None if newest is None else newest.start_us,
    }


def model_figures(models: dict[str, list[int]], model: str) -> list[int]:
    """The [requests, us, tokens] a request of `model` counts in (or a queue's figures of a
    model, by the same rule): its own while the node has fewer than MAX_MODELS models of their
    own, else OTHER_MODELS'."""
    figures = models.get(model)
    if figures is None:
        own = len(models) - (OTHER_MODELS in models)
        name = model if own < MAX_MODELS else OTHER_MODELS
        figures = models.get(name)
        if figures is None:
            figures = models[name] = [0, 0, 0]
    return figures
