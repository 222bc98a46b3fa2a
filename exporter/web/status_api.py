"""/api/status: the status page's figures as JSON, bounded whatever the fleet.

Pure: it turns a StatusView (fleet.py) into a document (no clock, no I/O).

/api/status (status_json) holds the status page's figures; every time in it is a float of seconds
since the epoch and every duration a float of seconds (as the report's JSON):

    {"version", "generated_at", "watermark", "figures_until",
     "window": {"start", "end", "seconds"},
     "summary": {"nodes", "busy", "idle_while_others_work", "asleep", "sources_down",
       "servers_down"},
     "kinds": [...],
     "nodes": [{"name", "state", "busy_share_5m", "busy_share_1h", "busy_share_1h_seconds",
       "idle_seconds", "problem", "busy", "slots", "slots_in_use", "in_flight",
       "oldest_in_flight_age_seconds", "in_flight_starts": [...], "last_end", "followed",
       "lag_seconds", "last_error", "server_up", "asleep", "asleep_seconds",
       "decode_tokens_per_second", "starting_since", "last_startup_seconds",
       "requests_kept", "requests_in_window",
       "requests": [{"start", "end", "kind", "outcome", "tokens"}]}],
     "nodes_busy": {"start", "end", "seconds": [...]},
     "concurrency": [{"start", "end", "nodes"}]}

`figures_until` is the newest sample's time, where both shares end. `busy_share_5m` is null
until the history covers its window; `busy_share_1h` covers `busy_share_1h_seconds` (an
hour, or less while the history is younger; null below 5 minutes). `requests` are the node's
intervals of the window ("kind" "" for an occupancy without timing, as on the timeline; null
values where not known), the newest of them: API_REQUESTS in all, shared out over the nodes
(`requests_in_window` says how many the window holds). `nodes_busy.seconds[k]` is the time
with exactly k nodes busy over [start, end] (the history's span, up to an hour);
`concurrency` the mean number of nodes busy per sample of the history.
"""

from __future__ import annotations

import json

from exporter.accounting.lanes import outcome
from exporter.base.times import SECOND
from exporter.web import svg
from exporter.web.fleet import (
    StatusView,
    fleet,
    history_span,
    history_steps,
    in_window,
    status_span,
)

API_REQUESTS = 4000  # requests /api/status lists in all (each node's newest, shared out)


def status_json(view: StatusView) -> bytes:
    """`/api/status`: the status page's data (the module docstring gives its form)."""
    f = fleet(view)
    lo, hi = status_span(view)
    share = _requests_each(view)
    nodes = []
    for r in f.rows:
        n = r.node
        reqs = [iv for iv in view.recent.get(n.name, ()) if in_window(iv, lo, hi)]
        shown = reqs[-share:] if share else []
        starts = sorted(view.in_flight.get(n.name, ()))
        nodes.append(
            {
                "name": n.name,
                "state": r.state,
                "busy_share_5m": r.share_5m,
                "busy_share_1h": r.share_1h,
                "busy_share_1h_seconds": f.long_us / SECOND,
                "idle_seconds": None if r.idle_us is None else r.idle_us / SECOND,
                "problem": r.problem,
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
                "asleep": n.asleep,
                "asleep_seconds": n.asleep_us / SECOND,
                "decode_tokens_per_second": sum(n.decode_speeds) if n.decode_speeds else None,
                "starting_since": None
                if n.starting_since_us is None
                else n.starting_since_us / SECOND,
                "last_startup_seconds": None if n.startup is None else n.startup.seconds,
                "requests_kept": len(view.recent.get(n.name, ())),
                "requests_in_window": view.window_count(n.name),
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
    span = history_span(view)
    data = {
        "version": view.version,
        "generated_at": view.now_us / SECOND,
        "watermark": view.snapshot.watermark_us / SECOND,
        "figures_until": None if f.until_us is None else f.until_us / SECOND,
        "window": {"start": lo / SECOND, "end": hi / SECOND, "seconds": (hi - lo) / SECOND},
        "summary": {
            "nodes": len(f.rows),
            "busy": f.busy,
            "idle_while_others_work": f.idle_while_others_work,
            "asleep": f.asleep,
            "sources_down": f.sources_down,
            "servers_down": f.servers_down,
        },
        "kinds": list(view.kinds.names),
        "nodes": nodes,
        "nodes_busy": None
        if span is None
        else {
            "start": span[0].at_us / SECOND,
            "end": span[1].at_us / SECOND,
            "seconds": [
                (a - b) / SECOND
                for a, b in zip(span[1].concurrency_us, span[0].concurrency_us, strict=True)
            ],
        },
        "concurrency": [
            {"start": s.start_us / SECOND, "end": s.end_us / SECOND, "nodes": s.nodes}
            for s in history_steps(view.samples, lo)
        ],
    }
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "replace") + b"\n"  # (a lone surrogate: never a failed page)


def _requests_each(view: StatusView) -> int:
    """How many of its newest requests /api/status lists for each node."""
    return max(1, API_REQUESTS // max(1, len(view.snapshot.nodes)))


def _age_s(now_us: int, t_us: int | None) -> float | None:
    return None if t_us is None else (now_us - t_us) / SECOND
