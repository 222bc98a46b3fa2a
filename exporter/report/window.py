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
from exporter.compiled import switch
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
_compiled = switch.accounting  # (None: window_run_reference runs)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # (what the compiled window_run reads)


def window_run(
    recs: list[Record],
    start: int,
    since_us: int,
    until_us: int,
    counted: dict[int | None, list[int]],
) -> int:
    """How far recs[start:] are in the window (see `window_run_reference`); compiled where it
    is built."""
    if _compiled is not None:
        found: int = _compiled.window_run(
            recs, start, since_us, until_us, counted, Interval, Event, _PARSE_ERROR
        )
        return found
    return window_run_reference(recs, start, since_us, until_us, counted)


def window_run_reference(
    recs: Sequence[Record],
    start: int,
    since_us: int,
    until_us: int,
    counted: dict[int | None, list[int]],
) -> int:
    """The index of the first record of recs[start:] that is not plainly in the window, each
    timed interval before it adding its duration to `counted[tokens]`: an Interval that ends in
    [since_us, until_us], an Event in it that is no parse error. Anything else (another
    record, a time that is no int of 64 bits) ends the run, for the caller to judge. The
    specification of the compiled `window_run`."""
    for i in range(start, len(recs)):
        rec = recs[i]
        if type(rec) is Interval:
            end, reason = rec[I_END_US], rec[I_REASON]
            if not (_int64(end) and since_us <= end <= until_us and type(reason) is str):
                return i
            if reason:
                continue
            begin = rec[I_START_US]
            if not (_int64(begin) and INT64_MIN <= end - begin <= INT64_MAX):
                return i
            _note(counted, rec[I_TOKENS], end - begin)
        elif type(rec) is Event:
            t = rec[E_TIME_US]
            if not (_int64(t) and since_us <= t <= until_us) or rec[E_KIND] is _PARSE_ERROR:
                return i
        else:
            return i
    return len(recs)


def _note(counted: dict[int | None, list[int]], tokens: int | None, duration_us: int) -> None:
    """A timed request's duration, under its tokens (the kinds are told apart by them)."""
    durations = counted.get(tokens)
    if durations is None:
        counted[tokens] = [duration_us]
    else:
        durations.append(duration_us)


def _int64(v: object) -> bool:
    return type(v) is int and INT64_MIN <= v <= INT64_MAX


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
        self._counted: dict[int | None, list[int]] = {}  # tokens -> durations of those counted
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
        for tokens, taken in self._counted.items():
            durations[self.kinds.classify(tokens)] += taken
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
        accounting's batch path, the rest one by one; the timeline takes those it draws. (The
        runs are found compiled where that is built: `window_run`.)"""
        if self.timeline is not None:
            self.timeline.add_all(recs)
        since, until, counted = self.since_us, self.until_us, self._counted
        start = i = 0  # recs[start:i] are in the window, not yet added
        n = len(recs)
        while i < n:
            i = window_run(recs, i, since, until, counted)
            if i == n:
                break
            rec = recs[i]
            i += 1
            if self._in_window(rec):
                continue
            if start < i - 1:
                self.acc.add_all(recs[start : i - 1])
            self._add(rec)
            start = i
        if start < n:
            self.acc.add_all(recs[start:] if start else recs)

    def _in_window(self, rec: Record) -> bool:
        """Is the record one the window counts (a timed request's duration noted)?"""
        since, until = self.since_us, self.until_us
        if type(rec) is Interval:
            end = rec[I_END_US]
            if since <= end <= until:
                if not rec[I_REASON]:  # (a timed request: the kinds' durations)
                    _note(self._counted, rec[I_TOKENS], end - rec[I_START_US])
                return True
            return False
        if type(rec) is Draft:  # (its request's: in the window when that ended in it)
            return since <= rec.time_us <= until
        return since <= rec[E_TIME_US] <= until and rec[E_KIND] is not _PARSE_ERROR

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
