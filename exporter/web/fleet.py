"""What the status page and /api/status say of each node: its state, busy shares and problem.

Pure: it reads a StatusView (no clock, no I/O). The shares and the idle mark come from the
history's samples (accounting/history.py): a node's busy share over a window is the growth of
its busy seconds between the sample at the window's end (the newest: figures final up to it)
and the one a window before, divided by the window, as Prometheus reads the same counters.
The mark "idle while the others work" is the idle alert's own rule (accounting/idle.py),
firing on the same samples, so the page and SmLlmNodeIdle say the same. Both pages read the
same spans and steps of the history (`history_span`, `history_steps`) and of the window.

A node's state is one of STATES:
- `down`: its journal is not followed, or its llama-server is stopped;
- `busy`: a request in flight (a server that logs no launch lines shows none: it is `busy`
  while it worked at least idle.IDLE_BELOW of the last 5 minutes);
- `idle-while-others-work`: the idle alert fires for it;
- `asleep`: its llama-server sleeps (`--sleep-idle-seconds`: by design, so neither busy nor
  idle, and not one of "the others" the idle alert weighs);
- `idle`: none of these.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.accounting import idle
from exporter.accounting.figures import NodeSnapshot, Snapshot
from exporter.accounting.history import Sample
from exporter.accounting.lanes import Step
from exporter.base.kinds import Kinds
from exporter.base.records import LOST_REASON, Interval
from exporter.base.times import SECOND
from exporter.web.svg import duration

STATES = ("down", "idle-while-others-work", "busy", "asleep", "idle")  # (the order of attention)
SHORT_US, LONG_US = idle.WINDOW_US, 3600 * SECOND  # the two busy shares' windows


@dataclass(frozen=True)
class StatusView:
    """What the status page and /api/status show (the daemon takes it with each snapshot)."""

    now_us: int
    snapshot: Snapshot  # the last published one
    kinds: Kinds
    # per node, oldest first: its intervals of the window, or only the newest of them when
    # the window holds more than the page draws one by one (`in_window` says how many)
    recent: Mapping[str, Sequence[Interval]]
    in_flight: Mapping[str, Sequence[int]]  # per node, start times (us) of requests in flight
    errors: Mapping[str, str]  # per node, its source's last error ("" none)
    version: str
    samples: Sequence[Sample] = ()  # the history's, oldest first
    sample_nodes: Sequence[str] = ()  # the nodes of the samples' tuples, in order
    in_window: Mapping[str, int] | None = None  # per node, its intervals in the window
    window_us: int = 3600 * SECOND
    refresh_s: int = 10

    def window_count(self, node: str) -> int:
        """The node's intervals in the window (kept or not)."""
        if self.in_window is not None and node in self.in_window:
            return self.in_window[node]
        return len(self.recent.get(node, ()))


@dataclass(frozen=True)
class Row:
    """One node as the pages show it."""

    node: NodeSnapshot
    state: str  # one of STATES
    share_5m: float | None  # its busy share of the 5 min to the newest sample (None: not known)
    share_1h: float | None  # of the hour to it (Fleet.long_us: less while the history is young)
    idle_us: int | None  # how long since its last request ended (0 while one is in flight)
    problem: str  # what needs attention, in a sentence ("" none)
    error: str  # its source's last error, without its own name in front


@dataclass(frozen=True)
class Fleet:
    """Every node's Row (in the config's order) and what the header counts."""

    rows: tuple[Row, ...]
    until_us: int | None  # the newest sample's time: the shares are final up to it
    long_us: int  # the long share's window: LONG_US, or less while the history is younger
    busy: int
    idle_while_others_work: int
    sources_down: int
    servers_down: int
    asleep: int


def fleet(view: StatusView) -> Fleet:
    """The pages' figures of every node (module docstring)."""
    samples = {s.at_us: s for s in view.samples}
    last = view.samples[-1] if view.samples else None
    index = {n: i for i, n in enumerate(view.sample_nodes)}
    short = _shares(last, samples.get(last.at_us - SHORT_US) if last else None)
    first = _long_start(view.samples, samples)
    long = _shares(last, first)
    others = _others(last, short)
    rows = []
    for n in view.snapshot.nodes:
        i = index.get(n.name)
        k = i if n.up else None  # (a journal not followed: its shares are not known)
        s5 = None if short is None or k is None else short[k]
        s1 = None if long is None or k is None else long[k]
        fires = (
            last is not None and i is not None and idle.firing(last.idle_since_us[i], last.at_us)
        )
        state = _state(n, fires, s5)
        idle_us = _idle_us(view.now_us, n)
        error = _own_error(n.name, view.errors.get(n.name, ""))
        other = others.get(i) if i is not None else None
        rows.append(
            Row(n, state, s5, s1, idle_us, _problem(n, state, idle_us, other, error), error)
        )
    return Fleet(
        rows=tuple(rows),
        until_us=None if last is None else last.at_us,
        long_us=0 if last is None or first is None else last.at_us - first.at_us,
        busy=sum(1 for r in rows if r.state == "busy"),
        idle_while_others_work=sum(1 for r in rows if r.state == "idle-while-others-work"),
        asleep=sum(1 for r in rows if r.state == "asleep"),
        sources_down=sum(1 for r in rows if not r.node.up),
        servers_down=sum(1 for r in rows if r.node.up and r.node.server_up == 0),
    )


