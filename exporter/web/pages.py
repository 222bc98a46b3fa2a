"""The status page, /api/status and the HTML report: server-rendered HTML with inline SVG.

Pure: each function turns what it is handed into a document (no clock, no I/O, no JavaScript).
Every text that comes from outside (node names, errors, kind names) is escaped. The charts are
svg.py's and timeline.py's (whose docstring gives the timeline's form: lanes, rects, bins, the
strip).

When a window holds more intervals than its Window keeps exactly (lanes.MAX_RECTS; the
status page: STATUS_MAX_RECTS), its timeline is binned (timeline.py), the page says so and
gives the bin's width, and the concurrency strip shows each bin's mean number of nodes busy. A
page's size is then bounded by the number of nodes times the bins, whatever the window holds.

/api/status (status_json) holds the status page's data; every time in it is a float of seconds
since the epoch and every duration a float of seconds (as the report's JSON):

    {"version", "generated_at", "watermark", "window": {"start", "end", "seconds"},
     "kinds": [...], "nodes": [{"name", "busy", "slots", "slots_in_use", "in_flight",
       "oldest_in_flight_age_seconds", "in_flight_starts": [...], "last_end", "followed",
       "lag_seconds", "last_error", "server_up", "requests_kept", "requests_in_window",
       "requests": [{"start", "end", "kind", "outcome", "tokens"}]}],
     "concurrency": [{"start", "end", "nodes"}]}

`requests` are the node's intervals of the window the status page draws ("kind" "" for an
occupancy without timing, as on the timeline; null values where not known), the newest
API_REQUESTS of them (`requests_in_window` says how many the window holds), `concurrency` the
exact steps of how many nodes were busy (requests in flight included), covering the window.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from exporter.accounting.figures import NodeSnapshot, Snapshot
from exporter.accounting.lanes import (
    RING_SIZE,
    Step,
    Window,
    binned_steps,
    concurrency,
    outcome,
)
from exporter.base.kinds import Kinds
from exporter.base.records import LOST_REASON, Interval
from exporter.base.times import SECOND
from exporter.report.text import median_us, to_text
from exporter.report.window import Report
from exporter.web import svg, timeline
from exporter.web.svg import STEP_FILL, duration, when
from exporter.web.timeline import BIN_FILL

STATUS_MAX_RECTS = 4000  # finished intervals the status page draws one by one, then bins
API_REQUESTS = 1000  # a node's requests /api/status lists (the newest of the window)
MIN_SVG_PX = 900  # narrower screens scroll the timeline sideways (its labels stay readable)
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
        f"generated {when(now)} · figures final up to {when(snap.watermark_us)} · "
        f"refreshes every {view.refresh_s} s</p>"
        "<div class=wrap><table><thead><tr><th>node</th><th>now</th><th>slots in use</th>"
        "<th>in flight (oldest)</th><th>last request end</th><th>journal</th><th>lag</th>"
        f"<th>server</th><th>last error</th></tr></thead><tbody>{rows}</tbody></table></div>"
        f"<h2>Last {duration(view.window_us)}</h2>"
        f"{_binned_note(window)}{''.join(f'<p class=note>{escape(t)}</p>' for t in notes)}"
        f"<div class=wrap>{timeline.draw(window, view.kinds, steps, view.in_flight, now)}</div>"
        f"{timeline.legend(view.kinds, in_flight=True, binned=window.binned)}"
        '<p class=meta><a href="metrics">/metrics</a> · <a href="api/status">/api/status</a>'
        f" · sm-llm-exporter {escape(view.version)}</p>"
    )
    head = f'<meta http-equiv="refresh" content="{int(view.refresh_s)}">'
    return _document("sm-llm-exporter status", head, body).encode("utf-8", "replace")


def status_json(view: StatusView) -> bytes:
    """`/api/status`: the status page's data (the module docstring gives its form)."""
    lo, hi = _status_span(view)
    nodes = []
    for n in view.snapshot.nodes:
        reqs = [iv for iv in view.recent.get(n.name, ()) if _in_window(iv, lo, hi)]
        shown = reqs[-API_REQUESTS:]  # (the newest: the document stays bounded)
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
                "starting_since": None
                if n.starting_since_us is None
                else n.starting_since_us / SECOND,
                "last_startup_seconds": None if n.startup is None else n.startup.seconds,
                "requests_kept": len(view.recent.get(n.name, ())),
                "requests_in_window": len(reqs),
                "requests": [
                    {
                        "start": iv.start_us / SECOND,
                        "end": iv.end_us / SECOND,
                        "kind": svg.kind_of(iv, view.kinds),
                        "outcome": outcome(iv),
                        "tokens": iv.tokens,
                    }
                    for iv in shown
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
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "replace") + b"\n"  # (a lone surrogate: never a failed page)


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
    """What a Window of [lo, hi] takes (lanes.Window)."""
    return (lo <= iv.end_us <= hi or iv.start_us < hi < iv.end_us) and iv.reason != LOST_REASON


