"""The status page: what the daemon serves at `/`, as HTML with inline SVG.

Pure: each function turns a StatusView (fleet.py) into a document (no clock, no I/O, no
JavaScript). Every text that comes from outside (node names, errors, kind names) is escaped.

The page says first what needs attention: a header counting the nodes busy, idle while the
others work, with their journal not followed and with their server stopped; then a row per
node, `<tr data-node data-state>` (fleet.STATES), those needing attention first, with its busy
share of the last 5 minutes and hour and how long it has been idle. At phone width each row is
a card, its state and problem first. Then the hour's share of time with 0..N nodes busy, and
the timeline (status_timeline.py), which opens at now on a narrow screen. What a page draws is
bounded whatever the fleet: a row per node, and the timeline's bounded lanes.
"""

from __future__ import annotations

from html import escape

from exporter.accounting.figures import NodeSnapshot
from exporter.base.times import SECOND
from exporter.web import svg
from exporter.web.document import document
from exporter.web.fleet import LONG_US, Fleet, Row, StatusView, attention_order, fleet, history_span
from exporter.web.status_timeline import timeline_html
from exporter.web.svg import duration, when

PHONE_PX = 700  # narrower screens show each node as a card
CSS = f"""
.attention{{display:flex;flex-wrap:wrap;gap:.4em;margin:.5em 0}}
.attention span{{padding:.15em .6em;border-radius:1em;background:#eee;font-weight:600}}
.attention .down{{background:#fde0e0;color:#b71c1c}}
.attention .iwow{{background:#ffe8cc;color:#8a4b00}}.attention .busy{{background:#e3f2e5}}
.attention .asleep{{background:#e8eaf6;color:#303f9f}}tr.st-asleep td.state{{color:#303f9f}}
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
    "asleep": "asleep",
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


# -- the page -------------------------------------------------------------------------


def status_html(view: StatusView) -> bytes:
    """`/`: the header, the nodes, how many worked at once and the timeline; refreshes itself,
    no script."""
    f = fleet(view)
    rows = "".join(_row(r, view.now_us) for r in attention_order(f.rows))
    labels = _labels(f.long_us)
    head_cells = "".join(f"<th>{escape(h)}</th>" for h in labels)
    body = (
        f"<h1>sm-llm-exporter</h1>{_attention(f)}"
        f"<p class=meta>generated {when(view.now_us)} · figures final up to "
        f"{when(view.snapshot.watermark_us)} · refreshes every {view.refresh_s} s</p>"
        f"<div class=wrap><table class=nodes><thead><tr>{head_cells}</tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
        f"{_nodes_busy(view)}"
        f"<h2>The last {_span(view.window_us)}</h2>{timeline_html(view, f)}"
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
    if f.asleep:
        items.append(("asleep", f"{f.asleep} asleep"))
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
        if n.decode_speeds:  # (long generations say how fast they decode)
            slots += f", decoding {sum(n.decode_speeds):.1f} t/s"
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
    span = history_span(view)
    if span is None:
        return ""
    first, last = span
    wall = last.at_us - first.at_us
    seconds = [a - b for a, b in zip(last.concurrency_us, first.concurrency_us, strict=True)]
    return (
        f"<h2>Nodes busy at once, the last {_span(wall)}</h2>"
        f"<div class=wrap>{svg.histogram(seconds, wall)}</div>"
    )


# -- helpers ---------------------------------------------------------------------------------


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
