"""The HTML report: one self-contained document of a report's tables and charts.

Pure: it turns a Report into a document (no clock, no I/O, no JavaScript). Every text that
comes from outside (node names, errors, kind names) is escaped. The charts are svg.py's and
timeline.py's.
"""

from __future__ import annotations

from html import escape

from exporter.report.text import median_us, to_text
from exporter.report.window import Report
from exporter.web import svg, timeline
from exporter.web.document import binned_note, document
from exporter.web.svg import duration, when

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
CSS = ""  # the report's own style, after the base


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
        f"<h2>Timeline</h2>{binned_note(w)}"
        f"<div class=wrap>{timeline.draw(w, r.kinds, w.concurrency(), {}, None)}</div>"
        f"{timeline.legend(r.kinds, in_flight=False, binned=w.binned)}"
        "<h2>Nodes working at once</h2>"
        f"<div class=wrap>{svg.histogram(r.snapshot.concurrency_us, wall_us)}</div>"
        f"<h2>Kinds</h2><div class=wrap>{svg.mix(r.snapshot, r.kinds, wall_us, calls)}</div>"
        f"{_parse_errors(r)}"
    )
    head = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
    return document(f"sm-llm-exporter report {when(r.since_us)}", head, body, CSS)


def _parse_errors(r: Report) -> str:
    named = [(node, e) for node, errors in r.errors.items() for e in errors]
    if not named:
        return ""
    items = "".join(f"<li>{escape(node)}: {escape(e)}</li>" for node, e in named)
    return f"<h2>Parse errors (the first few of each node)</h2><ul>{items}</ul>"
