"""The checkpoint's content: the state written as versioned JSON, and read back into the daemon.

What a checkpoint holds (docs/design.md, "Checkpoints"): the accounting's numbers (`state_of`,
`restore`), each node's parser (`parser_state`, `parser_of`), each node's position and the kind
of source it is of, the count of failed writes and when it was written. `state` gathers them,
`encode` writes them as JSON under `"format": VERSION`; `load` reads a file back through
`migrations.upgrade` (an older version migrated, step by step, to this one) and
`schema.check` (every field against the schema, naming where one does not fit). `layout.py`
says what the saved rows hold; `store.py` keeps the file (atomic writes, the lock).

Restoring takes the checkpoint into an accounting built from today's config: nodes added or
removed, kinds or duration buckets changed are taken up (and said, for the log); the start-up
tracker's own fields are checked as it reads them (`Tracker.from_state`).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Mapping
from operator import attrgetter
from typing import Any

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import KindCounters, NodeState, model_figures
from exporter.checkpoint.layout import (
    BUCKETS_AT,
    DRAFT_AT,
    GENERATION_AT,
    HISTOGRAM_AT,
    KIND_COUNTERS,
    NODE_COUNTERS,
    PROMPT_AT,
    VERSION,
)
from exporter.checkpoint.migrations import upgrade
from exporter.checkpoint.schema import ACCOUNTING, PARSER, SCHEMA, check
from exporter.checkpoint.store import Checkpoint, CheckpointError
from exporter.parse.context import NO_BLOCK, Block, ServerContext
from exporter.parse.contract import BLOCK_FIELDS
from exporter.parse.parser import MAX_INSTANCES, SPAWNED, Parser
from exporter.startup.llama import Tracker

# the config's settings of the histograms' buckets, in the order a saved kind holds them
BUCKET_SETTINGS = ("duration_buckets", "prompt_duration_buckets", "generation_duration_buckets")
_node_counters = attrgetter(*NODE_COUNTERS)
_kind_counters = attrgetter(*KIND_COUNTERS)

# -- writing ------------------------------------------------------------------------------------


def state(
    acc: Accounting,
    parsers: Mapping[str, Parser],
    positions: Mapping[str, str],
    sources: Mapping[str, str],
    checkpoint_errors: int,
    written_at_us: int,
) -> dict[str, Any]:
    """Everything a daemon resumes from, as fresh JSON-ready values: nothing in it is shared
    with what goes on changing, so it can be encoded in a worker thread. `sources`: the kind
    of source each position is of."""
    steps = state_in_steps(acc, parsers, positions, sources, checkpoint_errors, written_at_us)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


STEP_NODES = 100  # nodes taken between two pauses of `state_in_steps`


def state_in_steps(
    acc: Accounting,
    parsers: Mapping[str, Parser],
    positions: Mapping[str, str],
    sources: Mapping[str, str],
    checkpoint_errors: int,
    written_at_us: int,
) -> Generator[None, None, dict[str, Any]]:
    """`state`, taken STEP_NODES nodes at a time: it yields between steps (the caller lets
    other work run there, none of it changing what is taken) and returns the state."""
    accounting = state_of(acc, nodes={})
    for i, (name, ns) in enumerate(acc.nodes.items(), 1):
        accounting["nodes"][name] = _node_state(ns)
        if i % STEP_NODES == 0:
            yield
    taken: dict[str, Any] = {}
    for i, (name, p) in enumerate(parsers.items(), 1):
        taken[name] = parser_state(p)
        if i % STEP_NODES == 0:
            yield
    return {
        "accounting": accounting,
        "parsers": taken,
        "positions": dict(positions),
        "sources": dict(sources),
        "checkpoint_errors": checkpoint_errors,
        "written_at_us": written_at_us,
    }


_dumps = json.JSONEncoder(separators=(",", ":")).encode
# The levels of mappings encoded an entry at a time (the state, its parts, their nodes): one
# json.dumps of it all would hold the interpreter lock throughout, a tenth of a second at
# 2,000 nodes that scrapes and the reader would wait; between entries, they get their turn.
SPLIT_LEVELS = 3


def encode(values: Mapping[str, Any]) -> bytes:
    """The checkpoint file's bytes: `values` under this version's `format` (as one json.dumps
    with compact separators writes them)."""
    return Encoder().encode(values)


Kept = dict[tuple[str, ...], tuple[Any, str]]  # where in the state: its value and its JSON


class Encoder:
    """`encode`, again and again, each time encoding only what changed: the parts of the state
    the split levels end at (a node's accounting, each field of its parser, ...) are kept with
    their JSON, and a part equal to the one kept (a node idle since) is not encoded again.

    Each state is taken fresh and never changed after (`state`), so a kept value is what was
    encoded. Two encodings at once (a worker's and the final one) each keep what they made;
    either set of pairs holds only values with their own JSON."""

    def __init__(self) -> None:
        self._kept: Kept = {}

    def encode(self, values: Mapping[str, Any]) -> bytes:
        """The checkpoint file's bytes for `values` (as the module's `encode`)."""
        kept: Kept = {}
        text = "".join(_encoded({"format": VERSION, **values}, SPLIT_LEVELS, (), self._kept, kept))
        self._kept = kept  # (the parts of nodes since removed are let go)
        return text.encode()


def _encoded(value: Any, levels: int, at: tuple[str, ...], old: Kept, new: Kept) -> Iterator[str]:
    """`value`'s JSON in pieces, mappings split `levels` deep (a key json.dumps would convert
    left to it), each part at the bottom taken from `old` when equal, and kept in `new`."""
    if levels <= 0 or not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        if not isinstance(value, dict | list):  # (a number or a string: none cheaper kept)
            yield _dumps(value)
            return
        last = old.get(at)
        if last is not None and type(last[0]) is type(value) and last[0] == value:
            text = last[1]
        else:
            text = _dumps(value)
        new[at] = (value, text)
        yield text
        return
    yield "{"
    for i, (key, item) in enumerate(value.items()):
        yield f"{',' if i else ''}{_dumps(key)}:"
        yield from _encoded(item, levels - 1, (*at, key), old, new)
    yield "}"


def state_of(acc: Accounting, nodes: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every number `acc` holds (not what its sources are doing now), as JSON-ready values,
    fresh: nothing in them changes with `acc` after (they may be encoded in another thread).
    `nodes`: the nodes' part, when the caller takes it itself (`state_in_steps`)."""
    kinds_by_bit = {1 << i: k for i, k in enumerate(sorted(acc.kind_names))}
    kinds_by_bit[0] = ""  # (an occupancy without timing)
    return {
        "origin_us": acc.origin_us,
        "watermark_us": acc.watermark_us,
        "kinds": [[r.name, r.min_tokens, r.max_tokens] for r in acc.kinds.rules],
        "buckets_us": list(acc.buckets_us),
        "prompt_buckets_us": list(acc.prompt_buckets_us),
        "generation_buckets_us": list(acc.generation_buckets_us),
        "concurrency_us": list(acc.concurrency_us),
        "mix_us": dict(acc.mix_us),
        "pending": [[s, e, acc.node_names[n], kinds_by_bit[bit]] for s, e, n, bit in acc.pending],
        "nodes": (
            {name: _node_state(ns) for name, ns in acc.nodes.items()} if nodes is None else nodes
        ),
    }


