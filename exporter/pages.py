"""The status page, /api/status and the HTML report: server-rendered HTML with inline SVG.

Pure: each function turns what it is handed into a document (no clock, no I/O, no JavaScript).
Every text that comes from outside (node names, errors, kind names) is escaped.

The timeline (status page and report alike) is an SVG, one `<g class="lane" data-node=NAME>`
a node (in the snapshot's order). In it every finished interval of the window is a
`<rect class="request" data-kind data-outcome data-start data-end>`: data-start and data-end
are its real start and end (microseconds since the epoch, not clipped), while the rect is
clipped to the window and at least MIN_WIDTH wide. data-outcome is `timed`, `cancelled`,
`error` or `untimed` (timeline.OUTCOMES); data-kind is the kind its tokens give
(Kinds.classify) for a timed request and "" for the others, which hold a slot without a timing
block and so have no tokens and no kind (the accounting counts them busy "of no kind", and a
checkpoint writes that kind as "" too). On the status page a request in flight is a
`<rect class="in-flight" data-start>` from its start to now. Below the lanes,
`<g class="concurrency">` holds `<rect class="step" data-nodes>`: how many nodes were busy.

When a window holds more intervals than its Window keeps exactly (timeline.MAX_RECTS; the
status page: STATUS_MAX_RECTS), each lane shows instead a `<rect class="bin" data-requests
data-busy>` for every non-empty bin (the requests that ended in it and the node's busy share of
it, see timeline.py), the page says so and gives the bin's width, and the concurrency strip
shows each bin's mean number of nodes busy. A page's size is then bounded by the number of
nodes times the bins, whatever the window holds.

/api/status (status_json) holds the status page's data; every time in it is a float of seconds
since the epoch and every duration a float of seconds (as the report's JSON):

    {"version", "generated_at", "watermark", "window": {"start", "end", "seconds"},
     "kinds": [...], "nodes": [{"name", "busy", "slots", "slots_in_use", "in_flight",
       "oldest_in_flight_age_seconds", "in_flight_starts": [...], "last_end", "followed",
       "lag_seconds", "last_error", "server_up", "requests_kept",
       "requests": [{"start", "end", "kind", "outcome", "tokens"}]}],
     "concurrency": [{"start", "end", "nodes"}]}

`requests` are the node's intervals of the window the status page draws ("kind" "" as above;
null values where not known), `concurrency` the exact steps of how many nodes were busy
(requests in flight included), covering the window.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from exporter.accounting import SECOND, NodeSnapshot, Snapshot
from exporter.kinds import Kinds
from exporter.logline import LOST_REASON, Interval
from exporter.report import Report, median_us, to_text
from exporter.timeline import (
    RING_SIZE,
    Step,
    Window,
    binned_steps,
    concurrency,
    outcome,
)

STATUS_MAX_RECTS = 4000  # finished intervals the status page draws one by one, then bins
MIN_SVG_PX = 900  # narrower screens scroll the timeline sideways (its labels stay readable)

# SVG geometry, in user units: the timeline is W wide, its plot from X0 to X1.
W, X0, X1 = 1000, 150.0, 985.0
LANE_H, BIN_LANE_H, LANE_GAP, CONC_H = 20, 28, 6, 42
ROW_H, MAX_ROWS = 8, 8  # a lane's row per slot
MIN_WIDTH = 1.2
PALETTE = ("#4e79a7", "#f28e2b", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#17becf")
OUTCOME_FILL = {"cancelled": "#a0a0a0", "error": "#e15759", "untimed": "#b07aa1"}
IN_FLIGHT_FILL, BIN_FILL, STEP_FILL = "#59a14f", "#2a9d8f", "#6b6b9a"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1em;color:#222}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .4em}
.meta{color:#555;margin:.2em 0}.wrap{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;white-space:nowrap}
th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left}
th{background:#f3f3f3;font-weight:600}td.num{text-align:right}
.busy{color:#2e7d32;font-weight:600}.idle{color:#777}.bad{color:#c62828}
.err{white-space:normal;max-width:28em;color:#c62828}
svg{display:block;width:100%;min-width:MINpx;max-width:1600px;height:auto}
svg text{font:12px system-ui,sans-serif;fill:#333}svg .tick{fill:#666}
.legend{display:flex;flex-wrap:wrap;gap:.3em 1.2em;margin:.4em 0;color:#444}
.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}
pre{background:#f7f7f7;padding:.8em;overflow-x:auto;font-size:13px}
.note{background:#fff8e1;padding:.3em .6em;border-left:3px solid #f9a825}
svg .track{fill:#f1f1f1}svg .bin{fill:BIN}svg .step{fill:STEP}
"""
CSS = CSS.replace("MIN", str(MIN_SVG_PX)).replace("BIN", BIN_FILL).replace("STEP", STEP_FILL)


