"""The timeline: a Window's lanes of request rects, its concurrency strip and time axis, as SVG.

"Timeline" names this chart, and only it, on the status page and in the report: what it draws
is a Window of accounting/lanes.py. Pure: each function turns what it is handed into markup (no
clock, no I/O, no JavaScript); every text that comes from outside is escaped.

The timeline (status page and report alike) holds one `<g class="lane" data-node=NAME>` a node
(in the Window's order). In it every finished interval of the window is a
`<rect class="request" data-kind data-outcome data-start data-end>`: data-start and data-end
are its real start and end (microseconds since the epoch, not clipped), while the rect is
clipped to the window and at least MIN_WIDTH wide. data-outcome is `timed`, `cancelled`,
`error` or `untimed` (lanes.OUTCOMES); data-kind is the kind its tokens give
(Kinds.classify) for a timed request and "" for the others, which hold a slot without a timing
block and so have no tokens and no kind (the accounting counts them busy "of no kind", and a
checkpoint writes that kind as "" too). On the status page a request in flight is a
`<rect class="in-flight" data-start>` from its start to now. Below the lanes,
`<g class="concurrency">` holds `<rect class="step" data-nodes>`: how many nodes were busy.

A binned Window (more intervals than it keeps exactly) draws instead, in each lane, a
`<rect class="bin" data-requests data-busy>` for every non-empty bin (the requests that ended
in it and the node's busy share of it, see accounting/lanes.py), and the strip the bins' steps.
The status page's binned timeline, made from the history's busy seconds, has no request
counts: its bins have no data-requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from exporter.accounting.lanes import Step, Window, outcome
from exporter.base.kinds import Kinds
from exporter.base.records import Interval
from exporter.base.times import SECOND
from exporter.web.svg import (
    PALETTE,
    STEP_FILL,
    X0,
    X1,
    chart,
    duration,
    kind_colours,
    kind_of,
    number,
    short,
    when,
)

LANE_H, BIN_LANE_H, LANE_GAP, CONC_H = 20, 28, 6, 42
ROW_H, MAX_ROWS = 8, 8  # a lane's row per slot
MIN_WIDTH = 1.2
OUTCOME_FILL = {"cancelled": "#a0a0a0", "error": "#e15759", "untimed": "#b07aa1"}
IN_FLIGHT_FILL, BIN_FILL = "#59a14f", "#2a9d8f"


@dataclass(frozen=True)
class _Axis:
    """A window's time axis: where a time falls on the plot (clamped to it)."""

    lo: int
    hi: int

    def x(self, t: int) -> float:
        scale = (X1 - X0) / (self.hi - self.lo)
        return X0 + (min(max(t, self.lo), self.hi) - self.lo) * scale

    def span(self, s: int, e: int) -> str:
        """The x and width of a rect from `s` to `e`: at least MIN_WIDTH, inside the plot."""
        x0, x1 = self.x(s), self.x(e)
        width = max(MIN_WIDTH, x1 - x0)
        return f'x="{min(x0, X1 - width):.1f}" width="{width:.1f}"'