def _node_state(ns: NodeState) -> dict[str, Any]:
    """One node's numbers in the accounting, as saved."""
    return {
        **dict(zip(NODE_COUNTERS, _node_counters(ns), strict=True)),
        "start_lines": ns.start_lines,
        "in_flight": [[*key, t] for key, t in ns.in_flight.items()],
        "untimed": {r: list(v) for r, v in ns.untimed.items()},
        "slots": ns.slots,
        "server_up": ns.server_up,
        "models": {m: list(v) for m, v in ns.models.items()},
        "startups": ns.startups.state(),
        "asleep_since_us": ns.asleep_since_us,
        "asleep_us": ns.asleep_us,
        "queues": {m: list(v) for m, v in ns.queues.items()},
        "kinds": {k: _kind_row(c) for k, c in ns.kinds.items()},
    }


def _kind_row(c: KindCounters) -> list[Any]:
    """A kind's counters as saved (see KIND_COUNTERS)."""
    return [
        *_kind_counters(c),
        list(c.buckets),
        c.histogram_us,
        list(c.prompt_buckets),
        c.prompt_histogram_us,
        list(c.generation_buckets),
        c.generation_histogram_us,
        c.draft_tokens,
        c.draft_accepted_tokens,
    ]


def parser_state(p: Parser) -> dict[str, Any]:
    """Everything a parser needs to resume mid-block, as JSON-ready values: the context of the
    PID logging now, its older PIDs' and its router's instances' (each a parser state)."""
    return {
        "pid": p.pid,
        **_context_state(p),
        "n_slots": p.n_slots,
        "up": p.up,
        "newest_pid": p.newest_pid,
        "newest_since_us": p.newest_since_us,
        "second": p.second,
        "last_us": p.last_us,
        "others": [
            [pid, s.since_us, _context_state(s), s.n_slots, s.second] for pid, s in p.others.items()
        ],
        "seen": list(p.seen),
        "recent_totals": [[slot, task, tokens] for (slot, task), tokens in p.recent_totals.items()],
        "instances": [[port, sub.model, parser_state(sub)] for port, sub in p.instances.items()],
        "spawned": [[name, status] for name, status in p.spawned.items()],
    }


