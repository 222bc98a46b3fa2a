"""exporter.web.report_page: the HTML report, parsed (support.dom) and checked against the
requests it was made of.

The inputs are journal lines of generated requests (support.workload), read by report.Builder as
`report` reads them; what the page must show is counted from the requests themselves, not from
what the exporter made of them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

import pytest

from exporter.accounting.lanes import BINS, MAX_RECTS
from exporter.base.times import SECOND
from exporter.report import text as report_text
from exporter.web import report_page as pages
from exporter.web import svg

from support.dom import Element, Page, parse, request_rects, self_contained_problems
from support.workload import (
    KINDS,
    NODES,
    OUTCOMES,
    T0,
    Req,
    expected_rects,
    generate,
    report_of,
)

HOSTILE = '<script>alert("x")</script>&amp;"\'node'


def busy_us(reqs: Sequence[Req], node: str, since: int, until: int) -> int:
    """The node's busy time in [since, until]: the union of its requests (every outcome), each
    clipped to the window."""
    spans = sorted(
        (max(q.start_us, since), min(q.end_us, until))
        for q in reqs
        if q.node == node and q.start_us < until and q.end_us > since
    )
    total, reach = 0, since
    for s, e in spans:
        total += max(0, e - max(s, reach))
        reach = max(reach, e)
    return total


def mix_us(reqs: Sequence[Req], since: int, until: int) -> dict[str, int]:
    """Wall time in [since, until] by the set of kinds of the timed requests running ("idle":
    none), each kind set named as the page names it (sorted, joined by +)."""
    edges = []
    for q in reqs:
        s, e = max(q.start_us, since), min(q.end_us, until)
        if q.outcome == "timed" and s < e:
            edges += [(s, 1, q.kind), (e, -1, q.kind)]
    edges.sort()
    out: dict[str, int] = {}
    running: dict[str, int] = {}
    at = since
    for t, step, kind in [*edges, (until, 0, "")]:
        label = "+".join(sorted(k for k, n in running.items() if n)) or "idle"
        out[label] = out.get(label, 0) + t - at
        at = t
        running[kind] = running.get(kind, 0) + step
    return out


def told(us: int) -> str:
    """A time as the charts' labels tell it: seconds below 2 min, minutes below 2 h, hours."""
    s = us / SECOND
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def rows(page: Page, group: str) -> list[tuple[str, str, Element]]:
    """A bar chart's rows, top down: (label, figures, bar)."""
    texts = page.in_group("text", group)
    labels = [e.text for e in texts if e.attrs.get("class") == "label"]
    figures = [e.text for e in texts if e.attrs.get("class") == "figure"]
    bars = [e for e in page.in_group("rect", group) if e.attrs.get("class") == "bar"]
    assert len(labels) == len(figures) == len(bars)
    return list(zip(labels, figures, bars, strict=True))


def seed_rows(pre: str, nodes: Sequence[str]) -> dict[str, tuple[str, str]]:
    """The text report's `busy time` (minutes) and `busy %` of each node, as printed."""
    out = {}
    for line in pre.splitlines():
        found = re.fullmatch(r"  (\S+) .* (\d+\.\d) min +(\d+\.\d)%", line)
        if found and found.group(1) in nodes:
            out[found.group(1)] = (found.group(2), found.group(3))
    assert sorted(out) == sorted(nodes)
    return out


# -- the report -----------------------------------------------------------------------------------


