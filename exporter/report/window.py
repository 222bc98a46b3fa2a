"""The report's figures: nodes' Batches over a past window through fresh parsers and accounting.

Pure: it reads nothing itself (the sources' `window` readers hand it Batches). Requests count by
their end in [since, until], as the seed counts them. Busy, concurrency and mix seconds come from
every interval that overlaps the window, clipped to it, exactly. Parse errors are the lines that
looked like timing lines but did not parse, counted as the daemon counts them. The window's
lanes (`lanes.Window`: its intervals, or bins of them, for the HTML report) take the same
intervals: those counted, and those that only reach into the window from before its end; only a
Builder made with `timeline=True` (for the HTML report) builds them: the text and JSON
(`report/text.py`) print none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import Snapshot
from exporter.accounting.lanes import Window
from exporter.accounting.settings import Settings
from exporter.base.kinds import Kinds
from exporter.base.records import (
    E_KIND,
    E_TIME_US,
    I_END_US,
    I_REASON,
    I_START_US,
    I_TOKENS,
    Batch,
    Draft,
    Event,
    EventKind,
    Interval,
    Record,
)
from exporter.base.times import SECOND
from exporter.parse.parser import Parser
from exporter.startup.llama import Startup


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
        settings: Settings,
        since_us: int,
        until_us: int,
        *,
        timeline: bool = False,
    ) -> None:
        self.kinds, self.since_us, self.until_us = settings.kinds, since_us, until_us
        self.max_request_us = max_request_us = settings.max_request_us
        self._startups: list[Startup] = []  # (every one that ended, as it ended)
        self._read_us: dict[str, int] = {}  # per node, the newest journal time read
        self.acc = Accounting(list(nodes), settings, origin_us=since_us, startups=self._startups)
        slots = settings.slots
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
                end = rec[I_END_US]
                if since <= end <= until:
                    run.append(rec)
                    if not rec[I_REASON]:  # (a timed request: the kinds' durations)
                        counted.append((rec[I_TOKENS], end - rec[I_START_US]))
                    continue
            elif type(rec) is Draft:  # (its request's: in the window when that ended in it)
                if since <= rec.time_us <= until:
                    run.append(rec)
                    continue
            elif since <= rec[E_TIME_US] <= until and rec[E_KIND] is not _PARSE_ERROR:
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
        if type(rec) is not Event:  # (a draft line outside: its request's too)
            return
        if rec.kind is _PHASE or rec.kind is _DOWN:  # (a start-up may end after the window)
            self.acc.add_startup(rec)
        elif rec.kind is _PARSE_ERROR:
            self.acc.add(rec)
            kept = self.errors[rec.node]
            if len(kept) < ERRORS_KEPT:
                kept.append(rec.detail)


def build(
    batches: Mapping[str, Iterable[Batch]],
    settings: Settings,
    since_us: int,
    until_us: int,
    *,
    timeline: bool = False,
) -> Report:
    """The report of every node's Batches."""
    builder = Builder(list(batches), settings, since_us, until_us, timeline=timeline)
    for node_batches in batches.values():
        for batch in node_batches:
            builder.add(batch)
    return builder.finish()
