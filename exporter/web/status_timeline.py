"""The status page's timeline: the last hour's lanes, exact or binned, and its strip.

Pure: it turns a StatusView (fleet.py) into markup (no clock, no I/O, no JavaScript). The
lanes are timeline.py's: a rect per interval of the nodes' recent rings while the hour holds
at most STATUS_MAX_RECTS of them and the fleet at most TIMELINE_LANES nodes; else bins of a
minute, each the growth of the node's busy seconds between two of the history's samples, of
the first TIMELINE_LANES nodes in the table's order. The strip is the history's mean number of
nodes busy per sample. What it draws is bounded whatever the fleet.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from html import escape

from exporter.accounting.lanes import Step, Window, ring_size
from exporter.web import timeline
from exporter.web.fleet import Fleet, StatusView, attention_order, history_steps, status_span
from exporter.web.svg import duration, when

STATUS_MAX_RECTS = 4000  # finished intervals the status page draws one by one, then bins
TIMELINE_LANES = 60  # nodes the timeline draws (those needing attention first)
BINNED = 60  # bins of a binned lane (a minute each over the hour)


def drawn_exactly(in_window: Mapping[str, int]) -> bool:
    """Whether the timeline of nodes holding these counts of intervals in the hour draws each
    interval (else bins): at most TIMELINE_LANES nodes and STATUS_MAX_RECTS intervals."""
    return len(in_window) <= TIMELINE_LANES and sum(in_window.values()) <= STATUS_MAX_RECTS


def timeline_html(view: StatusView, f: Fleet) -> str:
    """The timeline, its notes above and its legend below."""
    window, steps, drawn = _timeline(view, f)
    return (
        f"{_timeline_notes(view, window, drawn)}<div class='wrap now'>"
        f"{_draw(view, window, steps)}</div>"
        f"{timeline.legend(view.kinds, in_flight=not window.binned, binned=window.binned)}"
    )


def _timeline(view: StatusView, f: Fleet) -> tuple[Window, list[Step], list[str]]:
    """The timeline's Window (exact, of the recent intervals, or binned from the history),
    its strip's steps, and the nodes it draws."""
    picked = {r.node.name for r in attention_order(f.rows)[:TIMELINE_LANES]}
    drawn = [r.node.name for r in f.rows if r.node.name in picked]
    lo, hi = status_span(view)
    counts = {r.node.name: view.window_count(r.node.name) for r in f.rows}
    exact = drawn_exactly(counts) and all(len(view.recent.get(n, ())) >= counts[n] for n in drawn)
    if exact:
        window = Window(drawn, lo, hi, STATUS_MAX_RECTS)
        for name in drawn:
            window.add_all(view.recent.get(name, ()))
        return window, history_steps(view.samples, lo), drawn
    return _binned(view, drawn), history_steps(view.samples, lo), drawn


def _binned(view: StatusView, drawn: list[str]) -> Window:
    """A binned Window of the hour to the newest sample, its bins from the history: a bin's
    busy seconds are the growth of the node's counter between the samples at its edges (none
    where the history has no sample at an edge)."""
    last = view.samples[-1] if view.samples else None
    hi = last.at_us if last is not None else view.now_us
    lo = hi - view.window_us
    window = Window(drawn, lo, hi, 0, BINNED)
    window.binned = True
    index = {n: i for i, n in enumerate(view.sample_nodes)}
    at = {s.at_us: s for s in view.samples}
    edges = [at.get(window.bin_start(k)) for k in range(window.bins)] + [at.get(hi)]
    for k, (a, b) in enumerate(itertools.pairwise(edges)):
        if a is None or b is None:
            continue
        for name in drawn:
            i = index.get(name)
            if i is not None:
                window.lanes[name].busy_us[k] = b.busy_us[i] - a.busy_us[i]
    return window


def _timeline_notes(view: StatusView, window: Window, drawn: list[str]) -> str:
    notes = []
    if len(drawn) < len(view.snapshot.nodes):
        notes.append(
            f"{len(drawn)} of {len(view.snapshot.nodes)} nodes drawn: those listed first above."
        )
    if window.binned:
        notes.insert(
            0,
            f"The hour to {when(window.until_us)} (figures final up to then) in bins of "
            f"{duration(window.bin_us)}: a bar is the node's busy share of its bin, the strip "
            "below the mean number of nodes busy. (The hour holds more than "
            f"{STATUS_MAX_RECTS} intervals, or the fleet more than {TIMELINE_LANES} nodes.)",
        )
        return "".join(f"<p class=note>{escape(t)}</p>" for t in notes)
    notes += [
        f"only the last {len(view.recent[n])} intervals of {n} are kept: older ones are not drawn"
        for n in drawn
        if len(view.recent.get(n, ())) >= ring_size(len(view.recent))
        and view.recent[n][0].end_us > window.since_us
    ]
    return "".join(f"<p class=note>{escape(t)}</p>" for t in notes)


def _draw(view: StatusView, window: Window, steps: list[Step]) -> str:
    """The timeline; requests in flight drawn to now unless binned (from the history)."""
    if window.binned:
        return timeline.draw(window, view.kinds, steps, {}, None, counted=False)
    return timeline.draw(window, view.kinds, steps, view.in_flight, view.now_us)
