"""The compiled accounting (`exporter.compiled._accounting`) leaves an Accounting exactly as its Python
references leave it, or hands the work back to them.

`Accounting.add_all` (compiled: the intervals and STARTED events) must leave the state that
`Accounting.add_all_reference` leaves, and `Accounting.advance_to` (the compiled sweep) the
state that `Accounting.advance_to_reference` leaves: equal snapshots, equal checkpoint states
(in_flight in its order, the pending intervals in theirs) and the same exceptions, whatever
the records hold. Hypothesis runs random operations on both over several nodes and kinds:
batches of intervals and events (late ones, restarts, occupancies without timing of every
reason, lost requests, slot counts and server states, requests of model instances, parse errors,
unknown nodes, values that do not fit in 64 bits or sums that would overflow, values of other
types), their prompt-eval and generation times given or not, at and around the bounds of their
histograms, watermarks moving in between, and checkpoint round trips, also of crafted states.
"""

from __future__ import annotations

import copy
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter.accounting import intake
from exporter.accounting.accounting import Accounting
from exporter.accounting.contract import RECORD_TYPES
from exporter.accounting.figures import KindCounters, NodeState
from exporter.accounting.lanes import Recent
from exporter.accounting.settings import DEFAULT_BUCKETS_S, DEFAULT_PHASE_BUCKETS_S
from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds
from exporter.base.records import Event, EventKind, Interval, Record
from exporter.base.times import SECOND
from exporter.checkpoint.codec import restore, state_of
from exporter.compiled import switch
from exporter.compiled.switch import Layouts, LayoutWarning, layouts_of_accounting, load
from exporter.report.window import window_run_reference

from support.settings import default_settings
from support.tools import examples, require_compiled

require_compiled(switch.accounting, "_accounting")

from exporter.compiled import _accounting  # noqa: E402 (the module the switch loaded; _accounting.pyi

NODES = ("node0", "node1", "node2")
ORIGIN = 1_790_000_000 * SECOND
BIG = (2**62, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**70, -(2**70))


class Reference(Accounting):
    """An Accounting that runs only the Python references (what `advance` calls too)."""

    def add_all(self, recs: Iterable[Record]) -> None:
        self.add_all_reference(recs)

    def advance_to(self, until_us: int) -> None:
        self.advance_to_reference(until_us)


# -- the configurations -----------------------------------------------------------------------

RULES = (
    DEFAULT_RULES,  # two kinds, the catch-all takes None
    (KindRule("big", min_tokens=600), KindRule("small", max_tokens=599)),  # + unknown
    tuple(KindRule(f"k{i}", min_tokens=100 * i, max_tokens=100 * i + 99) for i in range(5)),
    (KindRule("all"),),
    (KindRule("a", max_tokens=10), KindRule("a", min_tokens=500), KindRule("b")),  # a twice
)
BUCKETS = (
    DEFAULT_BUCKETS_S,
    (1.0, 2.0),
    (),
    (5.0, 1.0, 3.0),  # unsorted: bisect's answer all the same
    (1.0, 1e30),  # a bound that does not fit in 64 bits: every interval is Python's
)
# the prompt-eval and generation histograms' (each its own)
PHASE_BUCKETS = (DEFAULT_PHASE_BUCKETS_S, (0.001, 0.5, 0.5, 2.0), *BUCKETS[2:])  # (a bound twice)
buckets = st.sampled_from(BUCKETS[:4]) | st.sampled_from(BUCKETS)
phase_buckets = st.sampled_from(PHASE_BUCKETS[:4]) | st.sampled_from(PHASE_BUCKETS)


@dataclass(frozen=True)
class Config:
    rules: tuple[KindRule, ...]
    buckets_s: tuple[float, ...]
    origin_us: int
    max_request_us: int
    prompt_buckets_s: tuple[float, ...] = DEFAULT_PHASE_BUCKETS_S
    generation_buckets_s: tuple[float, ...] = DEFAULT_PHASE_BUCKETS_S

    def build(self, cls: type[Accounting]) -> Accounting:
        kinds = Kinds(self.rules)
        over = {
            "max_request_us": self.max_request_us,
            "buckets_s": self.buckets_s,
            "prompt_buckets_s": self.prompt_buckets_s,
            "generation_buckets_s": self.generation_buckets_s,
        }
        return cls(NODES, default_settings(kinds, **over), origin_us=self.origin_us)


configs = st.builds(
    Config,
    rules=st.sampled_from(RULES),
    buckets_s=buckets,
    origin_us=st.just(ORIGIN) | st.sampled_from((0, -ORIGIN, 2**63, -(2**64))),
    max_request_us=st.sampled_from((30 * SECOND, 600 * SECOND)),
    prompt_buckets_s=phase_buckets,
    generation_buckets_s=phase_buckets,
)

