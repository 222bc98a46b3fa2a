"""The pages' common frame: the HTML document, its base style and the binned-timeline note.

Pure: each function turns what it is handed into markup (no clock, no I/O, no JavaScript).
Every text that comes from outside is escaped.
"""

from __future__ import annotations

from html import escape

from exporter.accounting.lanes import Window
from exporter.web.svg import STEP_FILL, duration
from exporter.web.timeline import BIN_FILL

MIN_SVG_PX = 900  # narrower screens scroll the timeline sideways (its labels stay readable)
CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1em;color:#222}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .4em}
.meta{color:#555;margin:.2em 0}.wrap{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;white-space:nowrap}
th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left}
th{background:#f3f3f3;font-weight:600}td.num{text-align:right}
svg{display:block;width:100%;min-width:MINpx;max-width:1600px;height:auto}
svg text{font:12px system-ui,sans-serif;fill:#333}svg .tick{fill:#666}
.legend{display:flex;flex-wrap:wrap;gap:.3em 1.2em;margin:.4em 0;color:#444}
.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}
pre{background:#f7f7f7;padding:.8em;overflow-x:auto;font-size:13px}
.note{background:#fff8e1;padding:.3em .6em;border-left:3px solid #f9a825}
svg .track{fill:#f1f1f1}svg .bin{fill:BIN}svg .step{fill:STEP}
svg.fluid{min-width:0;max-width:760px;overflow:visible}svg.fluid text{font-size:13px}
svg .heading{font-weight:600}svg .axis{fill:#555}
svg .rlabel{display:none;paint-order:stroke;stroke:#fff;stroke-width:3px;font-weight:600}
@media (max-width:800px){svg .wide{display:none}}
"""
CSS = CSS.replace("MIN", str(MIN_SVG_PX)).replace("BIN", BIN_FILL).replace("STEP", STEP_FILL)


def document(title: str, head: str, body: str, css: str = "") -> str:
    """A whole HTML document: the base style, then the page's own (`css`)."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'{head}<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}{css}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def binned_note(w: Window) -> str:
    """What a binned timeline says of itself ("" for one drawn request by request)."""
    if not w.binned:
        return ""
    return (
        f"<p class=note>{w.intervals} intervals, more than the {w.max_rects} drawn one by one: "
        f"binned, {w.bins} bins of {duration(w.bin_us)} each. A bar is the node's busy share "
        "of the bin; the strip below, the mean number of nodes busy in it.</p>"
    )
