"""What each parser record does to the accounting's figures, in Python.

`interval` and `event` are the Python reference of the compiled `_accounting.add_all` (exporter/
compiled/_accounting.c takes the common intervals and STARTED events itself and leaves the rest
to these): a timed request counts in its kind's counters and histogram, an occupancy without
timing under its reason, both on the timeline from the origin and the watermark on; events
track requests in flight, restarts, slots, the server's state and its start-ups.
"""

from __future__ import annotations

import bisect
from typing import Protocol, cast

from exporter.accounting.figures import KindCounters, NodeState, model_figures
from exporter.accounting.sweep import Pending
from exporter.base.kinds import Kinds
from exporter.base.records import LOST_REASON, Draft, Event, EventKind, Interval, Record
from exporter.startup.llama import Startup

KIND_OF_MAX = 1 << 14  # token counts whose kind is remembered (then forgotten all at once)

_STARTED = EventKind.STARTED  # (member lookups are slow)
InFlightKey = tuple[int, int] | tuple[int, int, str]


class Ledger(Protocol):
    """The accounting as the records change it (`Accounting` is one)."""

    kinds: Kinds
    kind_of: dict[int | None, str]  # token count -> kind, as the rules said
    kind_bit: dict[str, int]
    nodes: dict[str, NodeState]
    node_index: dict[str, int]
    buckets_us: tuple[int, ...]
    prompt_buckets_us: tuple[int, ...]
    generation_buckets_us: tuple[int, ...]
    origin_us: int
    watermark_us: int
    pending: list[Pending]
    startups: list[Startup] | None


def interval(acc: Ledger, iv: Interval, count: bool) -> None:
    """One slot occupancy: counted (unless `count` is False: the timeline only)."""
    (
        node,
        start_us,
        end_us,
        tokens,
        p_tokens,
        g_tokens,
        p_us,
        g_us,
        slot,
        task,
        _,
        why,
        model,
    ) = iv
    ns = acc.nodes[node]
    if why:
        untimed(acc, ns, iv, count)
        return
    if model:
        _model(ns, iv, count)
    kind = acc.kind_of.get(tokens)
    if kind is None:  # a token count not seen before: the rules decide once
        if len(acc.kind_of) >= KIND_OF_MAX:  # (bounded: it only saves a lookup)
            acc.kind_of.clear()
        kind = acc.kind_of[tokens] = acc.kinds.classify(tokens)
    if slot is not None and task is not None and ns.in_flight:  # (its model's key if any)
        ns.in_flight.pop((slot, task, model) if model else (slot, task), None)
    if count:
        duration_us = end_us - start_us
        c = ns.kinds[kind]
        c.requests += 1  # (which tells a snapshot's copy of `c` is stale: see Accounting._copy)
        c.request_us += duration_us
        c.tokens += tokens or 0  # (None where the line gave none)
        c.prompt_tokens += p_tokens or 0
        c.generated_tokens += g_tokens or 0
        c.prompt_us += p_us or 0
        c.generation_us += g_us or 0
        c.buckets[bisect.bisect_left(acc.buckets_us, duration_us)] += 1
        c.histogram_us += duration_us
        if p_us is not None or g_us is not None:
            _phases(acc, c, p_us, g_us)
        if ns.last_end_us is None or end_us > ns.last_end_us:
            ns.last_end_us = end_us
    start = start_us if start_us > acc.origin_us else acc.origin_us
    watermark = acc.watermark_us
    if start < watermark:
        if count:
            ns.late += 1
        start = watermark
    if end_us > start:
        acc.pending.append((start, end_us, acc.node_index[node], acc.kind_bit[kind]))


def _phases(acc: Ledger, c: KindCounters, p_us: int | None, g_us: int | None) -> None:
    """A timed request's prompt-eval and generation times, each in its histogram."""
    if p_us is not None:
        c.prompt_buckets[bisect.bisect_left(acc.prompt_buckets_us, p_us)] += 1
        c.prompt_histogram_us += p_us
    if g_us is not None:
        c.generation_buckets[bisect.bisect_left(acc.generation_buckets_us, g_us)] += 1
        c.generation_histogram_us += g_us


def untimed(acc: Ledger, ns: NodeState, iv: Interval, count: bool) -> None:
    """An occupancy without a timing block: busy (and slot and concurrency) time of no
    kind, counted by its reason."""
    start_us, end_us = iv.start_us, iv.end_us
    if iv.slot is not None and iv.task is not None and ns.in_flight:
        key = (iv.slot, iv.task, iv.model) if iv.model else (iv.slot, iv.task)
        ns.in_flight.pop(key, None)
    start = max(start_us, acc.origin_us)
    late = start < acc.watermark_us
    if late:
        start = acc.watermark_us
    if count:
        figures = ns.untimed.get(iv.reason) or ns.untimed["untimed"]
        figures[0] += 1
        figures[1] += end_us - start_us
        if ns.last_end_us is None or end_us > ns.last_end_us:
            ns.last_end_us = end_us
        ns.late += late
    if end_us > start:
        acc.pending.append((start, end_us, acc.node_index[iv.node], 0))