def _context_state(s: Parser | ServerContext) -> dict[str, Any]:
    """A PID's context (a parser's own holds the one logging now)."""
    b = s.block
    return {
        "block": [getattr(b, f) for f in BLOCK_FIELDS],  # (in the order Block takes them)
        "pending_stops": [[slot, t, at] for (slot, t), at in s.pending_stops.items()],
        "last_timed": [[slot, t] for slot, t in s.last_timed.items()],
        "started": [[slot, t, at] for (slot, t), at in s.started.items()],
        "marks": [[t, reason] for t, reason in s.task_reasons.items()],  # (the task reasons)
        "children": [[slot, t] for slot, t in s.children],
    }


# -- reading ------------------------------------------------------------------------------------


def load(store: Checkpoint) -> dict[str, Any] | None:
    """The checkpoint `store` holds, at this version and checked; None when there is none;
    CheckpointError (naming the file and why) when it is unusable."""
    saved = store.load()
    if saved is None:
        return None
    try:
        current = upgrade(saved)
        check(SCHEMA, current, "")
    except CheckpointError as e:
        raise CheckpointError(f"{store.path}: {e}") from None
    except ValueError as e:  # (a field the schema refuses: it names it)
        raise CheckpointError(f"{store.path}: does not fit ({e})") from None
    except Exception as e:  # any other misfit of an older version's structure: refused
        raise CheckpointError(f"{store.path}: does not fit ({type(e).__name__}: {e})") from None
    return current


def restore(acc: Accounting, saved: dict[str, Any]) -> list[str]:
    """Put a checkpointed accounting state back into a fresh `acc` built from today's config;
    returns what changed since (nodes added or dropped, kinds or buckets changed), for the log.
    ValueError (naming the field) on a state that does not fit."""
    check(ACCOUNTING, saved, "accounting")
    notes: list[str] = []
    same_kinds = saved["kinds"] == [[r.name, r.min_tokens, r.max_tokens] for r in acc.kinds.rules]
    same = (
        saved["buckets_us"] == list(acc.buckets_us),
        saved["prompt_buckets_us"] == list(acc.prompt_buckets_us),
        saved["generation_buckets_us"] == list(acc.generation_buckets_us),
    )
    if not same_kinds:
        notes.append("the kinds changed: per-kind and mix counters start again from 0")
    else:
        bounds = ("buckets_us", "prompt_buckets_us", "generation_buckets_us")
        names = ("duration", "prompt-eval", "generation")
        for setting, kept, at, name in zip(BUCKET_SETTINGS, same, bounds, names, strict=True):
            if not kept and saved[at]:  # (none saved: a version without that histogram)
                notes.append(
                    f"{setting} changed: the {name} histograms (buckets, count and sum) start "
                    "again from 0"
                )
    acc.origin_us, acc.watermark_us = saved["origin_us"], saved["watermark_us"]
    saved_conc = list(saved["concurrency_us"])
    acc.concurrency_us = (saved_conc + [0] * len(acc.concurrency_us))[: len(acc.concurrency_us)]
    if len(saved_conc) != len(acc.concurrency_us):
        notes.append(
            f"the number of nodes changed from {len(saved_conc) - 1} to "
            f"{len(acc.concurrency_us) - 1}"
        )
    if same_kinds:
        acc.mix_us.update({k: v for k, v in saved["mix_us"].items() if k in acc.mix_us})
    for name, node in saved["nodes"].items():
        if name not in acc.nodes:
            notes.append(f"node {name} is no longer configured: its counters are dropped")
            continue
        _restore_node(acc, name, node, same_kinds, same)
    for name in acc.nodes.keys() - saved["nodes"].keys():
        notes.append(f"node {name} is new: it starts at `since`")
    acc.drop_copies()
    catch_all = acc.kind_index[acc.kinds.classify(None)]
    for s, e, name, kind in saved["pending"]:
        if name in acc.nodes:
            bit = 0 if kind == "" else 1 << acc.kind_index.get(kind, catch_all)
            acc.pending.append((s, e, acc.node_index[name], bit))
    return notes