# -- the records --------------------------------------------------------------------------------

offsets = st.integers(-20, 200).map(lambda c: ORIGIN + c * SECOND) | st.integers(
    -3 * SECOND, 3 * SECOND
).map(lambda us: ORIGIN + 100 * SECOND + us)
times = offsets | st.sampled_from(BIG)
# (a few token counts over and over: the compiled path takes a count it has seen before)
TOKENS = (0, 10, 99, 100, 250, 599, 600, 700, 1100)
counts = st.sampled_from(TOKENS) | st.none() | st.integers(0, 1200) | st.sampled_from((*BIG, -5))
token_counts = st.sampled_from(TOKENS) | st.integers(0, 1200)
small = st.none() | st.integers(0, 3)
# a prompt-eval or generation time: None (not logged), at or next to a bound of any histogram
# here, anywhere up to past the last bound, or one that does not fit
BOUNDS_US = sorted({round(b * SECOND) for bs in (*BUCKETS, *PHASE_BUCKETS) for b in bs if b < 1e6})
phase_times = (
    st.none()
    | st.builds(lambda b, d: b + d, st.sampled_from(BOUNDS_US), st.sampled_from((-1, 0, 1)))
    | st.integers(0, 700 * SECOND)
    | st.sampled_from((0, -5, *BIG))
)
tasks = st.none() | st.integers(0, 6) | st.sampled_from((1000, 2**64))
nodes = st.sampled_from(NODES) | st.just("elsewhere")  # (not configured: KeyError)
# mostly timed requests; now and then one released without timing, of each reason
reasons = st.sampled_from(("",) * 6 + ("cancelled", "error", "untimed"))
models = st.sampled_from(("",) * 8 + ("qwen", ":8081"))  # (a router's model instances)
odd = st.sampled_from((True, 1.5, "7"))  # not ints: what the Python code makes of them


@st.composite
def intervals(draw: st.DrawFn) -> Interval:
    start = draw(times)
    end = draw(
        st.integers(0, 40).map(lambda s: start + s * SECOND)
        | st.integers(-2 * SECOND, 0).map(lambda d: start + d)
        | times
    )
    # tokens, prompt_tokens, generated_tokens, prompt_us, generation_us, slot, task
    f: list[Any] = [draw(counts) for _ in range(3)] + [draw(phase_times) for _ in range(2)]
    f += [draw(small), draw(tasks)]
    if draw(st.integers(0, 30)) == 0:  # now and then a value of another type
        f[draw(st.integers(0, len(f) - 1))] = draw(odd)
    node = draw(nodes)
    reason, model = draw(reasons), draw(models)
    if reason:  # an occupancy without timing: no tokens, no durations
        return Interval(node, start, end, None, None, None, None, None, f[5], f[6], 1, reason)
    return Interval(node, start, end, f[0], f[1], f[2], f[3], f[4], f[5], f[6], 1, "", model)


@st.composite
def events(draw: st.DrawFn) -> Event:
    kind = draw(
        st.sampled_from(
            (EventKind.STARTED,) * 6
            + (EventKind.LOST, EventKind.ABORTED, EventKind.RESTART, EventKind.PARSE_ERROR)
            + (EventKind.SLOTS, EventKind.SERVER_UP, EventKind.SERVER_DOWN)
        )
    )
    slot: Any = draw(small)
    task: Any = draw(tasks)
    if draw(st.integers(0, 30)) == 0:
        slot = draw(odd)
    model = draw(models) if kind is EventKind.STARTED else ""
    return Event(draw(nodes), draw(times), kind, 1, slot, task, "", model)


@st.composite
def requests(draw: st.DrawFn) -> list[Record]:
    """A launch and its interval on one slot, as llama-server logs them (most of a batch)."""
    node = draw(st.sampled_from(NODES))
    slot, task = draw(st.integers(0, 3)), draw(st.integers(0, 50))
    start = draw(offsets)
    end = start + draw(st.integers(1, 40)) * SECOND
    tokens = draw(token_counts)
    reason = draw(reasons)
    if reason:  # released without timing: from its launch to its release
        iv = Interval(node, start, end, slot=slot, task=task, pid=1, reason=reason)
    else:
        p_us, g_us, half = draw(phase_times), draw(phase_times), tokens // 2
        iv = Interval(node, start, end, tokens, half, tokens - half, p_us, g_us, slot, task)
    return [Event(node, start, EventKind.STARTED, 1, slot, task), iv]