def test_the_report_draws_every_request_of_the_window() -> None:
    rng = random.Random(1)
    since, until = T0, T0 + 2 * 3600 * SECOND
    reqs = generate(rng, NODES, since, until)
    r = report_of(reqs, NODES, since, until)
    doc = pages.report_html(r)
    page = parse(doc)
    assert r.timeline is not None and not r.timeline.binned
    assert page.lanes() == list(NODES)
    expect = expected_rects(reqs, since, until)
    assert {o for c in expect.values() for _, o in c} == set(OUTCOMES)  # (every outcome is there)
    assert request_rects(page) == expect
    # each rect's real interval, and its kind by its tokens
    drawn = {
        (e.lane, int(e.attrs["data-start"]), int(e.attrs["data-end"]))
        for e in page.find("rect", "request")
    }
    assert drawn == {(q.node, q.start_us, q.end_us) for q in reqs if q.belongs(since, until)}
    assert not page.find("rect", "bin") and not page.find("rect", "in-flight")
    # the seed's tables, exactly
    (pre,) = page.find("pre")
    assert pre.text == report_text.to_text(r)
    # the strip, the histogram (a bar per number of nodes) and the mix
    steps = page.in_group("rect", "concurrency")
    assert steps and {float(e.attrs["data-nodes"]) for e in steps} <= {1.0, 2.0, 3.0}
    bars = page.in_group("rect", "histogram")
    assert [int(e.attrs["data-nodes"]) for e in bars] == list(range(len(NODES) + 1))
    shares = [float(e.attrs["data-share"]) for e in bars]
    assert sum(shares) == pytest.approx(1.0, abs=1e-4)
    mix = page.in_group("rect", "mix")
    assert {e.attrs["data-kind"] for e in mix if "data-kind" in e.attrs} == set(KINDS.names)
    assert "binned" not in doc


@pytest.mark.parametrize(("hours", "unit"), [(3, "h"), (1, "min")])
def test_the_busy_bars_are_each_nodes_share_of_the_window(hours: int, unit: str) -> None:
    """One bar per node, its share of the window counted from the requests themselves, and
    labelled with what the text report prints: its busy % to the digit, its busy time in hours
    from a 2 h window up (minutes below, the text's figure to the digit)."""
    since, until = T0, T0 + hours * 3600 * SECOND
    reqs = generate(random.Random(20 + hours), NODES, since, until, slots=3)
    r = report_of(reqs, NODES, since, until)
    page = parse(pages.report_html(r))
    busy = rows(page, "busy")
    assert [label for label, _, _ in busy] == [bar.attrs["data-node"] for _, _, bar in busy]
    assert [label for label, _, _ in busy] == list(NODES)
    (pre,) = page.find("pre")
    printed = seed_rows(pre.text, NODES)
    wall_s = until / SECOND - since / SECOND
    for node, figures, bar in busy:
        us = busy_us(reqs, node, since, until)
        assert 0.2 < us / (until - since) < 1  # (a share the bars can get wrong)
        assert float(bar.attrs["data-share"]) == pytest.approx(us / (until - since), abs=1e-6)
        assert float(bar.attrs["data-seconds"]) == pytest.approx(us / SECOND, abs=1e-5)
        minutes, percent = printed[node]
        assert percent == f"{100 * (us / SECOND) / wall_s:.1f}"
        shown = minutes if unit == "min" else f"{us / SECOND / 3600:.1f}"
        assert figures == f"{percent}% · {shown} {unit}"
        assert float(bar.attrs["width"].removesuffix("%")) == pytest.approx(
            100 * us / (until - since), abs=1e-3
        )
    # first in the document: before the tables, the timeline and the other charts
    order = [e.tag if e.tag == "pre" else e.attrs.get("class") for e in page.elements]
    assert order.index("busy") < order.index("pre") < order.index("lane")