@dataclass(frozen=True)
class StatusView:
    """What the status page and /api/status show (the daemon takes it with each snapshot)."""

    now_us: int
    snapshot: Snapshot  # the last published one
    kinds: Kinds
    recent: Mapping[str, Sequence[Interval]]  # per node, oldest first (Recent.copy())
    in_flight: Mapping[str, Sequence[int]]  # per node, start times (us) of requests in flight
    errors: Mapping[str, str]  # per node, its source's last error ("" none)
    version: str
    window_us: int = 3600 * SECOND
    refresh_s: int = 10


# -- the status page -------------------------------------------------------------------------


def status_html(view: StatusView) -> bytes:
    """`/`: the table of nodes and the last hour's timeline; refreshes itself, no script."""
    window, steps = _status_window(view)
    snap, now = view.snapshot, view.now_us
    rows = "".join(_status_row(n, view) for n in snap.nodes)
    busy = sum(1 for n in snap.nodes if n.in_flight)
    notes = [
        f"only the last {len(view.recent[n])} intervals of {n} are kept: older ones are not drawn"
        for n in window.nodes
        if len(view.recent.get(n, ())) >= RING_SIZE and view.recent[n][0].end_us > window.since_us
    ]
    body = (
        f"<h1>sm-llm-exporter</h1><p class=meta>{busy} of {len(snap.nodes)} nodes busy · "
        f"generated {_when(now)} · figures final up to {_when(snap.watermark_us)} · "
        f"refreshes every {view.refresh_s} s</p>"
        "<div class=wrap><table><thead><tr><th>node</th><th>now</th><th>slots in use</th>"
        "<th>in flight (oldest)</th><th>last request end</th><th>journal</th><th>lag</th>"
        f"<th>server</th><th>last error</th></tr></thead><tbody>{rows}</tbody></table></div>"
        f"<h2>Last {_duration(view.window_us)}</h2>"
        f"{_binned_note(window)}{''.join(f'<p class=note>{escape(t)}</p>' for t in notes)}"
        f"<div class=wrap>{_timeline(window, view.kinds, steps, view.in_flight, now)}</div>"
        f"{_legend(view.kinds, in_flight=True, binned=window.binned)}"
        '<p class=meta><a href="metrics">/metrics</a> · <a href="api/status">/api/status</a>'
        f" · sm-llm-exporter {escape(view.version)}</p>"
    )
    head = f'<meta http-equiv="refresh" content="{int(view.refresh_s)}">'
    return _document("sm-llm-exporter status", head, body).encode()


def status_json(view: StatusView) -> bytes:
    """`/api/status`: the status page's data (the module docstring gives its form)."""
    lo, hi = _status_span(view)
    nodes = []
    for n in view.snapshot.nodes:
        reqs = [iv for iv in view.recent.get(n.name, ()) if _in_window(iv, lo, hi)]
        starts = sorted(view.in_flight.get(n.name, ()))
        nodes.append(
            {
                "name": n.name,
                "busy": n.in_flight > 0,
                "slots": n.slots,
                "slots_in_use": n.in_flight,
                "in_flight": n.in_flight,
                "oldest_in_flight_age_seconds": _age_s(view.now_us, n.oldest_in_flight_us),
                "in_flight_starts": [s / SECOND for s in starts],
                "last_end": None if n.last_end_us is None else n.last_end_us / SECOND,
                "followed": n.up,
                "lag_seconds": n.lag_us / SECOND,
                "last_error": view.errors.get(n.name, ""),
                "server_up": n.server_up,
                "requests_kept": len(view.recent.get(n.name, ())),
                "requests": [
                    {
                        "start": iv.start_us / SECOND,
                        "end": iv.end_us / SECOND,
                        "kind": _kind(iv, view.kinds),
                        "outcome": outcome(iv),
                        "tokens": iv.tokens,
                    }
                    for iv in reqs
                ],
            }
        )
    data = {
        "version": view.version,
        "generated_at": view.now_us / SECOND,
        "watermark": view.snapshot.watermark_us / SECOND,
        "window": {"start": lo / SECOND, "end": hi / SECOND, "seconds": (hi - lo) / SECOND},
        "kinds": list(view.kinds.names),
        "nodes": nodes,
        "concurrency": [
            {"start": s.start_us / SECOND, "end": s.end_us / SECOND, "nodes": s.nodes}
            for s in _status_steps(view, lo, hi)
        ],
    }
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _status_window(view: StatusView) -> tuple[Window, list[Step]]:
    """The last `window_us` as a Window of the recent intervals, and its concurrency steps
    (requests in flight included; per bin when the window is binned)."""
    lo, hi = _status_span(view)
    window = Window([n.name for n in view.snapshot.nodes], lo, hi, STATUS_MAX_RECTS)
    for name in window.nodes:
        window.add_all(view.recent.get(name, ()))
    steps = _status_steps(view, lo, hi)
    return window, binned_steps(steps, window) if window.binned else steps