@st.composite
def parallel_requests(draw: st.DrawFn) -> list[Record]:
    """Requests of the same slot and task numbers on several nodes at once, interleaved (each
    node's launch before its interval)."""
    slot, task = draw(st.integers(0, 1)), draw(st.integers(0, 2))
    which = draw(st.lists(st.sampled_from(NODES), min_size=2, max_size=3, unique=True))
    todo: dict[str, list[Record]] = {}
    for node in which:
        start = draw(offsets)
        end = start + draw(st.integers(1, 40)) * SECOND
        todo[node] = [
            Event(node, start, EventKind.STARTED, 1, slot, task),
            Interval(node, start, end, draw(token_counts), 1, 2, 3, 4, slot, task),
        ]
    out: list[Record] = []
    while todo:
        node = draw(st.sampled_from(sorted(todo)))
        out.append(todo[node].pop(0))
        if not todo[node]:
            del todo[node]
    return out


@st.composite
def batches(draw: st.DrawFn) -> list[Record]:
    parts = draw(
        st.lists(
            requests()
            | parallel_requests()
            | intervals().map(lambda r: [r])
            | events().map(lambda r: [r]),
            max_size=12,
        )
    )
    recs = [r for part in parts for r in part]
    # the launches before the intervals that end them, and the rest in any order
    return draw(st.permutations(recs)) if draw(st.booleans()) else recs


# -- the operations ------------------------------------------------------------------------------

Op = tuple[Any, ...]
ops = st.one_of(
    st.tuples(st.just("add_all"), batches()),
    st.tuples(st.just("add_all_tuple"), batches()),
    st.tuples(st.just("add"), intervals(), st.booleans()),  # count=False: the timeline only
    st.tuples(st.just("advance_to"), times),
    st.tuples(st.just("advance"), st.sampled_from(NODES), offsets),  # read up to, then advance
    st.tuples(st.just("checkpoint"), st.none()),  # state_of, then restore into a fresh one
)


def outcome(f: Callable[[], object]) -> tuple[str, object]:
    try:
        return ("ok", f())
    except Exception as e:
        return ("raised", type(e))


def apply(acc: Accounting, op: Op) -> Accounting:
    """Run `op` on `acc`; returns the Accounting to go on with (a checkpoint makes a new one)."""
    what = op[0]
    if what == "add_all":
        acc.add_all(list(op[1]))
    elif what == "add_all_tuple":
        acc.add_all(tuple(op[1]))
    elif what == "add":
        acc.add(op[1], count=op[2])
    elif what == "advance_to":
        acc.advance_to(op[1])
    elif what == "advance":
        acc.line_read(op[1], op[2])
        acc.advance(op[2])
    elif what == "checkpoint":
        fresh = Accounting if type(acc) is Accounting else Reference
        new = fresh(acc.node_names, acc.settings, origin_us=acc.origin_us)
        restore(new, state_of(acc))
        return new
    return acc


def observed(acc: Accounting) -> tuple[object, ...]:
    """Everything the two must agree on (and the exceptions computing it raises, if any)."""
    return (
        outcome(acc.snapshot),
        outcome(lambda: state_of(acc)),
        outcome(lambda: [acc.node_bound(n, ORIGIN) for n in NODES]),
        acc.watermark_us,
    )


def check(config: Config, steps: Sequence[Op]) -> None:
    fast, ref = config.build(Accounting), config.build(Reference)
    warm_up = [Interval("node0", 0, 0, t) for t in (None, *TOKENS)]  # every kind of these known
    for op in [("add_all", warm_up), *steps]:
        got_fast, got_ref = outcome(partial(apply, fast, op)), outcome(partial(apply, ref, op))
        if got_fast[0] == "ok" and got_ref[0] == "ok":
            assert isinstance(got_fast[1], Accounting) and isinstance(got_ref[1], Accounting)
            fast, ref = got_fast[1], got_ref[1]
        else:
            assert got_fast == got_ref, op
        assert observed(fast) == observed(ref), op


# -- the properties ------------------------------------------------------------------------------


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, st.lists(ops, max_size=14))
def test_the_compiled_accounting_leaves_the_state_the_references_leave(
    config: Config, steps: list[Op]
) -> None:
    check(config, steps)


default = Config(DEFAULT_RULES, DEFAULT_BUCKETS_S, ORIGIN, 600 * SECOND)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batches(), min_size=1, max_size=8), st.lists(offsets, max_size=8))
@example([[Event("node0", ORIGIN, EventKind.STARTED, 1, 0, 1)] * 2, [Interval("node0", 0, 1)]], [])
def test_batches_with_the_watermark_moving_in_between(
    recs: list[list[Record]], moves: list[int]
) -> None:
    steps: list[Op] = []
    for i, batch in enumerate(recs):
        steps.append(("add_all", batch))
        if i < len(moves):
            steps.append(("advance_to", moves[i]))
    steps.append(("advance_to", ORIGIN + 300 * SECOND))
    check(default, steps)


