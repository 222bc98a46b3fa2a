"""Inline SVG charts and the labels the pages share: the histogram of nodes at once, the mix.

The busy bars of each node too. The bar charts here are `fluid`: drawn to any width, their
text in pixels. The timeline, the pages' largest chart, is timeline.py's, drawn on the
W/X0/X1 geometry (scaled to the width, its text with it).

Pure: each function turns what it is handed into markup (no clock, no I/O, no JavaScript).
Every text that comes from outside (node names, kind names) is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

from exporter.accounting.figures import Snapshot
from exporter.base.kinds import Kinds
from exporter.base.records import Interval
from exporter.base.times import SECOND

# SVG geometry, in user units: a chart is W wide, its plot from X0 to X1.
W, X0, X1 = 1000, 150.0, 985.0
PALETTE = ("#4e79a7", "#f28e2b", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#17becf")
STEP_FILL = "#6b6b9a"  # how many nodes were busy: the timeline's strip, the histogram's bars
IDLE_FILL = "#c9c9c9"  # wall time with no timed request running
MIX_FILL = "#7b4ea3"  # wall time with requests of several kinds running at once
FULL_FILL = "#ececec"  # a bar row's whole width: 100%
LONG_US = 2 * 3600 * SECOND  # from this window up, times are told in hours, below in minutes
ROW_H = 38  # a bar row: its label line, then its bar


def span(us: int, wall_us: int, unit: str = "") -> str:
    """A time as the charts of a window tell it: `1.8 h` from a 2 h window up, `54.4 min` below
    (the text report's minutes, to its precision); `unit="node-"` for summed node time."""
    s = us / SECOND
    return f"{s / 3600:.1f} {unit}h" if wall_us >= LONG_US else f"{s / 60:.1f} {unit}min"


def elapsed(us: int) -> str:
    """A time as the charts' labels tell it, in one unit across a chart's bars more often than
    not: `45 s` below 2 min, `12.2 min` below 2 h, `81.5 h` from there (no days: a week's bars
    read in hours, as the busy bars' do)."""
    s = us / SECOND
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def busy(nodes: Sequence[tuple[str, int]], since_us: int, until_us: int) -> str:
    """`<g class="busy">`: a bar per node (name, busy us), its busy share of [since, until],
    labelled with the share and the busy time. The share is the text report's `busy %`, computed
    as it is, so the label prints the same figure."""
    wall_us = until_us - since_us
    wall_s = until_us / SECOND - since_us / SECOND  # (as Report.wall_s)
    rows = []
    for i, (name, us) in enumerate(nodes):
        busy_s = us / SECOND
        share = busy_s / wall_s if wall_s > 0 else 0.0
        percent = 100 * busy_s / wall_s if wall_s > 0 else 0.0
        text = f"{percent:.1f}% · {span(us, wall_us)}"
        data = f'data-node="{escape(name)}" data-seconds="{busy_s!r}"'
        rows.append(_row(i * ROW_H, name, share, text, data, STEP_FILL))
    return fluid(
        len(nodes) * ROW_H, "busy share of each node", f'<g class="busy">{"".join(rows)}</g>'
    )


def histogram(concurrency_us: Sequence[int], wall_us: int) -> str:
    """`<g class="histogram">`: a bar per number of nodes working at once, its share of the
    wall time (the tallest bar: the largest share) and its time. Drawn to the width it is
    given: the bars in percent of it, the labels in pixels. Over the bars stand as many labels
    as their columns have room for (LABELS: on any screen, or on wide screens only, class
    `wide`); each bar's title tells its figures. Past 12 columns every few is numbered."""
    wall = max(1, wall_us)
    n = max(1, len(concurrency_us))
    col = 100 / n
    axis_top, top, height = 14, 50, 120
    base = top + height
    most = max(max(concurrency_us, default=0), 1)
    every = -(-n // 12)  # (a tick label every few columns where they are many)
    shares, times = _labels(n, "share"), _labels(n, "time")
    bars = []
    for k, us in enumerate(concurrency_us):
        share = us / wall
        h = height * us / most
        mid = f"{(k + 0.5) * col:.3f}%"
        bars.append(
            f'<rect class="bar" data-nodes="{k}" data-share="{share:.6f}" '
            f'data-seconds="{us / SECOND!r}" x="{(k + 0.15) * col:.3f}%" '
            f'y="{base - h:.1f}" width="{0.7 * col:.3f}%" height="{h:.1f}" '
            f'fill="{STEP_FILL}"><title>{k} nodes working: {100 * share:.1f}% of the wall time '
            f"({elapsed(us)})</title></rect>"
        )
        if shares is not None:
            bars.append(
                f'<text{shares} x="{mid}" y="{base - h - 5:.1f}" text-anchor="middle">'
                f"{100 * share:.1f}%</text>"
            )
        if times is not None:
            bars.append(
                f'<text{times} x="{mid}" y="{base - h - 20:.1f}" text-anchor="middle">'
                f"{elapsed(us)}</text>"
            )
        if k % every == 0:
            # (the last of many narrow columns is numbered from the chart's right edge in)
            x, anchor = ("100%", "end") if every > 1 and k == n - 1 else (mid, "middle")
            bars.append(
                f'<text class="tick" x="{x}" y="{base + 16}" text-anchor="{anchor}">{k}</text>'
            )
    axis = (
        f'<line x1="0" x2="100%" y1="{base}" y2="{base}" stroke="#999"/>'
        f'<line x1="0.5" x2="0.5" y1="{axis_top + 6}" y2="{base}" stroke="#999"/>'
        f'<text class="axis" x="6" y="{axis_top}">↑ share of wall time</text>'
        f'<text class="axis" x="50%" y="{base + 34}" text-anchor="middle">'
        "nodes working at once →</text>"
    )
    return fluid(
        base + 40, "nodes working at once", f'<g class="histogram">{axis}{"".join(bars)}</g>'
    )


# The most columns a histogram labels over its bars (share, time): on any screen (down to a
# phone's 400 px), then on wide screens only (its chart 760 px wide); at 13 px a share takes
# up to 45 px, a time (`119.9 min`) up to 70 px.
LABELS = {"share": (8, 16), "time": (4, 8)}


def _labels(columns: int, what: str) -> str | None:
    """The class attribute of a histogram's labels of `what` over its `columns` bars, or None
    where they have no room."""
    narrow, wide = LABELS[what]
    if columns > wide:
        return None
    classes = ["tick"] if what == "time" else []
    if columns > narrow:
        classes.append("wide")
    return f' class="{" ".join(classes)}"' if classes else ""


def mix(
    snap: Snapshot, kinds: Kinds, wall_us: int, calls: Mapping[str, tuple[int, int | None]]
) -> str:
    """`<g class="mix">`: under a heading each, the wall time by the set of kinds running, then
    the request (node) time of each kind; `calls` gives a kind's counted requests and their
    median (us). A wall-time bar is its kind's colour, IDLE_FILL for idle, MIX_FILL for several
    kinds at once; a request-time bar is its kind's."""
    wall = max(1, wall_us)
    colours = kind_colours(kinds)
    rows: list[str] = []
    y = _heading(rows, 0, "Wall time, by the kinds running")
    for label, us in snap.mix_us.items():
        if us or label == "idle":
            fill = IDLE_FILL if label == "idle" else colours.get(label, MIX_FILL)
            text = f"{100 * us / wall:.1f}% · {elapsed(us)}"
            rows.append(_row(y, label, us / wall, text, f'data-mix="{escape(label)}"', fill))
            y += ROW_H
    kind_us = {k: sum(n.kinds[k].request_us for n in snap.nodes) for k in snap.kind_names}
    total = max(1, sum(kind_us.values()))
    y = _heading(rows, y + 12, "Request time, by kind")
    for k, us in kind_us.items():
        count, med = calls.get(k, (0, None))
        text = f"{count} requests · {span(us, wall_us, 'node-')}"
        text += "" if med is None else f" · median {med / SECOND:.1f} s"
        rows.append(_row(y, k, us / total, text, f'data-kind="{escape(k)}"', colours[k]))
        y += ROW_H
    return fluid(y, "kind mix", f'<g class="mix">{"".join(rows)}</g>')


def _heading(rows: list[str], y: int, text: str) -> int:
    """A chart's group heading on its own line, at the left (the y below it)."""
    rows.append(f'<text class="heading" x="0" y="{y + 15}">{escape(text)}</text>')
    return y + 24


def _row(y: int, label: str, share: float, text: str, data: str, fill: str) -> str:
    """One bar row: its label at the left and its figures at the right, over a bar whose
    full width is 100% (its title: the label whole, and the figures)."""
    width = 100 * min(max(share, 0.0), 1.0)
    tip = f"<title>{escape(label)}: {escape(text)}</title>"
    return (
        f'<text class="label" x="0" y="{y + 13}">{escape(short(label, 24))}</text>'
        f'<text class="figure" x="100%" y="{y + 13}" text-anchor="end">{escape(text)}</text>'
        f'<rect class="full" x="0" y="{y + 18}" width="100%" height="13" fill="{FULL_FILL}"/>'
        f'<rect class="bar" {data} data-share="{share:.6f}" x="0" y="{y + 18}" '
        f'width="{width:.3f}%" height="13" fill="{fill}">{tip}</rect>'
    )


def fluid(height: float, label: str, inner: str) -> str:
    """An SVG drawn to the width it is given, `height` pixels high: no viewBox, so its text
    keeps its size in pixels at any width; x in percent of the width, y in pixels. (The base
    style's min-width for every svg is lifted by a page's own, as report_page.CSS does.)"""
    return (
        f'<svg class="fluid" width="100%" height="{height:.0f}" role="img" '
        f'aria-label="{label}">{inner}</svg>'
    )


def chart(height: float, label: str, inner: str, cls: str = "chart") -> str:
    return (
        f'<svg class="{cls}" viewBox="0 0 {W} {height:.0f}" '
        f'width="100%" role="img" aria-label="{label}">{inner}</svg>'
    )


# -- labels (the pages' too) -------------------------------------------------------------------


def kind_colours(kinds: Kinds) -> dict[str, str]:
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds.names)}


def kind_of(iv: Interval, kinds: Kinds) -> str:
    """A timed request's kind; "" for an occupancy without timing (module docstring)."""
    return kinds.classify(iv.tokens) if not iv.reason else ""


def short(text: str, most: int = 22) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}"


def when(us: int) -> str:
    """`2026-09-22 07:32:55 UTC`."""
    return datetime.fromtimestamp(us // SECOND, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(us: int) -> str:
    s = us / SECOND
    if abs(s) < 1:
        return f"{us / 1000:.0f} ms"
    for unit, size, limit in (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 172800)):
        if abs(s) < limit:
            return f"{s / size:.0f} {unit}" if unit == "s" else f"{s / size:.1f} {unit}"
    return f"{s / 86400:.1f} d"