def test_the_kinds_chart_colours_its_bars_and_heads_its_groups() -> None:
    """Wall time by the kinds running: each kind's colour, grey for idle, MIX_FILL for several
    kinds at once, each bar the share and the time counted from the requests; request time in the kinds'
    colours; each group under a heading of its own line, above its rows."""
    since, until = T0, T0 + 2 * 3600 * SECOND
    reqs = generate(random.Random(5), NODES, since, until, slots=2)
    r = report_of(reqs, NODES, since, until)
    page = parse(pages.report_html(r))
    colours = svg.kind_colours(KINDS)
    expect = mix_us(reqs, since, until)
    assert set(expect) == {"idle", "extraction", "reconcile", "extraction+reconcile"}
    wall = rows(page, "mix")
    mixes = [(label, figures, bar) for label, figures, bar in wall if "data-mix" in bar.attrs]
    assert [label for label, _, _ in mixes] == [
        "idle",
        "extraction",
        "reconcile",
        "extraction+reconcile",
    ]
    fills = {label: bar.attrs["fill"] for label, _, bar in mixes}
    assert fills == {
        "idle": svg.IDLE_FILL,
        "extraction": colours["extraction"],
        "reconcile": colours["reconcile"],
        "extraction+reconcile": svg.MIX_FILL,
    }
    assert len({svg.IDLE_FILL, svg.MIX_FILL, *colours.values(), svg.STEP_FILL}) == 5
    for label, figures, bar in mixes:
        share = expect[label] / (until - since)
        assert float(bar.attrs["data-share"]) == pytest.approx(share, abs=1e-6)
        assert figures == f"{100 * share:.1f}% · {told(expect[label])}"
    requests = [(label, bar) for label, _, bar in wall if "data-kind" in bar.attrs]
    assert [label for label, _ in requests] == list(KINDS.names)
    assert {label: bar.attrs["fill"] for label, bar in requests} == colours
    # the headings: on lines of their own, each above its group's rows, at the left
    heads = [e for e in page.in_group("text", "mix") if e.attrs.get("class") == "heading"]
    assert [e.text for e in heads] == ["Wall time, by the kinds running", "Request time, by kind"]
    assert all(e.attrs["x"] == "0" for e in heads)
    head_y = [float(e.attrs["y"]) for e in heads]
    bar_y = [float(bar.attrs["y"]) for _, _, bar in wall]
    assert head_y[0] < min(bar_y)
    assert max(float(b.attrs["y"]) for _, _, b in mixes) < head_y[1]
    assert head_y[1] < min(float(b.attrs["y"]) for _, b in requests)
    rects = page.in_group("rect", "mix")
    for y in head_y:  # (no bar, and no bar's background, on a heading's line)
        assert all(not (float(e.attrs["y"]) - 16 < y < float(e.attrs["y"]) + 20) for e in rects)
    # the key names the two colours that are no kind's
    key = page.find("div")[-1]
    assert "idle" in key.text and "several kinds at once" in key.text


def test_the_histograms_axis_is_labelled_at_the_top() -> None:
    since, until = T0, T0 + 3600 * SECOND
    r = report_of(generate(random.Random(6), NODES, since, until), NODES, since, until)
    page = parse(pages.report_html(r))
    texts = page.in_group("text", "histogram")
    (label,) = [e for e in texts if "share of wall time" in e.text]
    bars = page.in_group("rect", "histogram")
    assert float(label.attrs["y"]) < min(float(e.attrs["y"]) for e in bars)
    assert all(float(label.attrs["y"]) < float(e.attrs["y"]) for e in texts if e is not label)


def test_a_report_without_its_timeline_prints_the_same_and_draws_nothing() -> None:
    """(`report --format text|json` builds no timeline: the figures are the same without it)"""
    since, until = T0, T0 + 3600 * SECOND
    reqs = generate(random.Random(9), NODES, since, until)
    full = report_of(reqs, NODES, since, until)
    bare = report_of(reqs, NODES, since, until, timeline=False)
    assert full.timeline is not None and full.timeline.requests() > 0
    assert bare.timeline is None
    assert report_text.to_text(bare) == report_text.to_text(full)
    assert report_text.render(bare, "json") == report_text.render(full, "json")
    with pytest.raises(ValueError, match="timeline"):
        pages.report_html(bare)


def test_the_report_is_self_contained() -> None:
    rng = random.Random(2)
    nodes = [HOSTILE, "n2"]
    reqs = generate(rng, nodes, T0, T0 + 600 * SECOND)
    r = report_of(reqs, nodes, T0, T0 + 600 * SECOND)
    r.errors[HOSTILE].append("<img src=x onerror=alert(1)>")  # (as text: "src=" stays)
    doc = pages.report_html(r)
    assert self_contained_problems(doc) == []
    page = parse(doc)
    (csp,) = [
        e for e in page.find("meta") if e.attrs.get("http-equiv") == "Content-Security-Policy"
    ]
    assert csp.attrs["content"] == "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    assert page.lanes() == nodes  # (escaped, the name reads back whole)
    assert page.find("script") == [] and page.find("img") == []
    assert "<img src=x onerror" in page.find("ul")[0].text


