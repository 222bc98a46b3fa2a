"""exporter.web.report_page: the HTML report, parsed (support.dom) and checked against the
requests it was made of.

The inputs are journal lines of generated requests (support.workload), read by report.Builder as
`report` reads them; what the page must show is counted from the requests themselves, not from
what the exporter made of them.
"""

from __future__ import annotations

import random

import pytest

from exporter.accounting.lanes import BINS, MAX_RECTS
from exporter.base.times import SECOND
from exporter.report import text as report_text
from exporter.web import report_page as pages

from support.dom import parse, request_rects, self_contained_problems
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