def draw(
    w: Window,
    kinds: Kinds,
    steps: Sequence[Step],
    in_flight: Mapping[str, Sequence[int]],
    now_us: int | None,
    *,
    counted: bool = True,
) -> str:
    """The lanes, the concurrency strip and the time axis of a Window (module docstring). A
    lane of a node whose requests ran in several slots has a row per slot (up to MAX_ROWS).
    A binned Window whose bins hold no request counts (the status page's, of the history's
    busy seconds) is drawn with `counted` False."""
    axis = _Axis(w.since_us, max(w.until_us, w.since_us + 1))
    colours = kind_colours(kinds)
    tracks: list[str] = []
    lanes: list[str] = []
    y = 6
    cells = _bin_cells(axis, w) if w.binned else []
    for name in w.nodes:
        lane = w.lanes[name]
        rows = min(MAX_ROWS, 1 + max((max(0, iv.slot or 0) for iv in lane.kept), default=0))
        lane_h = BIN_LANE_H if w.binned else max(LANE_H, ROW_H * rows)
        tracks.append(f'<rect class="track" x="{X0}" y="{y}" width="{X1 - X0}" height="{lane_h}"/>')
        part = [
            f'<g class="lane" data-node="{escape(name)}"><text x="{X0 - 8}" '
            f'y="{y + lane_h / 2 + 4:.1f}" text-anchor="end">{escape(short(name, 20))}'
            f"<title>{escape(name)}</title></text>"
        ]
        if w.binned:
            part += _bins(cells, w, name, y, lane_h, counted)
        else:
            part += _requests(axis, lane.kept, name, colours, kinds, y, lane_h, rows)
        if now_us is not None:
            part += _in_flight(axis, in_flight.get(name, ()), name, now_us, y, lane_h)
        part.append(_right_label(name, y + min(lane_h, 20) / 2 + 4))
        lanes.append("".join(part) + "</g>")
        y += lane_h + LANE_GAP
    top = y + 6
    tracks.append(f'<rect class="track" x="{X0}" y="{top}" width="{X1 - X0}" height="{CONC_H}"/>')
    strip = _strip(axis, steps, len(w.nodes), top) + _right_label("nodes busy", top + 15)
    bottom = top + CONC_H
    grid = [
        f'<line x1="{axis.x(t):.1f}" x2="{axis.x(t):.1f}" y1="2" y2="{bottom + 3}" '
        f'stroke="#bbb" stroke-width="0.7"/><text class="tick" x="{axis.x(t):.1f}" '
        f'y="{bottom + 16}" text-anchor="middle">{label}</text>'
        for t, label in _ticks(axis.lo, axis.hi)
    ]
    grid.append(f'<text class="tick" x="{X0 - 30}" y="{bottom + 16}" text-anchor="end">UTC</text>')
    inner = (
        f'<g class="tracks">{"".join(tracks)}</g><g class="axis">{"".join(grid)}</g>'
        f"{''.join(lanes)}{strip}"
    )
    return chart(bottom + 24, "timeline", inner, "timeline")


def _right_label(text: str, y: float) -> str:
    """A lane's name again at the plot's right end: shown where the plot scrolls and opens at
    its end (the status page on a phone: `svg .rlabel`), hidden elsewhere."""
    return (
        f'<text class="rlabel" x="{X1 - 4}" y="{y:.1f}" text-anchor="end">'
        f"{escape(short(text, 20))}</text>"
    )


def _bin_cells(axis: _Axis, w: Window) -> list[tuple[int, int, str, str]]:
    """Each bin's start, end, x and width, and its words (the same in every lane)."""
    out = []
    for b in range(w.bins):
        s, e = w.bin_start(b), w.bin_end(b)
        out.append((s, e, axis.span(s, e), f"{when(s)} + {duration(e - s)}"))
    return out


def _bins(
    cells: Sequence[tuple[int, int, str, str]],
    w: Window,
    name: str,
    y: int,
    lane_h: int,
    counted: bool,
) -> list[str]:
    """A binned lane: a bar per non-empty bin, as high as the node's busy share of it (and,
    when `counted`, the requests that ended in it)."""
    lane = w.lanes[name]
    named = escape(name)
    out = []
    for b, (s, e, span, words) in enumerate(cells):
        busy_us = lane.busy_us[b]
        requests = lane.requests(b) if counted else 0
        if not requests and not busy_us:
            continue
        share = busy_us / max(1, e - s)
        h = max(1.5, lane_h * share)
        count = said = ended = ""
        if counted:
            count, said = f'data-requests="{requests}" ', f", {requests} requests"
            ended = ", ".join(f"{c[b]} {o}" for o, c in lane.ended.items() if c[b])
        out.append(
            f'<rect class="bin" {count}data-busy="{share:.4f}" data-start="{s}" '
            f'data-end="{e}" {span} y="{y + lane_h - h:.1f}" height="{h:.1f}">'
            f"<title>{named} {words}: busy {100 * share:.0f}%{said}"
            f"{' (' + ended + ')' if ended else ''}</title></rect>"
        )
    return out


