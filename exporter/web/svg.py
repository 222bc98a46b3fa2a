"""Inline SVG charts and the labels the pages share: the histogram of nodes at once, the mix.

Pure: each function turns what it is handed into markup (no clock, no I/O, no JavaScript).
Every text that comes from outside (node names, kind names) is escaped. The timeline, the
pages' largest chart, is timeline.py's, drawn on the same geometry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

from exporter.accounting.figures import Snapshot
from exporter.base.kinds import Kinds
from exporter.base.records import Interval
from exporter.base.times import SECOND

# SVG geometry, in user units: a chart is W wide, its plot from X0 to X1.
W, X0, X1 = 1000, 150.0, 985.0
PALETTE = ("#4e79a7", "#f28e2b", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#17becf")
STEP_FILL = "#6b6b9a"  # how many nodes were busy: the timeline's strip, the histogram's bars


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
    return chart(
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
    colours = kind_colours(kinds)
    for k, us in kind_us.items():
        y += 20
        count, med = calls.get(k, (0, None))
        text = f"{count} requests · {us / SECOND / 60:.1f} node-min"
        text += "" if med is None else f" · median {med / SECOND:.1f} s"
        rows.append(_bar_row(y, k, us / total, text, f'data-kind="{escape(k)}"', colours[k]))
    return chart(y + 24, "kind mix", f'<g class="mix">{"".join(rows)}</g>')


def _bar_row(y: int, label: str, share: float, text: str, data: str, fill: str = STEP_FILL) -> str:
    width = (X1 - X0 - 260) * share
    return (
        f'<text x="{X0 - 8}" y="{y + 10}" text-anchor="end">{escape(short(label, 24))}</text>'
        f'<rect class="bar" {data} data-share="{share:.6f}" x="{X0}" y="{y}" '
        f'width="{max(width, 0.5):.1f}" height="13" fill="{fill}"/>'
        f'<text x="{X0 + width + 6:.1f}" y="{y + 10}">{escape(text)}</text>'
    )


def chart(height: float, label: str, inner: str, cls: str = "chart") -> str:
    return (
        f'<svg class="{cls}" viewBox="0 0 {W} {height:.0f}" '
        f'width="100%" role="img" aria-label="{label}">{inner}</svg>'
    )


# -- labels (the pages' too) -------------------------------------------------------------------


def kind_colours(kinds: Kinds) -> dict[str, str]:
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds.names)}


def kind_of(iv: Interval, kinds: Kinds) -> str:
    """A timed request's kind; "" for an occupancy without timing (module docstring)."""
    return kinds.classify(iv.tokens) if not iv.reason else ""


def short(text: str, most: int = 22) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def number(v: float) -> str:
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
