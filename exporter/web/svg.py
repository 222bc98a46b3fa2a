"""Inline SVG charts: the timeline of lanes and request rects, the concurrency strip, the
histogram and the kind mix (with the legend, and the labels the pages share).

Pure: each function turns what it is handed into markup (no clock, no I/O, no JavaScript).
Every text that comes from outside (node names, kind names) is escaped.

The timeline (status page and report alike) holds one `<g class="lane" data-node=NAME>` a node
(in the Window's order). In it every finished interval of the window is a
`<rect class="request" data-kind data-outcome data-start data-end>`: data-start and data-end
are its real start and end (microseconds since the epoch, not clipped), while the rect is
clipped to the window and at least MIN_WIDTH wide. data-outcome is `timed`, `cancelled`,
`error` or `untimed` (timeline.OUTCOMES); data-kind is the kind its tokens give
(Kinds.classify) for a timed request and "" for the others, which hold a slot without a timing
block and so have no tokens and no kind (the accounting counts them busy "of no kind", and a
checkpoint writes that kind as "" too). On the status page a request in flight is a
`<rect class="in-flight" data-start>` from its start to now. Below the lanes,
`<g class="concurrency">` holds `<rect class="step" data-nodes>`: how many nodes were busy.

A binned Window (more intervals than it keeps exactly) draws instead, in each lane, a
`<rect class="bin" data-requests data-busy>` for every non-empty bin (the requests that ended
in it and the node's busy share of it, see timeline.py), and the strip the bins' steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

from exporter.accounting.accounting import SECOND, Snapshot
from exporter.accounting.lanes import Step, Window, outcome
from exporter.base.kinds import Kinds
from exporter.base.records import Interval

# SVG geometry, in user units: a chart is W wide, its plot from X0 to X1.
W, X0, X1 = 1000, 150.0, 985.0
LANE_H, BIN_LANE_H, LANE_GAP, CONC_H = 20, 28, 6, 42
ROW_H, MAX_ROWS = 8, 8  # a lane's row per slot
MIN_WIDTH = 1.2
PALETTE = ("#4e79a7", "#f28e2b", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#17becf")
OUTCOME_FILL = {"cancelled": "#a0a0a0", "error": "#e15759", "untimed": "#b07aa1"}
IN_FLIGHT_FILL, BIN_FILL, STEP_FILL = "#59a14f", "#2a9d8f", "#6b6b9a"


def timeline(
    w: Window,
    kinds: Kinds,
    steps: Sequence[Step],
    in_flight: Mapping[str, Sequence[int]],
    now_us: int | None,
) -> str:
    """The lanes, the concurrency strip and the time axis of a Window (module docstring). A
    lane of a node whose requests ran in several slots has a row per slot (up to MAX_ROWS)."""
    lo, hi = w.since_us, max(w.until_us, w.since_us + 1)
    scale = (X1 - X0) / (hi - lo)

    def x(t: int) -> float:
        return X0 + (min(max(t, lo), hi) - lo) * scale

    def span(s: int, e: int) -> str:
        x0, x1 = x(s), x(e)
        width = max(MIN_WIDTH, x1 - x0)
        return f'x="{min(x0, X1 - width):.1f}" width="{width:.1f}"'

    colours = _kind_colours(kinds)
    tracks: list[str] = []
    lanes: list[str] = []
    y = 6
    for name in w.nodes:
        lane = w.lanes[name]
        rows = min(MAX_ROWS, 1 + max((max(0, iv.slot or 0) for iv in lane.kept), default=0))
        lane_h = BIN_LANE_H if w.binned else max(LANE_H, ROW_H * rows)
        row_h = lane_h / rows
        tracks.append(f'<rect class="track" x="{X0}" y="{y}" width="{X1 - X0}" height="{lane_h}"/>')
        part = [
            f'<g class="lane" data-node="{escape(name)}"><text x="{X0 - 8}" '
            f'y="{y + lane_h / 2 + 4:.1f}" text-anchor="end">{escape(_short(name, 20))}'
            f"<title>{escape(name)}</title></text>"
        ]
        if w.binned:
            for b in range(w.bins):
                requests, busy_us = lane.requests(b), lane.busy_us[b]
                if not requests and not busy_us:
                    continue
                s, e = w.bin_start(b), w.bin_end(b)
                share = busy_us / max(1, e - s)
                h = max(1.5, lane_h * share)
                ended = ", ".join(f"{c[b]} {o}" for o, c in lane.ended.items() if c[b])
                part.append(
                    f'<rect class="bin" data-requests="{requests}" data-busy="{share:.4f}" '
                    f'data-start="{s}" data-end="{e}" {span(s, e)} y="{y + lane_h - h:.1f}" '
                    f'height="{h:.1f}"><title>{escape(name)} {when(s)} + '
                    f"{duration(e - s)}: busy {100 * share:.0f}%, {requests} requests"
                    f"{' (' + ended + ')' if ended else ''}</title></rect>"
                )
        else:
            for iv in lane.kept:
                kind, out = kind_of(iv, kinds), outcome(iv)
                fill = colours.get(kind, PALETTE[0]) if out == "timed" else OUTCOME_FILL[out]
                tokens = "" if iv.tokens is None else f", {iv.tokens} tokens"
                row = max(0, min(iv.slot or 0, rows - 1))  # (a slot id -1 logged: row 0)
                part.append(
                    f'<rect class="request" data-kind="{escape(kind)}" data-outcome="{out}" '
                    f'data-start="{iv.start_us}" data-end="{iv.end_us}" '
                    f'{span(iv.start_us, iv.end_us)} y="{y + row * row_h:.1f}" '
                    f'height="{row_h - (rows > 1):.1f}" fill="{fill}">'
                    f"<title>{escape(name)}: {escape(kind or out)} ({out}), {when(iv.start_us)}"
                    f", {duration(iv.duration_us)}{tokens}</title></rect>"
                )
        if now_us is not None:
            for s in sorted(in_flight.get(name, ())):
                part.append(
                    f'<rect class="in-flight" data-start="{s}" {span(s, now_us)} y="{y + 2}" '
                    f'height="{lane_h - 4}" fill="{IN_FLIGHT_FILL}" fill-opacity="0.75" '
                    f'stroke="#1b5e20"><title>{escape(name)}: in flight since {when(s)} '
                    f"({duration(now_us - s)})</title></rect>"
                )
        lanes.append("".join(part) + "</g>")
        y += lane_h + LANE_GAP
    top = y + 6
    n_nodes = max(1, len(w.nodes))
    most = max((st.nodes for st in steps), default=0)
    tracks.append(f'<rect class="track" x="{X0}" y="{top}" width="{X1 - X0}" height="{CONC_H}"/>')
    strip = [
        f'<g class="concurrency" data-max="{_num(most)}"><text x="{X0 - 8}" y="{top + 15}" '
        f'text-anchor="end">nodes busy</text><text class="tick" x="{X0 - 8}" y="{top + 31}" '
        f'text-anchor="end">max {most:.{0 if float(most).is_integer() else 2}f} of {len(w.nodes)}'
        "</text>"
    ]
    for st in steps:
        if st.nodes > 0:
            h = CONC_H * st.nodes / n_nodes
            strip.append(
                f'<rect class="step" data-nodes="{_num(st.nodes)}" data-start="{st.start_us}" '
                f'data-end="{st.end_us}" {span(st.start_us, st.end_us)} '
                f'y="{top + CONC_H - h:.1f}" height="{h:.1f}"/>'
            )
    strip.append("</g>")
    bottom = top + CONC_H
    grid = [
        f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="2" y2="{bottom + 3}" stroke="#bbb" '
        f'stroke-width="0.7"/><text class="tick" x="{x(t):.1f}" y="{bottom + 16}" '
        f'text-anchor="middle">{label}</text>'
        for t, label in _ticks(lo, hi)
    ]
    grid.append(f'<text class="tick" x="{X0 - 30}" y="{bottom + 16}" text-anchor="end">UTC</text>')
    inner = (
        f'<g class="tracks">{"".join(tracks)}</g><g class="axis">{"".join(grid)}</g>'
        f"{''.join(lanes)}{''.join(strip)}"
    )
    return _svg(bottom + 24, "timeline", inner, "timeline")


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
        items = [(c, k) for k, c in _kind_colours(kinds).items()]
        items += [(c, f"{o} (no timing)") for o, c in OUTCOME_FILL.items()]
    if in_flight:
        items.append((IN_FLIGHT_FILL, "in flight"))
    items.append((STEP_FILL, "nodes busy at once" + (" (the bin's mean)" if binned else "")))
    spans = "".join(f'<span><i style="background:{c}"></i>{escape(t)}</span>' for c, t in items)
    return f"<div class=legend>{spans}</div>"


def histogram(concurrency_us: Sequence[int], wall_us: int) -> str:
    """`<g class="histogram">`: a bar per number of nodes working at once, its share of the
    wall time (the tallest bar: the largest share)."""
    wall = max(1, wall_us)
    top, height = 34, 140
    step = (X1 - X0) / max(1, len(concurrency_us))
    most = max(max(concurrency_us, default=0), 1)
    bars = []
    for k, us in enumerate(concurrency_us):
        share = us / wall
        h = height * us / most
        mid = X0 + (k + 0.5) * step
        label = f"{100 * share:.1f}%" + (f" · {duration(us)}" if step >= 110 else "")
        bars.append(
            f'<rect class="bar" data-nodes="{k}" data-share="{share:.6f}" '
            f'data-seconds="{us / SECOND:g}" x="{mid - step * 0.35:.1f}" '
            f'y="{top + height - h:.1f}" width="{step * 0.7:.1f}" height="{h:.1f}" '
            f'fill="{STEP_FILL}"><title>{k} nodes working: {100 * share:.1f}% of the wall time '
            f"({duration(us)})</title></rect>"
            f'<text x="{mid:.1f}" y="{top + height - h - 5:.1f}" text-anchor="middle">'
            f"{label}</text>"
            f'<text class="tick" x="{mid:.1f}" y="{top + height + 16}" '
            f'text-anchor="middle">{k}</text>'
        )
    axis = (
        f'<line x1="{X0}" x2="{X1}" y1="{top + height}" y2="{top + height}" stroke="#999"/>'
        f'<text x="{X0 - 8}" y="{top + height + 16}" text-anchor="end">nodes at once</text>'
        f'<text x="{X0 - 8}" y="{top + height - 4}" text-anchor="end">share of wall time</text>'
    )
    return _svg(
        top + height + 26,
        "nodes working at once",
        f'<g class="histogram">{axis}{"".join(bars)}</g>',
    )


def mix(
    snap: Snapshot, kinds: Kinds, wall_us: int, calls: Mapping[str, tuple[int, int | None]]
) -> str:
    """`<g class="mix">`: the wall time by the set of kinds running, then the request (node)
    seconds of each kind; `calls` gives a kind's counted requests and their median (us)."""
    wall = max(1, wall_us)
    rows: list[str] = []
    y = 8
    rows.append(
        f'<text x="{X0 - 8}" y="{y + 10}" text-anchor="end" font-weight="600">wall time</text>'
    )
    for label, us in snap.mix_us.items():
        if us or label == "idle":
            y += 20
            rows.append(
                _bar_row(
                    y,
                    label,
                    us / wall,
                    f"{100 * us / wall:.1f}% · {duration(us)}",
                    f'data-mix="{escape(label)}"',
                )
            )
    kind_us = {k: sum(n.kinds[k].request_us for n in snap.nodes) for k in snap.kind_names}
    total = max(1, sum(kind_us.values()))
    y += 34
    rows.append(
        f'<text x="{X0 - 8}" y="{y + 10}" text-anchor="end" font-weight="600">request time</text>'
    )
    colours = _kind_colours(kinds)
    for k, us in kind_us.items():
        y += 20
        count, med = calls.get(k, (0, None))
        text = f"{count} requests · {us / SECOND / 60:.1f} node-min"
        text += "" if med is None else f" · median {med / SECOND:.1f} s"
        rows.append(_bar_row(y, k, us / total, text, f'data-kind="{escape(k)}"', colours[k]))
    return _svg(y + 24, "kind mix", f'<g class="mix">{"".join(rows)}</g>')