def _restore_node(
    acc: Accounting,
    name: str,
    saved: dict[str, Any],
    same_kinds: bool,
    same_buckets: tuple[bool, bool, bool],
) -> None:
    """One node's saved figures into `acc` (checked already): its per-kind counters unless the
    kinds changed, each histogram unless its buckets did too (it starts from 0)."""
    ns = acc.nodes[name]
    for f in NODE_COUNTERS:
        setattr(ns, f, saved[f])
    ns.end_in_line_us = ns.last_end_us
    ns.start_lines = saved["start_lines"]
    ns.in_flight = {tuple(key): at for *key, at in saved["in_flight"]}
    for reason, figures in saved["untimed"].items():
        if reason in ns.untimed:
            ns.untimed[reason] = list(figures)
    ns.slots, up = saved["slots"], saved["server_up"]
    ns.server_up = None if up is None else int(bool(up))
    ns.startups = Tracker.from_state(name, saved["startups"])
    ns.asleep_since_us, ns.asleep_us = saved["asleep_since_us"], saved["asleep_us"]
    for into, figures_by_model in ((ns.models, saved["models"]), (ns.queues, saved["queues"])):
        for model, values in figures_by_model.items():
            figures = model_figures(into, model)
            for i, v in enumerate(values):
                figures[i] = max(figures[i], v) if into is ns.queues and i == 1 else figures[i] + v
    if same_kinds:
        for k, values in saved["kinds"].items():
            _restore_kind(ns.kinds[k], values, same_buckets)


def _restore_kind(c: KindCounters, values: list[Any], same_buckets: tuple[bool, ...]) -> None:
    """A kind's saved counters into `c`, each histogram unless its buckets changed."""
    durations, prompts, generations = same_buckets
    for f, v in zip(KIND_COUNTERS, values, strict=False):
        setattr(c, f, v)
    c.draft_tokens, c.draft_accepted_tokens = values[DRAFT_AT], values[DRAFT_AT + 1]
    if durations:
        c.buckets, c.histogram_us = list(values[BUCKETS_AT]), values[HISTOGRAM_AT]
    if prompts:
        c.prompt_buckets, c.prompt_histogram_us = list(values[PROMPT_AT]), values[PROMPT_AT + 1]
    if generations:
        c.generation_buckets = list(values[GENERATION_AT])
        c.generation_histogram_us = values[GENERATION_AT + 1]


def parser_of(node: str, saved: dict[str, Any]) -> Parser:
    """The parser `parser_state` saved (the configured `slots` and `gone_us` are the caller's
    to set); ValueError (naming the field) on a state that does not fit."""
    check(PARSER, saved, f"parsers.{node}")
    return _built(node, saved)


def _built(node: str, saved: dict[str, Any]) -> Parser:
    """The parser of a checked state (at most MAX_INSTANCES instances, the last SPAWNED models)."""
    p = Parser(node, pid=saved["pid"])
    _take_context(p, saved)
    p.up, p.n_slots, p.second = saved["up"], saved["n_slots"], saved["second"]
    p.newest_pid, p.newest_since_us, p.last_us = (
        saved["newest_pid"],
        saved["newest_since_us"],
        saved["last_us"],
    )
    for pid, since_us, context, n_slots, second in saved["others"]:
        other = ServerContext(NO_BLOCK, {}, {}, {}, n_slots, since_us, second)
        _take_context(other, context)
        p.others[pid] = other
    p.seen = dict.fromkeys(saved["seen"])
    p.recent_totals = {(slot, task): tokens for slot, task, tokens in saved["recent_totals"]}
    for port, model, sub in saved["instances"][:MAX_INSTANCES]:
        instance = p.instances[port] = _built(node, sub)
        instance.model = model
    p.spawned = dict(saved["spawned"][-SPAWNED:])  # ([name, status] pairs)
    return p


def _take_context(s: Parser | ServerContext, saved: dict[str, Any]) -> None:
    """A saved context (checked) into a parser or an older PID's context."""
    fields = saved["block"]
    s.block = Block(*fields) if any(v is not None for v in fields) else NO_BLOCK
    s.pending_stops = {(slot, t): at for slot, t, at in saved["pending_stops"]}
    s.last_timed = dict(saved["last_timed"])  # ([slot, task] pairs)
    s.started = {(slot, t): at for slot, t, at in saved["started"]}
    s.task_reasons = dict(saved["marks"])  # ([task, reason] pairs)
    s.children = dict.fromkeys((slot, t) for slot, t in saved["children"])
