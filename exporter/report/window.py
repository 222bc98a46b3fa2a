"""One-shot report: nodes' Batches over a past window -> fresh accounting -> the seed's tables.

Pure: it reads nothing itself (the sources' `window` readers hand it Batches). Requests count by
their end in [since, until], as the seed counts them. Busy, concurrency and mix seconds come from
every interval that overlaps the window, clipped to it, exactly. Parse errors are the lines that
looked like timing lines but did not parse, counted as the daemon counts them. The window's
timeline (`timeline.Window`: its intervals, or bins of them, for the HTML report) takes the
same intervals: those counted, and those that only reach into the window from before its end;
only a Builder made with `timeline=True` (for the HTML report) builds one: the text and JSON
print none.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.accounting.accounting import SECOND, Accounting, Snapshot
from exporter.accounting.lanes import Window
from exporter.base.kinds import Kinds
from exporter.base.records import REASONS, Batch, Event, EventKind, Interval, Record
from exporter.parse.parser import DEFAULT_SLOTS, Parser
from exporter.startup.llama import Startup

# Column labels the seed prints for its two kinds.
_SEED_LABELS = {"extraction": "extract", "reconcile": "reconcile"}


@dataclass
class Report:
    """Everything the report prints: the accounting's figures plus each kind's durations."""

    since_us: int
    until_us: int
    snapshot: Snapshot
    kinds: Kinds
    timeline: Window | None  # what the window draws (the HTML report); None: not built
    durations_us: dict[str, list[int]] = field(default_factory=dict)  # kind -> counted requests
    errors: dict[str, list[str]] = field(default_factory=dict)  # node -> the first few, named
    # the llama-server start-ups that began in the window, in order of their start (those not
    # done by the end of what was read last, as they were then)
    startups: list[Startup] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return self.until_us / SECOND - self.since_us / SECOND


_PARSE_ERROR, _PHASE, _DOWN = EventKind.PARSE_ERROR, EventKind.PHASE, EventKind.SERVER_DOWN
ERRORS_KEPT = 5  # parse errors named per node (all are counted)


class Builder:
    """Takes every node's Batches (in any order across nodes, in order per node) and makes the
    report of [since_us, until_us]; with `timeline=True` its report has the window's timeline
    too (else None)."""

    def __init__(
        self,
        nodes: Sequence[str],
        kinds: Kinds,
        since_us: int,
        until_us: int,
        max_request_us: int = 600 * SECOND,
        slots: int = DEFAULT_SLOTS,
        *,
        timeline: bool = False,
    ) -> None:
        self.kinds, self.since_us, self.until_us = kinds, since_us, until_us
        self.max_request_us = max_request_us
        self._startups: list[Startup] = []  # (every one that ended, as it ended)
        self._read_us: dict[str, int] = {}  # per node, the newest journal time read
        self.acc = Accounting(
            list(nodes),
            kinds,
            origin_us=since_us,
            max_request_us=max_request_us,
            startups=self._startups,
        )
        self.parsers = {n: Parser(n, slots=slots, gone_us=max_request_us) for n in nodes}
        self._counted: list[tuple[int | None, int]] = []  # (tokens, duration) of each counted
        self.errors: dict[str, list[str]] = {n: [] for n in nodes}
        self.timeline = Window(nodes, since_us, until_us) if timeline else None

    def add(self, batch: Batch) -> None:
        node = batch.node
        if batch.newest_us is not None and batch.newest_us > self._read_us.get(node, 0):
            self._read_us[node] = batch.newest_us
        for error in batch.errors:  # an unreadable line still counts, as a parse error
            self._add(Event(node, self.since_us, _PARSE_ERROR, detail=error))
        self._add_all(self.parsers[node].feed_all(batch.lines))

    def finish(self) -> Report:
        for parser in self.parsers.values():
            self._add_all(parser.flush(self.until_us + self.max_request_us))
        self.acc.advance_to(self.until_us)
        durations: dict[str, list[int]] = {k: [] for k in self.kinds.names}
        kind_of: dict[int | None, list[int]] = {}
        for tokens, duration_us in self._counted:
            into = kind_of.get(tokens)
            if into is None:
                into = kind_of[tokens] = durations[self.kinds.classify(tokens)]
            into.append(duration_us)
        snap = self.acc.snapshot()
        return Report(
            self.since_us,
            self.until_us,
            snap,
            self.kinds,
            self.timeline,
            durations,
            self.errors,
            self._window_startups(),
        )

    def _window_startups(self) -> list[Startup]:
        ended = list(self._startups)
        for node, ns in self.acc.nodes.items():
            still = ns.startups.in_progress(self._read_us.get(node, 0))
            if still is not None:  # (not done by the end of what was read: as it stood)
                ended.append(still)
        window = [s for s in ended if self.since_us <= s.start_us <= self.until_us]
        return sorted(window, key=lambda s: (s.start_us, s.node))

    def _add_all(self, recs: list[Record]) -> None:
        """The records, in order: those in the window (nearly all) in runs through the
        accounting's batch path, the rest one by one; the timeline takes those it draws."""
        if self.timeline is not None:
            self.timeline.add_all(recs)
        since, until = self.since_us, self.until_us
        counted = self._counted
        run: list[Record] = []
        for rec in recs:
            if type(rec) is Interval:
                end = rec[2]
                if since <= end <= until:
                    run.append(rec)
                    if not rec[11]:  # (a timed request: the kinds' durations)
                        counted.append((rec[3], end - rec[1]))
                    continue
            elif since <= rec[1] <= until and rec[2] is not _PARSE_ERROR:
                run.append(rec)
                continue
            if run:
                self.acc.add_all(run)
                run = []
            self._add(rec)
        if run:
            self.acc.add_all(run)

    def _add(self, rec: Record) -> None:
        """One record outside the window: an interval that ends after it is placed on the
        timeline only (clipped), an earlier one dropped; a parse error counts wherever its
        time is (however far off), any other event only inside."""
        if type(rec) is Interval:
            if rec.end_us > self.until_us:
                self.acc.add(rec, count=False)
            return
        assert isinstance(rec, Event)
        if rec.kind is _PHASE or rec.kind is _DOWN:  # (a start-up may end after the window)
            self.acc.add_startup(rec)
        elif rec.kind is _PARSE_ERROR:
            self.acc.add(rec)
            kept = self.errors[rec.node]
            if len(kept) < ERRORS_KEPT:
                kept.append(rec.detail)