def test_many_launches_wait_and_keep_their_order() -> None:
    """More launches in one batch than the C side keeps waiting at once, some of them ended in
    it, some updated (a second launch of a task in flight keeps its place)."""
    recs: list[Record] = []
    for task in range(200):
        recs.append(Event("node1", ORIGIN + task, EventKind.STARTED, 1, task % 4, task))
        if task % 3 == 0:
            recs.append(Interval("node1", ORIGIN + task, ORIGIN + task + 5, 10, 1, 2, 3, 4, 0, 0))
        if task % 5 == 0:
            recs.append(Event("node1", ORIGIN + task, EventKind.STARTED, 1, 1, task // 2))
        if task % 7 == 0:
            recs.append(
                Interval("node1", ORIGIN, ORIGIN + task + 9, 700, slot=task % 4, task=task - 7)
            )
    check(default, [("add_all", recs[:150]), ("add_all", recs[150:]), ("advance_to", 2**62)])


def test_sums_that_would_overflow_64_bits_are_the_python_codes() -> None:
    big = 2**62
    recs: list[Record] = [
        Interval("node0", ORIGIN, ORIGIN + 1, 10, big, big, big, big, 0, 1) for _ in range(5)
    ]
    recs += [Interval("node0", -big, big, 10), Interval("node0", -big - 1, big, 10)]
    check(default, [("add_all", recs), ("advance_to", ORIGIN + SECOND), ("advance_to", big)])


@pytest.mark.parametrize("n", range(10))
def test_each_value_at_and_around_each_bound_is_in_the_references_bucket(n: int) -> None:
    """Bounds of every length up to 9, a bound twice: the prompt-eval and generation times at
    each bound, one below and one above, in the bucket bisect gives (and the durations too)."""
    bounds = tuple(sorted(0.25 * (i - i // 3) for i in range(1, n + 1)))
    config = Config(DEFAULT_RULES, bounds, ORIGIN, 600 * SECOND, bounds, bounds[::-1])
    near = [round(b * SECOND) + d for b in (0.0, *bounds, 9.0) for d in (-1, 0, 1)]
    recs = [
        Interval("node1", ORIGIN, ORIGIN + us, 10, 1, 2, us, near[-1 - i], 0, i)
        for i, us in enumerate(near)
    ]
    check(config, [("add_all", recs), ("add_all", [r._replace(prompt_us=None) for r in recs])])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from((3, 40, 2000)))
def test_a_large_timeline_in_any_order_sweeps_as_the_reference(seed: int, spread_s: int) -> None:
    """Thousands of intervals: the compiled sweep sorts them (by insertion while they come
    nearly sorted, else by radix), in journal order or shuffled, times near and far apart."""
    rnd = random.Random(seed)
    recs: list[Record] = []
    for i in range(3000):
        start = ORIGIN + rnd.randrange(spread_s * SECOND) + (i * SECOND if spread_s == 3 else 0)
        end = start + rnd.randrange(1, 40 * SECOND)
        recs.append(Interval(NODES[rnd.randrange(3)], start, end, rnd.choice(TOKENS)))
    if rnd.random() < 0.5:
        rnd.shuffle(recs)
    steps: list[Op] = [("add_all", recs[:1500]), ("add_all", recs[1500:])]
    steps += [("advance_to", ORIGIN + rnd.randrange(3000 * SECOND)) for _ in range(2)]
    check(default, [*steps, ("advance_to", ORIGIN + 4000 * SECOND)])


@st.composite
def crafted_states(draw: st.DrawFn) -> dict[str, Any]:
    """A checkpoint state as state_of writes it, its timeline parts drawn: pending intervals
    that end before they start, at the same time, or at times that do not fit in 64 bits."""
    state = state_of(default.build(Accounting))
    ends = st.integers(-100, 400).map(lambda c: ORIGIN + c * SECOND) | st.sampled_from(BIG)
    state["watermark_us"] = draw(st.just(ORIGIN) | ends)
    state["pending"] = draw(
        st.lists(
            st.lists(ends, min_size=2, max_size=2).map(sorted)
            | st.lists(ends, min_size=2, max_size=2),
            max_size=12,
        ).map(
            lambda spans: [
                [s, e, NODES[i % 3], ("extraction", "reconcile")[i % 2]]
                for i, (s, e) in enumerate(spans)
            ]
        )
    )
    # (counters that fit: a saved counter below 0 or over 2**63 - 1 is refused, as test_codec shows)
    counters = st.sampled_from([b for b in BIG if 0 <= b < 2**63])
    state["concurrency_us"] = draw(st.lists(st.just(0) | counters, min_size=4))[:4]
    return state


@settings(max_examples=examples(400), deadline=None)
@given(crafted_states(), st.lists(st.just(ORIGIN) | offsets | st.sampled_from(BIG), max_size=4))
def test_the_compiled_sweep_of_any_restored_state_is_the_references(
    state: dict[str, Any], untils: list[int]
) -> None:
    fast, ref = default.build(Accounting), default.build(Reference)
    try:
        restore(fast, state)
    except ValueError as e:  # a saved time the exporter cannot represent: refused, by both
        assert "not a time the exporter can represent" in str(e)
        with pytest.raises(ValueError, match="not a time"):
            restore(ref, state)
        return
    restore(ref, state)
    for until in untils:
        assert outcome(partial(fast.advance_to, until)) == outcome(partial(ref.advance_to, until))
        assert observed(fast) == observed(ref)


# -- the compiled functions themselves ---------------------------------------------------------


def _parts(acc_nodes: Sequence[str] = ("n",)) -> Any:
    """What `_accounting.add_all` reads of an accounting (ACCOUNTING_READS), built as
    Accounting builds its own (two kinds, the default buckets; the generation histogram's
    bounds other than the prompt histogram's, so that one read for the other shows)."""
    names = ("extraction", "reconcile")
    bounds = tuple(round(b * SECOND) for b in DEFAULT_BUCKETS_S)
    prompt = tuple(round(b * SECOND) for b in DEFAULT_PHASE_BUCKETS_S)
    generation = tuple(round(b * SECOND) for b in (0.1, 1.0, 10.0, 100.0))

    def counters() -> KindCounters:
        return KindCounters(
            buckets=[0] * (len(bounds) + 1),
            prompt_buckets=[0] * (len(prompt) + 1),
            generation_buckets=[0] * (len(generation) + 1),
        )

    return SimpleNamespace(
        nodes={n: NodeState(newest_us=0, kinds={k: counters() for k in names}) for n in acc_nodes},
        node_index={n: i for i, n in enumerate(acc_nodes)},
        kind_of={10: "reconcile", 700: "extraction"},
        kind_bit={"extraction": 1, "reconcile": 2},
        buckets_us=bounds,
        prompt_buckets_us=prompt,
        generation_buckets_us=generation,
        origin_us=ORIGIN,
        watermark_us=ORIGIN,
        pending=[],
        sorted_kinds=names,
        kind_cache=bytearray(1024),
    )


def _add_all(recs: list[Record], p: Any, start: int = 0) -> int:
    return _accounting.add_all(recs, start, p, RECORD_TYPES)


def test_the_compiled_add_all_takes_requests_and_hands_back_the_rest() -> None:
    p = _parts()
    recs: list[Record] = [
        Event("n", ORIGIN, EventKind.STARTED, 1, 0, 1),
        Interval("n", ORIGIN, ORIGIN + 3 * SECOND, 700, 600, 100, 5, 6, 0, 1),
        Interval("n", ORIGIN, ORIGIN + SECOND, 10),
        Event("n", ORIGIN, EventKind.STARTED, 1, 1, 2),
        Interval("n", ORIGIN, ORIGIN + SECOND, 11),  # a token count not seen before
        Event("n", ORIGIN, EventKind.RESTART, 2),
        Interval("elsewhere", ORIGIN, ORIGIN + SECOND, 10),
        Interval("n", ORIGIN, 2**64, 10),
        Interval("n", ORIGIN, ORIGIN + SECOND, slot=0, task=3, reason="cancelled"),
        Event("n", ORIGIN, EventKind.STARTED, 1, 0, 4, "", "qwen"),
        Interval("n", ORIGIN, ORIGIN + SECOND, 10, slot=0, task=4, model="qwen"),
    ]
    assert _add_all(recs, p) == 4
    ns = p.nodes["n"]
    assert ns.in_flight == {(1, 2): ORIGIN} and ns.start_lines
    c = ns.kinds["extraction"]
    assert (c.requests, c.request_us, c.tokens, c.prompt_tokens, c.generated_tokens) == (
        1,
        3 * SECOND,
        700,
        600,
        100,
    )
    assert (c.prompt_us, c.generation_us, c.histogram_us) == (5, 6, 3 * SECOND)
    assert c.buckets[6] == 1 and sum(c.buckets) == 1  # (2.5 s, 5 s]
    assert ns.kinds["reconcile"].requests == 1 and ns.last_end_us == ORIGIN + 3 * SECOND
    assert p.pending == [(ORIGIN, ORIGIN + 3 * SECOND, 0, 1), (ORIGIN, ORIGIN + SECOND, 0, 2)]
    assert p.kind_cache[700] == 1 and p.kind_cache[10] == 2  # (1 + the kind's bit index)
    # a restart, a node it does not know, a time that does not fit, an occupancy without
    # timing, a model instance's launch and its request: Python's
    for start in range(5, 11):
        assert _add_all(recs, p, start) == start
    assert _add_all(recs, p, len(recs)) == len(recs)


def test_the_compiled_add_all_fills_the_prompt_and_generation_histograms() -> None:
    """Each timed request's prompt-eval and generation times, where its block gave them, each
    in its own histogram by its own bounds: what intake.interval makes of the same records."""
    p, ref = _parts(), _parts()
    pb, gb = p.prompt_buckets_us, p.generation_buckets_us
    s = SECOND
    recs: list[Record] = [
        Interval("n", ORIGIN, ORIGIN + 3 * s, 700, 600, 100, pb[3], gb[2] + 1),  # at; just past
        Interval("n", ORIGIN, ORIGIN + 3 * s, 700, 600, 100, None, gb[0]),  # no prompt time
        Interval("n", ORIGIN, ORIGIN + 9 * s, 700, 600, 100, pb[-1] + 1, None),  # +Inf; none
        Interval("n", ORIGIN, ORIGIN + 2 * s, 700, 600, 100, 0, gb[-1] + 1),
        Interval("n", ORIGIN, ORIGIN + s, 10, 5, 5, None, None),  # neither
        Interval("n", ORIGIN, ORIGIN + s, 10, 5, 5, pb[0] - 1, -5),
    ]
    assert _add_all(recs, p) == len(recs)  # (every one the compiled code's)
    x, r = p.nodes["n"].kinds["extraction"], p.nodes["n"].kinds["reconcile"]
    assert x.requests == 4 and r.requests == 2
    assert x.prompt_buckets == [1] + [0] * 2 + [1] + [0] * (len(pb) - 4) + [1]
    assert x.prompt_histogram_us == pb[3] + pb[-1] + 1
    assert x.generation_buckets == [1, 0, 0, 1, 1]
    assert x.generation_histogram_us == gb[2] + 1 + gb[0] + gb[-1] + 1
    assert r.prompt_buckets == [1] + [0] * len(pb) and r.prompt_histogram_us == pb[0] - 1
    assert r.generation_buckets == [1, 0, 0, 0, 0] and r.generation_histogram_us == -5
    for rec in recs:
        intake.interval(ref, cast(Interval, rec), True)
    assert p.nodes["n"].kinds == ref.nodes["n"].kinds and p.pending == ref.pending


def test_the_compiled_add_all_hands_back_counters_it_does_not_keep() -> None:
    p = _parts()
    p.nodes["n"].kinds["reconcile"].buckets = [0, 0]  # not one per bucket
    p.nodes["n"].kinds["extraction"].tokens = 1.5
    recs: list[Record] = [Interval("n", ORIGIN, ORIGIN + 1, 10), Interval("n", ORIGIN, ORIGIN, 700)]
    assert _add_all(recs, p) == 0
    assert _add_all(recs, p, 1) == 1
    assert p.pending == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("prompt_buckets", [0, 0]),  # not one per bucket
        ("generation_buckets", (0,) * 5),  # not a list
        ("generation_buckets", [0, 0, 0.5, 0, 0]),  # not of ints
        ("prompt_histogram_us", 1.5),
        ("generation_histogram_us", None),
    ],
)
def test_the_compiled_add_all_hands_back_histograms_it_does_not_keep(name: str, value: Any) -> None:
    p = _parts()
    setattr(p.nodes["n"].kinds["reconcile"], name, value)
    before = copy.deepcopy(p.nodes["n"].kinds["reconcile"])
    recs: list[Record] = [Interval("n", ORIGIN, ORIGIN + 1, 10, 1, 1, None, None)]
    assert _add_all(recs, p) == 0
    assert p.nodes["n"].kinds["reconcile"] == before and p.pending == []


def test_the_compiled_add_all_hands_back_every_record_when_a_bound_does_not_fit() -> None:
    for name in ("prompt_buckets_us", "generation_buckets_us"):
        p = _parts()
        setattr(p, name, (SECOND, 2**64))
        assert _add_all([Interval("n", ORIGIN, ORIGIN + 1, 10, 1, 1, 5, 5)], p) == 0
        assert p.pending == []


def test_the_compiled_add_all_refuses_arguments_of_other_types() -> None:
    p = _parts()
    p.kind_cache = bytes(10)
    with pytest.raises(TypeError):
        _add_all([], p)
    with pytest.raises(TypeError):
        _accounting.add_all([], 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):  # (types that are no record types)
        _accounting.add_all([], 0, _parts(), (int, str, 1))
    with pytest.raises(AttributeError):  # (not an accounting: no `nodes`)
        _accounting.add_all([], 0, object(), RECORD_TYPES)
    for name in ("buckets_us", "prompt_buckets_us", "generation_buckets_us"):
        p = _parts()
        setattr(p, name, [1, 2])  # (bounds: a tuple)
        with pytest.raises(TypeError):
            _add_all([], p)


ACCOUNTING = layouts_of_accounting()


def swapped(layouts: Layouts, name: str, i: int, j: int) -> Layouts:
    names = list(layouts[name])
    names[i], names[j] = names[j], names[i]
    return {**layouts, name: tuple(names)}


def test_the_compiled_accounting_accepts_this_codes_layouts() -> None:
    _accounting.check_layouts(ACCOUNTING)  # (no error)
    assert load("_accounting", ACCOUNTING) is _accounting


@pytest.mark.parametrize("name", sorted(ACCOUNTING))
def test_a_layout_of_the_accounting_with_two_names_swapped_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name}: built for"):
        _accounting.check_layouts(swapped(ACCOUNTING, name, 0, 1))
    with pytest.warns(LayoutWarning, match=f"{name}.*pure-Python references"):
        assert load("_accounting", swapped(ACCOUNTING, name, 0, 1)) is None


@pytest.mark.parametrize("name", sorted(ACCOUNTING))
def test_a_layout_of_the_accounting_left_out_cut_short_or_grown_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"no {name} layout given"):
        _accounting.check_layouts({k: v for k, v in ACCOUNTING.items() if k != name})
    with pytest.raises(ValueError, match=name):
        _accounting.check_layouts({**ACCOUNTING, name: ACCOUNTING[name][:-1]})
    with pytest.raises(ValueError, match=name):
        _accounting.check_layouts({**ACCOUNTING, name: (*ACCOUNTING[name], "more")})
    with pytest.raises(ValueError, match="no layout 'Parser' here"):
        _accounting.check_layouts({**ACCOUNTING, "Parser": ("node",)})