def test_the_checker_finds_what_would_load() -> None:
    """(self_contained_problems can fail)"""
    for bad in (
        '<img src="x.png">',
        "<script>1</script>",
        "a{background:url(x.png)}",
        '<a href="https://x">',
    ):
        assert self_contained_problems(f"<p>{bad}</p>")
    assert (
        self_contained_problems("<style>a{background:url(data:image/png;base64,AA)}</style>") == []
    )
    assert self_contained_problems("<p>&lt;img src=x&gt;</p>") == []  # (text is no element)


# bound of a binned report: the tables and charts, plus per node per bin one bin rect, plus per
# bin one step of the strip (each with its <title>)
BINNED_BASE_BYTES = 64 * 1024
BYTES_PER_BIN = 400


def test_a_week_of_200k_requests_is_binned_and_bounded() -> None:
    rng = random.Random(3)
    nodes = ("a", "b", "c", "d")
    since, until = T0, T0 + 7 * 86400 * SECOND
    reqs = generate(rng, nodes, since, until, gap_s=2.5, durations_s=(2.0, 40.0))
    counted = [q for q in reqs if since <= q.end_us <= until]
    assert len(counted) > 200_000
    r = report_of(reqs, nodes, since, until)
    doc = pages.report_html(r)
    page = parse(doc)
    assert r.timeline is not None and r.timeline.binned and page.find("rect", "request") == []
    assert page.lanes() == list(nodes)
    bins = page.find("rect", "bin")
    assert sum(int(e.attrs["data-requests"]) for e in bins) == len(counted)
    for node in nodes:
        mine = [e for e in bins if e.lane == node]
        assert 0 < len(mine) <= BINS
        assert sum(int(e.attrs["data-requests"]) for e in mine) == sum(
            1 for q in counted if q.node == node
        )
        assert all(0 <= float(e.attrs["data-busy"]) <= 1 for e in mine)
    assert len(page.in_group("rect", "concurrency")) <= BINS
    assert "binned" in doc and f"{r.timeline.bins} bins of" in doc
    assert len(doc.encode()) <= BINNED_BASE_BYTES + BYTES_PER_BIN * BINS * (len(nodes) + 1)
    print(f"binned report: {len(counted)} requests, {len(doc.encode())} bytes")


def test_max_rects_is_what_the_report_draws_one_by_one() -> None:
    """A window of exactly MAX_RECTS intervals is drawn exact, one more is binned; and a bin
    with requests that held their slot for no time (cancelled at once) is drawn too."""
    since, until = T0, T0 + 86400 * SECOND
    step = (until - since) // 2 // (MAX_RECTS + 1)  # (in the first half of the day)
    reqs = [
        Req("a", since + i * step, since + i * step + step // 2, 700, "timed", 0, i + 1)
        for i in range(MAX_RECTS + 1)
    ]
    at_once = [
        Req("a", until - k * 3600 * SECOND, until - k * 3600 * SECOND, 9, "cancelled", 1, 10**6 + k)
        for k in (1, 5)
    ]
    exact = report_of(reqs[:MAX_RECTS], ["a"], since, until)
    binned = report_of(reqs + at_once, ["a"], since, until)
    assert len(parse(pages.report_html(exact)).find("rect", "request")) == MAX_RECTS
    page = parse(pages.report_html(binned))
    assert page.find("rect", "request") == []
    bins = page.find("rect", "bin")
    assert sum(int(e.attrs["data-requests"]) for e in bins) == MAX_RECTS + 1 + len(at_once)
    idle = [e for e in bins if float(e.attrs["data-busy"]) == 0]
    assert [int(e.attrs["data-requests"]) for e in idle] == [1, 1]