def attention_order(rows: Sequence[Row]) -> list[Row]:
    """The rows, those needing attention first (STATES' order), else in the config's order."""
    rank = {s: k for k, s in enumerate(STATES)}
    return sorted(rows, key=lambda r: rank[r.state])


def _long_start(ordered: Sequence[Sample], by_time: Mapping[int, Sample]) -> Sample | None:
    """The sample the long share starts at: LONG_US before the newest, or while the history
    is younger than that, its oldest (if SHORT_US old at least)."""
    if not ordered:
        return None
    last = ordered[-1]
    then = by_time.get(last.at_us - LONG_US)
    if then is not None:
        return then
    first = ordered[0]
    return first if last.at_us - first.at_us >= SHORT_US else None


def _shares(last: Sample | None, then: Sample | None) -> list[float] | None:
    if last is None or then is None:
        return None
    span = last.at_us - then.at_us
    return [(a - b) / span for a, b in zip(last.busy_us, then.busy_us, strict=True)]


def _others(last: Sample | None, short: list[float] | None) -> dict[int, tuple[int, float]]:
    """Per node index: how many other nodes are known, and their mean 5-minute share."""
    if last is None or short is None:
        return {}
    known = [i for i, k in enumerate(last.known) if k]
    total = sum(short[i] for i in known)
    return {
        i: (len(known) - 1, (total - short[i]) / (len(known) - 1)) for i in known if len(known) > 1
    }


def _state(n: NodeSnapshot, fires: bool, share_5m: float | None) -> str:
    if not n.up or n.server_up == 0:
        return "down"
    if n.in_flight:
        return "busy"
    if n.asleep:
        return "asleep"
    if fires:
        return "idle-while-others-work"
    if not n.start_lines and share_5m is not None and share_5m >= idle.IDLE_BELOW:
        return "busy"
    return "idle"


def _idle_us(now_us: int, n: NodeSnapshot) -> int | None:
    if n.in_flight:
        return 0
    return None if n.last_end_us is None else max(0, now_us - n.last_end_us)


def _problem(
    n: NodeSnapshot, state: str, idle_us: int | None, others: tuple[int, float] | None, error: str
) -> str:
    if not n.up:
        return "journal not followed" + (f": {error}" if error else "")
    if n.server_up == 0:
        return "llama-server stopped"
    if state == "idle-while-others-work" and others is not None:
        count, share = others
        since = "never worked" if idle_us is None else f"idle for {duration(idle_us)}"
        nodes = "other node" if count == 1 else f"{count} other nodes"
        return f"{since} while the {nodes} worked {100 * share:.0f}% of the last 5 min"
    return error


def _own_error(name: str, error: str) -> str:
    """The error without the node's name in front (the row names it already)."""
    for prefix in (f"{name}: ", f"node {name}: "):
        if error.startswith(prefix):
            return error[len(prefix) :]
    return error


# -- what both pages read of the history and the window -----------------------------------


def history_span(view: StatusView) -> tuple[Sample, Sample] | None:
    """The oldest sample within the window of the newest, and the newest."""
    if len(view.samples) < 2:
        return None
    last = view.samples[-1]
    first = next(s for s in view.samples if s.at_us >= last.at_us - view.window_us)
    return (first, last) if first is not last else None


def status_span(view: StatusView) -> tuple[int, int]:
    return view.now_us - max(SECOND, view.window_us), view.now_us


def in_window(iv: Interval, lo: int, hi: int) -> bool:
    """What a Window of [lo, hi] takes (lanes.Window)."""
    return (lo <= iv.end_us <= hi or iv.start_us < hi < iv.end_us) and iv.reason != LOST_REASON


def history_steps(samples: Sequence[Sample], lo: int) -> list[Step]:
    """The mean number of nodes busy between successive samples from `lo` on."""
    out: list[Step] = []
    kept = [s for s in samples if s.at_us >= lo]
    for a, b in itertools.pairwise(kept):
        width = b.at_us - a.at_us
        nodes = (b.total_busy_us - a.total_busy_us) / width
        if out and out[-1].nodes == nodes and out[-1].end_us == a.at_us:
            out[-1] = Step(out[-1].start_us, b.at_us, nodes)
        else:
            out.append(Step(a.at_us, b.at_us, nodes))
    return out