def _status_span(view: StatusView) -> tuple[int, int]:
    return view.now_us - max(SECOND, view.window_us), view.now_us


def _status_steps(view: StatusView, lo: int, hi: int) -> list[Step]:
    spans = [
        [(iv.start_us, iv.end_us) for iv in view.recent.get(n.name, ()) if _in_window(iv, lo, hi)]
        + [(s, hi) for s in view.in_flight.get(n.name, ())]
        for n in view.snapshot.nodes
    ]
    return concurrency(spans, lo, hi)


def _in_window(iv: Interval, lo: int, hi: int) -> bool:
    """What a Window of [lo, hi] takes (timeline.Window)."""
    return (lo <= iv.end_us <= hi or iv.start_us < hi < iv.end_us) and iv.reason != LOST_REASON


def _status_row(n: NodeSnapshot, view: StatusView) -> str:
    now = view.now_us
    name = escape(n.name)
    state = "<td class=busy>busy</td>" if n.in_flight else "<td class=idle>idle</td>"
    slots = f"{n.in_flight} / {'?' if n.slots is None else n.slots}"
    oldest = "" if n.oldest_in_flight_us is None else f" ({_duration(now - n.oldest_in_flight_us)})"
    last = (
        "never" if n.last_end_us is None else f"{_when(n.last_end_us)} ({_ago(now, n.last_end_us)})"
    )
    journal = "followed" if n.up else "<span class=bad>not followed</span>"
    server = {1: "up", 0: "<span class=bad>down</span>", None: "unknown"}.get(n.server_up, "?")
    error = escape(view.errors.get(n.name, ""))
    return (
        f"<tr><td>{name}</td>{state}<td class=num>{slots}</td>"
        f"<td class=num>{n.in_flight}{oldest}</td><td>{last}</td><td>{journal}</td>"
        f"<td class=num>{_duration(n.lag_us)}</td><td>{server}</td><td class=err>{error}</td></tr>"
    )


# -- the report ----------------------------------------------------------------------------------


def report_html(r: Report) -> str:
    """One self-contained HTML document (it loads nothing, runs nothing): the seed's tables,
    the window's timeline, how many nodes worked at once and the mix of kinds."""
    w = r.timeline
    body = (
        f"<h1>sm-llm-exporter report</h1><p class=meta>{_when(r.since_us)} to "
        f"{_when(r.until_us)} ({_duration(r.until_us - r.since_us)})</p>"
        f"<pre class=tables>{escape(to_text(r))}</pre>"
        f"<h2>Timeline</h2>{_binned_note(w)}"
        f"<div class=wrap>{_timeline(w, r.kinds, w.concurrency(), {}, None)}</div>"
        f"{_legend(r.kinds, in_flight=False, binned=w.binned)}"
        f"<h2>Nodes working at once</h2><div class=wrap>{_histogram(r)}</div>"
        f"<h2>Kinds</h2><div class=wrap>{_mix(r)}</div>{_parse_errors(r)}"
    )
    head = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
    return _document(f"sm-llm-exporter report {_when(r.since_us)}", head, body)


def _parse_errors(r: Report) -> str:
    named = [(node, e) for node, errors in r.errors.items() for e in errors]
    if not named:
        return ""
    items = "".join(f"<li>{escape(node)}: {escape(e)}</li>" for node, e in named)
    return f"<h2>Parse errors (the first few of each node)</h2><ul>{items}</ul>"


def _histogram(r: Report) -> str:
    """`<g class="histogram">`: a bar per number of nodes working at once, its share of the
    wall time (the tallest bar: the largest share)."""
    conc = r.snapshot.concurrency_us
    wall = max(1, r.until_us - r.since_us)
    top, height = 34, 140
    step = (X1 - X0) / max(1, len(conc))
    most = max(max(conc, default=0), 1)
    bars = []
    for k, us in enumerate(conc):
        share = us / wall
        h = height * us / most
        mid = X0 + (k + 0.5) * step
        label = f"{100 * share:.1f}%" + (f" · {_duration(us)}" if step >= 110 else "")
        bars.append(
            f'<rect class="bar" data-nodes="{k}" data-share="{share:.6f}" '
            f'data-seconds="{us / SECOND:g}" x="{mid - step * 0.35:.1f}" '
            f'y="{top + height - h:.1f}" width="{step * 0.7:.1f}" height="{h:.1f}" '
            f'fill="{STEP_FILL}"><title>{k} nodes working: {100 * share:.1f}% of the wall time '
            f"({_duration(us)})</title></rect>"
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


def _mix(r: Report) -> str:
    """`<g class="mix">`: the wall time by the set of kinds running, then the request (node)
    seconds of each kind."""
    snap = r.snapshot
    wall = max(1, r.until_us - r.since_us)
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
                    f"{100 * us / wall:.1f}% · {_duration(us)}",
                    f'data-mix="{escape(label)}"',
                )
            )
    kind_us = {k: sum(n.kinds[k].request_us for n in snap.nodes) for k in snap.kind_names}
    total = max(1, sum(kind_us.values()))
    y += 34
    rows.append(
        f'<text x="{X0 - 8}" y="{y + 10}" text-anchor="end" font-weight="600">request time</text>'
    )
    colours = _kind_colours(r.kinds)
    for k, us in kind_us.items():
        y += 20
        calls = r.durations_us.get(k, [])
        med = median_us(calls)
        text = f"{len(calls)} requests · {us / SECOND / 60:.1f} node-min"
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


