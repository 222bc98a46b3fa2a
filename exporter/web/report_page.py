"""The HTML report: one self-contained document of a report's tables and charts.

Pure: it turns a Report into a document (no clock, no I/O, no JavaScript). Every text that
comes from outside (node names, errors, kind names) is escaped. The charts are svg.py's and
timeline.py's. It reads at a phone's width: the busy bars come first there, the seed's tables
and the timeline scroll sideways in their own boxes, the other charts are drawn to the width.
"""

from __future__ import annotations

from html import escape

from exporter.report.text import median_us, to_text
from exporter.report.window import Report
from exporter.web import svg, timeline
from exporter.web.document import binned_note, document
from exporter.web.svg import duration, when

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
# the report's own style, after the base: the busy bars beside the tables (above them when the
# two do not fit side by side)
CSS = """
.top{display:flex;flex-flow:row-reverse wrap;justify-content:flex-end;align-items:flex-start;
gap:0 2em;margin-top:1em}
.top h2{margin-top:0}.top>section{flex:1 1 300px;max-width:640px;min-width:0}
.top>pre{flex:0 1 auto;min-width:0;max-width:100%;margin:0 0 .4em;box-sizing:border-box}
.caption{color:#555;margin:.2em 0 .6em}
"""


def report_html(r: Report) -> str:
    """One self-contained HTML document (it loads nothing, runs nothing): each node's busy
    share drawn, the seed's tables, the window's timeline, how many nodes worked at once and
    the mix of kinds. The report must hold its timeline (report.Builder's `timeline=True`)."""
    w = r.timeline
    if w is None:
        raise ValueError("report_html needs a report with its timeline (Builder(timeline=True))")
    wall_us = r.until_us - r.since_us
    calls = {k: (len(c), median_us(c)) for k, c in r.durations_us.items()}
    busy = [(n.name, n.busy_us) for n in r.snapshot.nodes]
    body = (
        f"<h1>sm-llm-exporter report</h1><p class=meta>{when(r.since_us)} to "
        f"{when(r.until_us)} ({duration(wall_us)})</p>"
        "<div class=top><section><h2>Busy per node</h2><p class=caption>Each node's busy time "
        "(its requests' union) as a share of the window.</p>"
        f"{svg.busy(busy, r.since_us, r.until_us)}</section>"
        f"<pre class=tables>{escape(to_text(r))}</pre></div>"
        f"<h2>Timeline</h2>{binned_note(w)}"
        f"<div class=wrap>{timeline.draw(w, r.kinds, w.concurrency(), {}, None)}</div>"
        f"{timeline.legend(r.kinds, in_flight=False, binned=w.binned)}"
        "<h2>Nodes working at once</h2>"
        f"{svg.histogram(r.snapshot.concurrency_us, wall_us)}"
        f"<h2>Kinds</h2>{svg.mix(r.snapshot, r.kinds, wall_us, calls)}{_mix_key()}"
        f"{_parse_errors(r)}"
    )
    head = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
    return document(f"sm-llm-exporter report {when(r.since_us)}", head, body, CSS)


def _mix_key() -> str:
    """The colours of the wall-time bars that are no kind's."""
    items = (
        (svg.IDLE_FILL, "idle: no timed request running"),
        (svg.MIX_FILL, "several kinds at once (the kinds joined by +)"),
    )
    spans = "".join(f'<span><i style="background:{c}"></i>{escape(t)}</span>' for c, t in items)
    return f"<div class=legend>{spans}</div>"


def _parse_errors(r: Report) -> str:
    named = [(node, e) for node, errors in r.errors.items() for e in errors]
    if not named:
        return ""
    items = "".join(f"<li>{escape(node)}: {escape(e)}</li>" for node, e in named)
    return f"<h2>Parse errors (the first few of each node)</h2><ul>{items}</ul>"