def _model(ns: NodeState, iv: Interval, count: bool) -> None:
    """A timed request of a model instance (router mode): its own figures too, under its
    name for the node's first MAX_MODELS models, under OTHER_MODELS for the rest (so the
    models' figures always add up to the node's)."""
    if count:
        figures = model_figures(ns.models, iv.model)
        figures[0] += 1
        figures[1] += iv.end_us - iv.start_us
        figures[2] += iv.tokens or 0


def record(acc: Ledger, rec: Record) -> None:
    """Any record, counted: an Interval, an Event or a Draft."""
    if type(rec) is Interval:
        interval(acc, rec, True)
    elif type(rec) is Draft:
        draft(acc, rec)
    else:
        event(acc, cast(Event, rec))


def draft(acc: Ledger, d: Draft) -> None:
    """A timed request's draft tokens, under its kind (by the tokens its interval counted)."""
    kind = acc.kind_of.get(d.tokens)
    if kind is None:
        if len(acc.kind_of) >= KIND_OF_MAX:
            acc.kind_of.clear()
        kind = acc.kind_of[d.tokens] = acc.kinds.classify(d.tokens)
    c = acc.nodes[d.node].kinds[kind]
    c.draft_tokens += d.drafted
    c.draft_accepted_tokens += d.accepted


def event(acc: Ledger, ev: Event) -> None:  # noqa: C901 (one branch a kind of event)
    """Something the parser saw that is no finished request."""
    node, time_us, kind, _, slot, task, _, model, value = ev
    ns = acc.nodes[node]
    key: InFlightKey | None = None
    if slot is not None and task is not None:  # (a model instance's have its name)
        key = (slot, task, model) if model else (slot, task)
    if kind is _STARTED:
        if key is not None:
            ns.start_lines = True
            ns.in_flight[key] = time_us
    elif kind is EventKind.LOST or kind is EventKind.ABORTED:
        _ended_unseen(ns, key, kind)
    elif kind is EventKind.SLOTS:
        ns.slots = slot
    elif kind is EventKind.PHASE:
        startup(acc, ns, ev)
    elif kind is EventKind.SERVER_UP or kind is EventKind.SERVER_DOWN:
        ns.server_up = 1 if kind is EventKind.SERVER_UP else 0
        if kind is EventKind.SERVER_DOWN:
            startup(acc, ns, ev)
            _awake(ns, time_us)
    elif kind is EventKind.RESTART:  # (the old server's requests end when it has gone)
        ns.restarts += 1
        if not model:  # (a router's model instance is the router's build: it logs them)
            ns.start_lines = False
            _awake(ns, time_us)
    elif kind is EventKind.PARSE_ERROR:
        ns.parse_errors += 1
    elif model:  # (an instance's sleep, a request's speed in one: the router's node is up)
        if kind is EventKind.QUEUED or kind is EventKind.LOAD_WAIT:
            _queue(ns, ev)
        elif kind is EventKind.DECODE and key is not None and key in ns.in_flight:
            ns.decoding[key] = value or 0
    elif kind is EventKind.SLEEP:
        if ns.asleep_since_us is None:
            ns.asleep_since_us = time_us
    elif kind is EventKind.WAKE:
        _awake(ns, time_us)
    elif kind is EventKind.DECODE and key is not None and key in ns.in_flight:
        ns.decoding[key] = value or 0


def _awake(ns: NodeState, time_us: int) -> None:
    """The node's server no longer sleeps (it woke, stopped or was replaced)."""
    since = ns.asleep_since_us
    if since is not None:
        ns.asleep_us += max(0, time_us - since)
        ns.asleep_since_us = None


def _queue(ns: NodeState, ev: Event) -> None:
    """A router's queue line: a request queued for `model` (at its place), or waiting for
    its instance to load."""
    figures = model_figures(ns.queues, ev.model)
    if ev.kind is EventKind.LOAD_WAIT:
        figures[2] += 1
        return
    figures[0] += 1
    if ev.value is not None and ev.value > figures[1]:
        figures[1] = ev.value


def _ended_unseen(ns: NodeState, key: InFlightKey | None, kind: EventKind) -> None:
    """A request whose end never came: LOST (the parser saw its slot taken) or ABORTED (in
    flight when its server exited)."""
    if key is not None:
        ns.in_flight.pop(key, None)
    if kind is EventKind.LOST:
        ns.untimed[LOST_REASON][0] += 1
    else:
        ns.aborted += 1


def startup(acc: Ledger, ns: NodeState, ev: Event) -> None:
    """A start-up line's PHASE event, or the server's going down: the node's start-ups (one
    that ends goes to the accounting's `startups` list, when it keeps one)."""
    ended = ns.startups.add(ev)
    if ended is not None and acc.startups is not None:
        acc.startups.append(ended)