# -- the timeline ---------------------------------------------------------------------------------


def _timeline(
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
        rows = min(MAX_ROWS, 1 + max((iv.slot or 0 for iv in lane.kept), default=0))
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
                    f'height="{h:.1f}"><title>{escape(name)} {_when(s)} + '
                    f"{_duration(e - s)}: busy {100 * share:.0f}%, {requests} requests"
                    f"{' (' + ended + ')' if ended else ''}</title></rect>"
                )
        else:
            for iv in lane.kept:
                kind, out = _kind(iv, kinds), outcome(iv)
                fill = colours.get(kind, PALETTE[0]) if out == "timed" else OUTCOME_FILL[out]
                tokens = "" if iv.tokens is None else f", {iv.tokens} tokens"
                row = min(iv.slot or 0, rows - 1)
                part.append(
                    f'<rect class="request" data-kind="{escape(kind)}" data-outcome="{out}" '
                    f'data-start="{iv.start_us}" data-end="{iv.end_us}" '
                    f'{span(iv.start_us, iv.end_us)} y="{y + row * row_h:.1f}" '
                    f'height="{row_h - (rows > 1):.1f}" fill="{fill}">'
                    f"<title>{escape(name)}: {escape(kind or out)} ({out}), {_when(iv.start_us)}"
                    f", {_duration(iv.duration_us)}{tokens}</title></rect>"
                )
        if now_us is not None:
            for s in sorted(in_flight.get(name, ())):
                part.append(
                    f'<rect class="in-flight" data-start="{s}" {span(s, now_us)} y="{y + 2}" '
                    f'height="{lane_h - 4}" fill="{IN_FLIGHT_FILL}" fill-opacity="0.75" '
                    f'stroke="#1b5e20"><title>{escape(name)}: in flight since {_when(s)} '
                    f"({_duration(now_us - s)})</title></rect>"
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


def _legend(kinds: Kinds, *, in_flight: bool, binned: bool) -> str:
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


def _binned_note(w: Window) -> str:
    if not w.binned:
        return ""
    return (
        f"<p class=note>{w.intervals} intervals, more than the {w.max_rects} drawn one by one: "
        f"binned, {w.bins} bins of {_duration(w.bin_us)} each. A bar is the node's busy share "
        "of the bin; the strip below, the mean number of nodes busy in it.</p>"
    )


# -- helpers ---------------------------------------------------------------------------------


def _document(title: str, head: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'{head}<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n"
    )


def _svg(height: float, label: str, inner: str, cls: str = "chart") -> str:
    return (
        f'<svg class="{cls}" viewBox="0 0 {W} {height:.0f}" '
        f'width="100%" role="img" aria-label="{label}">{inner}</svg>'
    )


def _kind_colours(kinds: Kinds) -> dict[str, str]:
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds.names)}


def _kind(iv: Interval, kinds: Kinds) -> str:
    """A timed request's kind; "" for an occupancy without timing (module docstring)."""
    return kinds.classify(iv.tokens) if not iv.reason else ""


def _short(text: str, most: int = 22) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}"


def _when(us: int) -> str:
    """`2026-09-22 07:32:55 UTC`."""
    return datetime.fromtimestamp(us // SECOND, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(us: int) -> str:
    s = us / SECOND
    if abs(s) < 1:
        return f"{us / 1000:.0f} ms"
    for unit, size, limit in (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 172800)):
        if abs(s) < limit:
            return f"{s / size:.0f} {unit}" if unit == "s" else f"{s / size:.1f} {unit}"
    return f"{s / 86400:.1f} d"


def _ago(now_us: int, t_us: int) -> str:
    return f"{_duration(now_us - t_us)} ago" if now_us >= t_us else f"in {_duration(t_us - now_us)}"


def _age_s(now_us: int, t_us: int | None) -> float | None:
    return None if t_us is None else (now_us - t_us) / SECOND