def test_the_compiled_sweep_sweeps_or_hands_back() -> None:
    s = SECOND
    pending = [(0, 4 * s, 0, 1), (2 * s, 6 * s, 1, 2), (5 * s, 20 * s, 0, 2)]
    keep, conc, mix, busy, slot_busy = _accounting.sweep(pending, 0, 10 * s, 2, 2) or (
        [],
        [],
        [],
        [],
        [],
    )
    assert keep == [(10 * s, 20 * s, 0, 2)]
    assert conc == [0, 7 * s, 3 * s] and sum(conc) == 10 * s
    assert mix == [0, 2 * s, 6 * s, 2 * s]  # idle, extraction, reconcile, both
    assert busy == [9 * s, 4 * s]
    assert slot_busy == [9 * s, 4 * s]
    # bit 0: an occupancy of no kind (released without timing), busy but in no mix; two at once
    # on one node: busy once, slot busy twice
    pending = [(0, 4 * s, 0, 1), (2 * s, 6 * s, 0, 0), (3 * s, 5 * s, 0, 0), (1 * s, 3 * s, 1, 0)]
    swept = _accounting.sweep(pending, 0, 10 * s, 2, 2)
    assert swept == (
        [],
        [4 * s, 4 * s, 2 * s],
        [6 * s, 4 * s, 0, 0],
        [6 * s, 2 * s],
        [10 * s, 2 * s],
    )
    assert _accounting.sweep([(0, 2**63, 0, 1)], 0, 10, 1, 1) is None  # does not fit
    assert _accounting.sweep([(5, 3, 0, 1)], 0, 10, 1, 1) is None  # ends before it starts
    assert _accounting.sweep([(5, 8, 1, 1)], 0, 10, 1, 1) is None  # no such node
    assert _accounting.sweep([(5, 8, 0, 3)], 0, 10, 1, 2) is None  # no such bit
    assert _accounting.sweep([(-(2**62), 2**62, 0, 1)], -(2**62), 2**62, 1, 1) is None  # sums
    assert _accounting.sweep([(0, 10, 0, 1)], -(2**63), 10, 1, 1) is None
    assert _accounting.sweep([], -(2**63), 2**63 - 1, 1, 1) is None
    assert _accounting.sweep([], 0, 10, 1, 1) == ([], [10, 0], [10, 0], [0], [0])
    with pytest.raises(TypeError):
        _accounting.sweep((), 0, 10, 1, 1)  # type: ignore[arg-type]