def _status_row(n: NodeSnapshot, view: StatusView) -> str:
    now = view.now_us
    name = escape(n.name)
    state = "<td class=busy>busy</td>" if n.in_flight else "<td class=idle>idle</td>"
    slots = f"{n.in_flight} / {'?' if n.slots is None else n.slots}"
    oldest = "" if n.oldest_in_flight_us is None else f" ({duration(now - n.oldest_in_flight_us)})"
    last = (
        "never" if n.last_end_us is None else f"{when(n.last_end_us)} ({_ago(now, n.last_end_us)})"
    )
    journal = "followed" if n.up else "<span class=bad>not followed</span>"
    server = {1: "up", 0: "<span class=bad>down</span>", None: "unknown"}.get(n.server_up, "?")
    if n.starting_since_us is not None:
        server = f"starting ({duration(max(0, now - n.starting_since_us))})"
    elif n.server_up == 1 and n.startup is not None:
        server += f" (came up in {duration(n.startup.end_us - n.startup.start_us)})"
    error = escape(view.errors.get(n.name, ""))
    return (
        f"<tr><td>{name}</td>{state}<td class=num>{slots}</td>"
        f"<td class=num>{n.in_flight}{oldest}</td><td>{last}</td><td>{journal}</td>"
        f"<td class=num>{duration(n.lag_us)}</td><td>{server}</td><td class=err>{error}</td></tr>"
    )


# -- the report ----------------------------------------------------------------------------------


def report_html(r: Report) -> str:
    """One self-contained HTML document (it loads nothing, runs nothing): the seed's tables,
    the window's timeline, how many nodes worked at once and the mix of kinds. The report must
    hold its timeline (report.Builder's `timeline=True`)."""
    w = r.timeline
    if w is None:
        raise ValueError("report_html needs a report with its timeline (Builder(timeline=True))")
    wall_us = r.until_us - r.since_us
    calls = {k: (len(c), median_us(c)) for k, c in r.durations_us.items()}
    body = (
        f"<h1>sm-llm-exporter report</h1><p class=meta>{when(r.since_us)} to "
        f"{when(r.until_us)} ({duration(wall_us)})</p>"
        f"<pre class=tables>{escape(to_text(r))}</pre>"
        f"<h2>Timeline</h2>{_binned_note(w)}"
        f"<div class=wrap>{timeline.draw(w, r.kinds, w.concurrency(), {}, None)}</div>"
        f"{timeline.legend(r.kinds, in_flight=False, binned=w.binned)}"
        "<h2>Nodes working at once</h2>"
        f"<div class=wrap>{svg.histogram(r.snapshot.concurrency_us, wall_us)}</div>"
        f"<h2>Kinds</h2><div class=wrap>{svg.mix(r.snapshot, r.kinds, wall_us, calls)}</div>"
        f"{_parse_errors(r)}"
    )
    head = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
    return _document(f"sm-llm-exporter report {when(r.since_us)}", head, body)


def _parse_errors(r: Report) -> str:
    named = [(node, e) for node, errors in r.errors.items() for e in errors]
    if not named:
        return ""
    items = "".join(f"<li>{escape(node)}: {escape(e)}</li>" for node, e in named)
    return f"<h2>Parse errors (the first few of each node)</h2><ul>{items}</ul>"


# -- helpers ---------------------------------------------------------------------------------


def _document(title: str, head: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'{head}<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n"
    )


def _binned_note(w: Window) -> str:
    if not w.binned:
        return ""
    return (
        f"<p class=note>{w.intervals} intervals, more than the {w.max_rects} drawn one by one: "
        f"binned, {w.bins} bins of {duration(w.bin_us)} each. A bar is the node's busy share "
        "of the bin; the strip below, the mean number of nodes busy in it.</p>"
    )


def _ago(now_us: int, t_us: int) -> str:
    return f"{duration(now_us - t_us)} ago" if now_us >= t_us else f"in {duration(t_us - now_us)}"


def _age_s(now_us: int, t_us: int | None) -> float | None:
    return None if t_us is None else (now_us - t_us) / SECOND