def build(
    batches: Mapping[str, Iterable[Batch]],
    kinds: Kinds,
    since_us: int,
    until_us: int,
    max_request_us: int = 600 * SECOND,
    *,
    timeline: bool = False,
) -> Report:
    """The report of every node's Batches."""
    builder = Builder(list(batches), kinds, since_us, until_us, max_request_us, timeline=timeline)
    for node_batches in batches.values():
        for batch in node_batches:
            builder.add(batch)
    return builder.finish()


def median_us(durations: Sequence[int]) -> int | None:
    """The upper middle of the sorted durations, as the seed takes it."""
    return sorted(durations)[len(durations) // 2] if durations else None


def to_json(r: Report) -> dict[str, Any]:
    snap = r.snapshot
    nodes = {}
    for n in snap.nodes:
        nodes[n.name] = {
            "requests": sum(c.requests for c in n.kinds.values()),
            "kinds": {k: c.requests for k, c in n.kinds.items()},
            "busy_seconds": n.busy_us / SECOND,
            "tokens": sum(c.tokens for c in n.kinds.values()),
            "slot_busy_seconds": n.slot_busy_us / SECOND,
            "slots": n.slots,
            "server_up": n.server_up,
            "untimed": {
                reason: {"requests": count, "seconds": us / SECOND}
                for reason, (count, us) in n.untimed.items()
            },
        }
        if n.models:
            nodes[n.name]["models"] = {
                m: {"requests": k, "request_seconds": us / SECOND, "tokens": t}
                for m, (k, us, t) in n.models.items()
            }
    kinds = {}
    for k in snap.kind_names:
        med = median_us(r.durations_us[k])
        kinds[k] = {
            "requests": sum(n.kinds[k].requests for n in snap.nodes),
            "request_seconds": sum(n.kinds[k].request_us for n in snap.nodes) / SECOND,
            "median_seconds": None if med is None else med / SECOND,
        }
    total_us = sum(n.busy_us for n in snap.nodes)
    return {
        "since": r.since_us / SECOND,
        "until": r.until_us / SECOND,
        "window_seconds": r.wall_s,
        "nodes": nodes,
        "concurrency_seconds": {str(k): v / SECOND for k, v in enumerate(snap.concurrency_us)},
        "mix_seconds": {m: v / SECOND for m, v in snap.mix_us.items()},
        "kinds": kinds,
        "total_node_seconds": total_us / SECOND,
        "ideal_seconds": total_us / SECOND / max(1, len(snap.nodes)),
        "parse_errors": {n.name: n.parse_errors for n in snap.nodes},
    }


def to_text(r: Report) -> str:
    """The seed script's tables, line for line, with exact figures."""
    snap = r.snapshot
    wall = r.wall_s
    kinds = snap.kind_names
    width = max([5, *(len(n.name) for n in snap.nodes)])
    out = [f"window {wall / 60:.1f} min", ""]
    head = "  " + "node".ljust(width) + "   requests"
    widths = {k: max(8, len(_SEED_LABELS.get(k, k)) + 1) for k in kinds}
    for k in kinds:
        head += " " + _SEED_LABELS.get(k, k).rjust(widths[k])
    out.append(head + "  busy time   busy %")
    for n in snap.nodes:
        row = f"  {n.name:<{width}}  {sum(c.requests for c in n.kinds.values()):8d}"
        for k in kinds:
            row += f" {n.kinds[k].requests:{widths[k]}d}"
        busy = n.busy_us / SECOND
        out.append(row + f" {busy / 60:7.1f} min {100 * busy / wall:7.1f}%")

    out += ["", "  nodes working at once    share of wall time"]
    for busy_nodes, v_us in enumerate(snap.concurrency_us):
        v = v_us / SECOND
        bar = "#" * round(40 * v / wall)
        out.append(
            f"        {busy_nodes}                {100 * v / wall:5.1f}%  {v / 60:5.1f} min  {bar}"
        )

    out.append("")
    label_w = max(len(k) for k in kinds) + 1
    for i, k in enumerate(kinds):
        calls = r.durations_us[k]
        secs = sum(n.kinds[k].request_us for n in snap.nodes) / SECOND
        med = median_us(calls)
        if med is not None:
            out.append(
                f"  {k + ':':<{label_w}} {len(calls)} calls, {secs / 60:.1f} node-min, "
                f"median {med / SECOND:.1f} s"
            )
        elif i == 0:
            out.append(f"  {k + ':':<{label_w}} no calls in the window")
    for k in kinds[1:]:
        out.append(f"  wall time with only {k} running: {snap.mix_us[k] / SECOND / 60:.1f} min")

    untimed = _untimed_line(snap)
    if untimed:
        out.append(untimed)

    total = sum(n.busy_us for n in snap.nodes) / SECOND
    count = len(snap.nodes)
    ideal = total / max(1, count)
    out += [
        "",
        f"  total node-work {total / 60:.1f} node-min; "
        f"spread perfectly over {count} nodes that is {ideal / 60:.1f} min "
        f"against {wall / 60:.1f} min actual",
    ]
    return "\n".join(out) + "\n"


def _untimed_line(snap: Snapshot) -> str:
    """Slot occupancies without a timing block, by reason, when there were any (the seed's
    data has none: its lines stay as they were)."""
    parts = []
    for reason in REASONS:
        count = sum(n.untimed[reason][0] for n in snap.nodes)
        if count:
            us = sum(n.untimed[reason][1] for n in snap.nodes)
            parts.append(f"{reason} {count} ({us / SECOND / 60:.1f} node-min)")
    return "  untimed occupancy: " + ", ".join(parts) if parts else ""


def render(r: Report, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(to_json(r), indent=2) + "\n"
    return to_text(r)