def _requests(
    axis: _Axis,
    kept: Sequence[Interval],
    name: str,
    colours: Mapping[str, str],
    kinds: Kinds,
    y: int,
    lane_h: int,
    rows: int,
) -> list[str]:
    """An exact lane: a rect per finished interval, in the row of its slot."""
    row_h = lane_h / rows
    rects = []
    for iv in kept:
        kind, out = kind_of(iv, kinds), outcome(iv)
        fill = colours.get(kind, PALETTE[0]) if out == "timed" else OUTCOME_FILL[out]
        tokens = "" if iv.tokens is None else f", {iv.tokens} tokens"
        row = max(0, min(iv.slot or 0, rows - 1))  # (a slot id -1 logged: row 0)
        rects.append(
            f'<rect class="request" data-kind="{escape(kind)}" data-outcome="{out}" '
            f'data-start="{iv.start_us}" data-end="{iv.end_us}" '
            f'{axis.span(iv.start_us, iv.end_us)} y="{y + row * row_h:.1f}" '
            f'height="{row_h - (rows > 1):.1f}" fill="{fill}">'
            f"<title>{escape(name)}: {escape(kind or out)} ({out}), {when(iv.start_us)}"
            f", {duration(iv.duration_us)}{tokens}</title></rect>"
        )
    return rects


def _in_flight(
    axis: _Axis, starts: Sequence[int], name: str, now_us: int, y: int, lane_h: int
) -> list[str]:
    """The status page's requests in flight: a rect each, from its start to now."""
    return [
        f'<rect class="in-flight" data-start="{s}" {axis.span(s, now_us)} y="{y + 2}" '
        f'height="{lane_h - 4}" fill="{IN_FLIGHT_FILL}" fill-opacity="0.75" '
        f'stroke="#1b5e20"><title>{escape(name)}: in flight since {when(s)} '
        f"({duration(now_us - s)})</title></rect>"
        for s in sorted(starts)
    ]


def _strip(axis: _Axis, steps: Sequence[Step], nodes: int, top: int) -> str:
    """The concurrency strip: how many nodes were busy, step by step."""
    most = max((st.nodes for st in steps), default=0)
    strip = [
        f'<g class="concurrency" data-max="{number(most)}"><text x="{X0 - 8}" y="{top + 15}" '
        f'text-anchor="end">nodes busy</text><text class="tick" x="{X0 - 8}" y="{top + 31}" '
        f'text-anchor="end">max {most:.{0 if float(most).is_integer() else 2}f} of {nodes}'
        "</text>"
    ]
    for st in steps:
        if st.nodes > 0:
            h = CONC_H * st.nodes / max(1, nodes)
            strip.append(
                f'<rect class="step" data-nodes="{number(st.nodes)}" data-start="{st.start_us}" '
                f'data-end="{st.end_us}" {axis.span(st.start_us, st.end_us)} '
                f'y="{top + CONC_H - h:.1f}" height="{h:.1f}"/>'
            )
    strip.append("</g>")
    return "".join(strip)


def _ticks(lo: int, hi: int) -> list[tuple[int, str]]:
    """A few round times in [lo, hi] (UTC) and their labels."""
    span_s = (hi - lo) / SECOND
    steps = (1, 5, 10, 15, 30, 60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
    step = next((s for s in steps if span_s / s <= 8), 86400 * max(1, -(-int(span_s) // 691200)))
    if step < 60:
        fmt = "%H:%M:%S"
    elif step >= 86400:
        fmt = "%m-%d"
    else:
        fmt = "%H:%M" if span_s <= 86400 else "%m-%d %H:%M"
    first = -(-lo // (step * SECOND)) * step
    return [
        (t * SECOND, datetime.fromtimestamp(t, UTC).strftime(fmt))
        for t in range(first, hi // SECOND + 1, step)
    ]


def legend(kinds: Kinds, *, in_flight: bool, binned: bool) -> str:
    """The timeline's key (HTML): a colour per kind and outcome, or the bins', then the strip's."""
    if binned:
        items = [(BIN_FILL, "a node's busy share of the bin (bar height)")]
    else:
        items = [(c, k) for k, c in kind_colours(kinds).items()]
        items += [(c, f"{o} (no timing)") for o, c in OUTCOME_FILL.items()]
    if in_flight:
        items.append((IN_FLIGHT_FILL, "in flight"))
    items.append((STEP_FILL, "nodes busy at once" + (" (the bin's mean)" if binned else "")))
    spans = "".join(f'<span><i style="background:{c}"></i>{escape(t)}</span>' for c, t in items)
    return f"<div class=legend>{spans}</div>"
