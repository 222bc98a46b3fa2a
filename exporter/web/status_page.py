"""The status page and /api/status: what the daemon serves at `/`, as HTML with inline SVG.

Pure: each function turns a StatusView (fleet.py) into a document (no clock, no I/O, no
JavaScript). Every text that comes from outside (node names, errors, kind names) is escaped.

The page says first what needs attention: a header counting the nodes busy, idle while the
others work, with their journal not followed and with their server stopped; then a row per
node, `<tr data-node data-state>` (fleet.STATES), those needing attention first, with its busy
share of the last 5 minutes and hour and how long it has been idle. At phone width each row is
a card, its state and problem first. Then the hour's share of time with 0..N nodes busy, and
the timeline (timeline.py: lanes of request rects, or of bins when the hour holds more than
STATUS_MAX_RECTS intervals or the fleet more than TIMELINE_LANES nodes), which opens at now on
a narrow screen. Its strip of nodes busy at once is the history's mean per sample (10 s).
What a page draws is bounded whatever the fleet: at most TIMELINE_LANES lanes of BINNED bins
or STATUS_MAX_RECTS rects, the strip's steps, a row per node.

/api/status (status_json) holds the same figures; every time in it is a float of seconds
since the epoch and every duration a float of seconds (as the report's JSON):

    {"version", "generated_at", "watermark", "figures_until",
     "window": {"start", "end", "seconds"},
     "summary": {"nodes", "busy", "idle_while_others_work", "sources_down", "servers_down"},
     "kinds": [...],
     "nodes": [{"name", "state", "busy_share_5m", "busy_share_1h", "busy_share_1h_seconds",
       "idle_seconds", "problem", "busy", "slots", "slots_in_use", "in_flight",
       "oldest_in_flight_age_seconds", "in_flight_starts": [...], "last_end", "followed",
       "lag_seconds", "last_error", "server_up", "starting_since", "last_startup_seconds",
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

import itertools
import json
from collections.abc import Sequence
from html import escape

from exporter.accounting.figures import NodeSnapshot
from exporter.accounting.history import Sample
from exporter.accounting.lanes import RING_SIZE, Step, Window, outcome
from exporter.base.records import LOST_REASON, Interval
from exporter.base.times import SECOND
from exporter.web import svg, timeline
from exporter.web.document import document
from exporter.web.fleet import LONG_US, Fleet, Row, StatusView, attention_order, fleet
from exporter.web.svg import duration, when

STATUS_MAX_RECTS = 4000  # finished intervals the status page draws one by one, then bins
TIMELINE_LANES = 60  # nodes the timeline draws (those needing attention first)
BINNED = 60  # bins of a binned lane (a minute each over the hour)
API_REQUESTS = 4000  # requests /api/status lists in all (each node's newest, shared out)
PHONE_PX = 700  # narrower screens show each node as a card
CSS = f"""
.attention{{display:flex;flex-wrap:wrap;gap:.4em;margin:.5em 0}}
.attention span{{padding:.15em .6em;border-radius:1em;background:#eee;font-weight:600}}
.attention .down{{background:#fde0e0;color:#b71c1c}}
.attention .iwow{{background:#ffe8cc;color:#8a4b00}}.attention .busy{{background:#e3f2e5}}
tr.st-down td.state,tr.st-down td.problem{{color:#c62828;font-weight:600}}
tr.st-idle-while-others-work td.state,tr.st-idle-while-others-work td.problem{{color:#b45309;
font-weight:600}}
tr.st-idle-while-others-work{{background:#fff4e5}}tr.st-down{{background:#fdeeee}}
td.problem{{white-space:normal;max-width:24em;overflow-wrap:anywhere}}
td.problem:not(:empty){{min-width:14em}}
.now{{direction:rtl}}.now>*{{direction:ltr}}
@media (max-width:{PHONE_PX}px){{
table.nodes,table.nodes tbody{{display:block}}table.nodes thead{{display:none}}
table.nodes tr{{display:flex;flex-wrap:wrap;gap:0 .8em;border:1px solid #ddd;border-radius:6px;
margin:.5em 0;padding:.4em .5em;white-space:normal}}
table.nodes td{{border:0;padding:.1em 0;order:5}}
table.nodes td::before{{color:#777;font-weight:400}}
table.nodes td.node{{order:0;width:100%;font-weight:600}}
table.nodes td.node::before,table.nodes td.state::before,table.nodes td.problem::before{{
content:none}}
table.nodes td.state{{order:1}}table.nodes td.problem{{order:2;width:100%;max-width:none}}
table.nodes td.share{{order:3}}table.nodes td.problem:empty,table.nodes td.nil{{display:none}}
svg .rlabel{{display:inline}}
}}
"""
STATE_WORDS = {
    "down": "down",
    "idle-while-others-work": "idle while the others work",
    "busy": "busy",
    "idle": "idle",
}
NOTHING = ("-", "never", "not logged", "unknown")  # a cell that tells nothing (hidden on phones)
COLUMNS: tuple[tuple[str, str], ...] = (  # (class, header): the table's columns, in order
    ("node", "node"),
    ("state", "now"),
    ("problem", "problem"),
    ("share", "busy 5 min"),
    ("share", "busy 1 h"),
    ("num", "idle for"),
    ("num", "in flight (oldest)"),
    ("last", "last request end"),
    ("journal", "journal"),
    ("num", "lag"),
    ("server", "server"),
)


def _labels(long_us: int) -> list[str]:
    """The columns' headers: the long share's says its span while the history is younger."""
    long = "busy 1 h" if long_us in (0, LONG_US) else f"busy {duration(long_us)}"
    return [long if h == "busy 1 h" else h for _, h in COLUMNS]


def _card_labels(labels: list[str]) -> str:
    """At phone width each cell says what it is (the headers are hidden)."""
    rules = "".join(
        f'table.nodes td:nth-child({k})::before{{content:"{label} "}}'
        for k, label in enumerate(labels, 1)
        if label not in ("node", "now", "problem")
    )
    return f"@media (max-width:{PHONE_PX}px){{{rules}}}"


# -- the status page -------------------------------------------------------------------------


def status_html(view: StatusView) -> bytes:
    """`/`: the header, the nodes, how many worked at once and the timeline; refreshes itself,
    no script."""
    f = fleet(view)
    rows = "".join(_row(r, view.now_us) for r in attention_order(f.rows))
    labels = _labels(f.long_us)
    head_cells = "".join(f"<th>{escape(h)}</th>" for h in labels)
    window, steps, drawn = _timeline(view, f)
    body = (
        f"<h1>sm-llm-exporter</h1>{_attention(f)}"
        f"<p class=meta>generated {when(view.now_us)} · figures final up to "
        f"{when(view.snapshot.watermark_us)} · refreshes every {view.refresh_s} s</p>"
        f"<div class=wrap><table class=nodes><thead><tr>{head_cells}</tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
        f"{_nodes_busy(view)}"
        f"<h2>The last {_span(view.window_us)}</h2>{_timeline_notes(view, window, drawn)}"
        f"<div class='wrap now'>"
        f"{_draw(view, window, steps)}"
        f"</div>{timeline.legend(view.kinds, in_flight=not window.binned, binned=window.binned)}"
        '<p class=meta><a href="metrics">/metrics</a> · <a href="api/status">/api/status</a>'
        f" · sm-llm-exporter {escape(view.version)}</p>"
    )
    head = f'<meta http-equiv="refresh" content="{int(view.refresh_s)}">'
    doc = document("sm-llm-exporter status", head, body, CSS + _card_labels(labels))
    return doc.encode("utf-8", "replace")


def _attention(f: Fleet) -> str:
    """The header: what needs attention first, then how many are busy."""
    items = []
    if f.sources_down:
        items.append(("down", f"{f.sources_down} journal{_s(f.sources_down)} not followed"))
    if f.servers_down:
        items.append(("down", f"{f.servers_down} server{_s(f.servers_down)} stopped"))
    if f.idle_while_others_work:
        items.append(("iwow", f"{f.idle_while_others_work} idle while the others work"))
    items.append(("busy", f"{f.busy} of {len(f.rows)} node{_s(len(f.rows))} busy"))
    spans = "".join(f"<span class={c}>{escape(t)}</span>" for c, t in items)
    return f"<div class=attention>{spans}</div>"


def _row(r: Row, now_us: int) -> str:
    n = r.node
    state = STATE_WORDS[r.state]
    if r.state == "busy" and not n.in_flight:
        state = "busy (no launch lines)"
    if n.in_flight or n.start_lines:
        oldest = (
            ""
            if n.oldest_in_flight_us is None
            else f" ({duration(now_us - n.oldest_in_flight_us)})"
        )
        slots = f"{n.in_flight} / {'?' if n.slots is None else n.slots}{oldest}"
    else:
        slots = "not logged"
    last = "never" if n.last_end_us is None else _when_near(n.last_end_us, now_us)
    journal = "followed" if n.up else "not followed"
    lag = duration(n.lag_us) if n.up else "down"
    cells = (
        escape(n.name),
        escape(state),
        escape(r.problem),
        _pct(r.share_5m),
        _pct(r.share_1h),
        "never" if r.idle_us is None else ("-" if r.idle_us == 0 else duration(r.idle_us)),
        slots,
        last,
        journal,
        lag,
        _server(n, now_us),
    )
    told = () if n.up else ("journal", "lag", "idle for")  # (the problem says it)
    tds = "".join(
        f'<td class="{cls}{" nil" if text in NOTHING or label in told else ""}">{text}</td>'
        for (cls, label), text in zip(COLUMNS, cells, strict=True)
    )
    shares = "".join(
        f' data-{k}="{v:.6f}"'
        for k, v in (("share-5m", r.share_5m), ("share-1h", r.share_1h))
        if v is not None
    )
    return (
        f'<tr class="st-{r.state}" data-node="{escape(n.name)}" data-state="{r.state}"'
        f"{shares}>{tds}</tr>"
    )


def _server(n: NodeSnapshot, now_us: int) -> str:
    server = {1: "up", 0: "stopped", None: "unknown"}.get(n.server_up, "?")
    if n.starting_since_us is not None:
        return f"starting ({duration(max(0, now_us - n.starting_since_us))})"
    if n.server_up == 1 and n.startup is not None:
        server += f" (came up in {duration(n.startup.end_us - n.startup.start_us)})"
    return server


def _nodes_busy(view: StatusView) -> str:
    """The bars of the time with 0..N nodes busy over the history's span."""
    span = _history_span(view)
    if span is None:
        return ""
    first, last = span
    wall = last.at_us - first.at_us
    seconds = [a - b for a, b in zip(last.concurrency_us, first.concurrency_us, strict=True)]
    return (
        f"<h2>Nodes busy at once, the last {_span(wall)}</h2>"
        f"<div class=wrap>{svg.histogram(seconds, wall)}</div>"
    )


# -- /api/status -----------------------------------------------------------------------------


def status_json(view: StatusView) -> bytes:
    """`/api/status`: the status page's data (the module docstring gives its form)."""
    f = fleet(view)
    lo, hi = _status_span(view)
    share = _requests_each(view)
    nodes = []
    for r in f.rows:
        n = r.node
        reqs = [iv for iv in view.recent.get(n.name, ()) if _in_window(iv, lo, hi)]
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
    span = _history_span(view)
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
            for s in _history_steps(view.samples, lo)
        ],
    }
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "replace") + b"\n"  # (a lone surrogate: never a failed page)


def _requests_each(view: StatusView) -> int:
    """How many of its newest requests /api/status lists for each node."""
    return max(1, API_REQUESTS // max(1, len(view.snapshot.nodes)))


# -- the timeline ----------------------------------------------------------------------------


def _timeline(view: StatusView, f: Fleet) -> tuple[Window, list[Step], list[str]]:
    """The timeline's Window (exact, of the recent intervals, or binned from the history),
    its strip's steps, and the nodes it draws."""
    picked = {r.node.name for r in attention_order(f.rows)[:TIMELINE_LANES]}
    drawn = [r.node.name for r in f.rows if r.node.name in picked]
    lo, hi = _status_span(view)
    exact = len(drawn) == len(f.rows) and all(
        len(view.recent.get(n, ())) >= view.window_count(n) for n in drawn
    )
    total = sum(view.window_count(n) for n in drawn)
    if exact and total <= STATUS_MAX_RECTS:
        window = Window(drawn, lo, hi, STATUS_MAX_RECTS)
        for name in drawn:
            window.add_all(view.recent.get(name, ()))
        return window, _history_steps(view.samples, lo), drawn
    return _binned(view, drawn), _history_steps(view.samples, lo), drawn


def _binned(view: StatusView, drawn: list[str]) -> Window:
    """A binned Window of the hour to the newest sample, its bins from the history."""
    last = view.samples[-1] if view.samples else None
    hi = last.at_us if last is not None else view.now_us
    lo = hi - view.window_us
    window = Window(drawn, lo, hi, 0, BINNED)
    window.binned = True
    index = {n: i for i, n in enumerate(view.sample_nodes)}
    samples = [s for s in view.samples if s.at_us >= lo]
    for a, b in itertools.pairwise(samples):
        if b.at_us - a.at_us > window.bin_us:
            continue  # (a gap in the history: nothing known of it)
        k = min((a.at_us - lo) // window.bin_us, window.bins - 1)
        for name in drawn:
            i = index.get(name)
            if i is None:
                continue
            window.lanes[name].busy_us[k] += b.busy_us[i] - a.busy_us[i]
    return window


def _history_steps(samples: Sequence[Sample], lo: int) -> list[Step]:
    """The mean number of nodes busy between successive samples from `lo` on."""
    out: list[Step] = []
    kept = [s for s in samples if s.at_us >= lo]
    for a, b in itertools.pairwise(kept):
        width = b.at_us - a.at_us
        nodes = (b.total_busy_us - a.total_busy_us) / width
        if out and out[-1].nodes == nodes and out[-1].end_us == a.at_us:
            out[-1] = Step(out[-1].start_us, b.at_us, nodes)
        else:
            out.append(Step(a.at_us, b.at_us, nodes))
    return out


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
        if len(view.recent.get(n, ())) >= RING_SIZE and view.recent[n][0].end_us > window.since_us
    ]
    return "".join(f"<p class=note>{escape(t)}</p>" for t in notes)


def _draw(view: StatusView, window: Window, steps: list[Step]) -> str:
    """The timeline; requests in flight drawn to now unless binned (from the history)."""
    if window.binned:
        return timeline.draw(window, view.kinds, steps, {}, None, counted=False)
    return timeline.draw(window, view.kinds, steps, view.in_flight, view.now_us)


# -- helpers ---------------------------------------------------------------------------------


def _history_span(view: StatusView) -> tuple[Sample, Sample] | None:
    """The oldest sample within the window of the newest, and the newest."""
    if len(view.samples) < 2:
        return None
    last = view.samples[-1]
    first = next(s for s in view.samples if s.at_us >= last.at_us - view.window_us)
    return (first, last) if first is not last else None


def _status_span(view: StatusView) -> tuple[int, int]:
    return view.now_us - max(SECOND, view.window_us), view.now_us


def _in_window(iv: Interval, lo: int, hi: int) -> bool:
    """What a Window of [lo, hi] takes (lanes.Window)."""
    return (lo <= iv.end_us <= hi or iv.start_us < hi < iv.end_us) and iv.reason != LOST_REASON


def _when_near(t_us: int, now_us: int) -> str:
    """`08:31:43 UTC` within a day of now, else the date too."""
    text = when(t_us)
    return text[11:] if abs(now_us - t_us) < 86400 * SECOND else text


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _span(us: int) -> str:
    return "hour" if us == 3600 * SECOND else duration(us)


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _age_s(now_us: int, t_us: int | None) -> float | None:
    return None if t_us is None else (now_us - t_us) / SECOND