# -- keep_recent: the status page's rings --------------------------------------------------------

recent_records = st.lists(
    st.one_of(
        st.builds(
            Interval,
            st.sampled_from((*NODES, "unknown")),
            st.integers(0, 10),
            st.integers(10, 20),
            st.integers(0, 5),
            # (the last: equal to "lost", not the same str)
            reason=st.sampled_from(("", "lost", "cancelled", "error", "untimed", "".join("lost"))),
        ),
        st.builds(Event, st.sampled_from(NODES), st.integers(0, 10), st.just(EventKind.STARTED)),
        st.tuples(st.sampled_from(NODES), st.integers()),  # (not a record: skipped)
    ),
    max_size=40,
)


# (None: every interval kept; past 64 bits, the compiled side compares as Python does)
recent_since = st.one_of(st.none(), st.integers(8, 22), st.sampled_from((-(2**70), 2**70)))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(recent_records, max_size=5), st.integers(1, 6), recent_since)
def test_the_compiled_rings_keep_what_the_reference_keeps(
    batches: list[list[Record]], size: int, since: int | None
) -> None:
    compiled, reference = Recent(NODES, size), Recent(NODES, size)
    for batch in batches:
        compiled.add_all(batch, since)
        reference.add_all_reference(batch, since)
        assert compiled.rings == reference.rings
        assert all(ring.maxlen == size for ring in compiled.rings.values())


