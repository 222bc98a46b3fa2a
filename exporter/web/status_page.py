"""The status page and /api/status: what the daemon serves at `/`, as HTML with inline SVG.

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
from exporter.web import svg, timeline
from exporter.web.document import binned_note, document
from exporter.web.svg import duration, when

STATUS_MAX_RECTS = 4000  # finished intervals the status page draws one by one, then bins
API_REQUESTS = 1000  # a node's requests /api/status lists (the newest of the window)


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
        f"{binned_note(window)}{''.join(f'<p class=note>{escape(t)}</p>' for t in notes)}"
        f"<div class=wrap>{timeline.draw(window, view.kinds, steps, view.in_flight, now)}</div>"
        f"{timeline.legend(view.kinds, in_flight=True, binned=window.binned)}"
        '<p class=meta><a href="metrics">/metrics</a> · <a href="api/status">/api/status</a>'
        f" · sm-llm-exporter {escape(view.version)}</p>"
    )
    head = f'<meta http-equiv="refresh" content="{int(view.refresh_s)}">'
    return document("sm-llm-exporter status", head, body).encode("utf-8", "replace")


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


# -- helpers ---------------------------------------------------------------------------------


def _ago(now_us: int, t_us: int) -> str:
    return f"{duration(now_us - t_us)} ago" if now_us >= t_us else f"in {duration(t_us - now_us)}"


def _age_s(now_us: int, t_us: int | None) -> float | None:
    return None if t_us is None else (now_us - t_us) / SECOND