def _bar_row(y: int, label: str, share: float, text: str, data: str, fill: str = STEP_FILL) -> str:
    width = (X1 - X0 - 260) * share
    return (
        f'<text x="{X0 - 8}" y="{y + 10}" text-anchor="end">{escape(_short(label, 24))}</text>'
        f'<rect class="bar" {data} data-share="{share:.6f}" x="{X0}" y="{y}" '
        f'width="{max(width, 0.5):.1f}" height="13" fill="{fill}"/>'
        f'<text x="{X0 + width + 6:.1f}" y="{y + 10}">{escape(text)}</text>'
    )


def _svg(height: float, label: str, inner: str, cls: str = "chart") -> str:
    return (
        f'<svg class="{cls}" viewBox="0 0 {W} {height:.0f}" '
        f'width="100%" role="img" aria-label="{label}">{inner}</svg>'
    )


# -- labels (the pages' too) -------------------------------------------------------------------


def _kind_colours(kinds: Kinds) -> dict[str, str]:
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds.names)}


def kind_of(iv: Interval, kinds: Kinds) -> str:
    """A timed request's kind; "" for an occupancy without timing (module docstring)."""
    return kinds.classify(iv.tokens) if not iv.reason else ""


def _short(text: str, most: int = 22) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _num(v: float) -> str:
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