def test_the_compiled_rings_compare_an_end_past_64_bits_as_python_does() -> None:
    huge, since = Interval("a", 0, 2**70, 1), 2**64
    rings: dict[str, object] = {"a": deque()}
    _accounting.keep_recent(rings, [Interval("a", 0, 5, 1), huge], Interval, "lost", since)
    assert rings == {"a": deque([huge])}
    with pytest.raises(TypeError):  # (an end that is no number: as the reference raises)
        _accounting.keep_recent(rings, [Interval("a", 0, "x", 1)], Interval, "lost", 3)  # type: ignore[arg-type]


def test_the_compiled_rings_refuse_arguments_of_other_types() -> None:
    rings: dict[str, object] = {"a": deque()}
    with pytest.raises(TypeError):
        _accounting.keep_recent(rings, iter([]), Interval, "lost", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _accounting.keep_recent([], [], Interval, "lost", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _accounting.keep_recent(rings, [], Interval, "lost", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _accounting.keep_recent(rings, [], Interval, "lost")  # type: ignore[call-arg]
    with pytest.raises(AttributeError):  # (a ring without an append)
        _accounting.keep_recent({"a": 1}, [Interval("a", 0, 1, 1)], Interval, "lost", None)
    assert rings == {"a": deque()}


# -- window_run: a report's records in its window ------------------------------------------------

WINDOW = (ORIGIN, ORIGIN + 100)
window_times = st.one_of(
    st.integers(ORIGIN - 5, ORIGIN + 105), st.sampled_from(BIG), st.just(None), st.just(1.5)
)
window_records = st.lists(
    st.one_of(
        st.builds(
            Interval,
            st.sampled_from(NODES),
            window_times,
            window_times,
            st.one_of(st.integers(0, 5), st.none()),
            reason=st.sampled_from(("", "cancelled", "lost", 0)),
        ),
        st.builds(
            Event,
            st.sampled_from(NODES),
            window_times,
            st.sampled_from((EventKind.STARTED, EventKind.PARSE_ERROR, EventKind.RESTART)),
        ),
        st.tuples(st.integers(), st.integers()),  # (no record: ends a run)
    ),
    max_size=30,
)


@settings(max_examples=examples(400), deadline=None)
@given(window_records, st.integers(0, 30))
def test_the_compiled_window_run_goes_as_far_as_the_reference(
    recs: list[Record], start: int
) -> None:
    start = min(start, len(recs))
    compiled: dict[int | None, list[int]] = {}
    reference: dict[int | None, list[int]] = {}
    got = _accounting.window_run(
        recs, start, *WINDOW, compiled, Interval, Event, EventKind.PARSE_ERROR
    )
    assert got == window_run_reference(recs, start, *WINDOW, reference)
    assert compiled == reference


def test_the_compiled_window_run_notes_timed_durations_and_stops_outside() -> None:
    since, until = WINDOW
    recs: list[Record] = [
        Event("node0", since, EventKind.STARTED),
        Interval("node0", since - 10, since + 5, 7),  # timed, ends inside
        Interval("node0", since, since + 6, 3, reason="cancelled"),  # inside, not timed
        Interval("node0", since, until + 1, 2),  # ends after the window
        Interval("node0", since, since + 9, 4),
    ]
    counted: dict[int | None, list[int]] = {}
    assert (
        _accounting.window_run(
            recs, 0, since, until, counted, Interval, Event, EventKind.PARSE_ERROR
        )
        == 3
    )
    assert counted == {7: [15]}
    assert (
        _accounting.window_run(
            recs, 4, since, until, counted, Interval, Event, EventKind.PARSE_ERROR
        )
        == 5
    )
    assert counted == {7: [15], 4: [9]}
    with pytest.raises(IndexError):
        _accounting.window_run(
            recs, 6, since, until, counted, Interval, Event, EventKind.PARSE_ERROR
        )
    not_counted: list[Any] = [[], {7: ()}]  # (counted is a dict of lists)
    for bad in not_counted:
        with pytest.raises(TypeError):
            _accounting.window_run(
                recs, 0, since, until, bad, Interval, Event, EventKind.PARSE_ERROR
            )
    with pytest.raises(TypeError):
        _accounting.window_run(
            iter(recs),  # type: ignore[arg-type]
            0,
            since,
            until,
            counted,
            Interval,
            Event,
            EventKind.PARSE_ERROR,
        )
