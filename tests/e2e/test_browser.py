"""The HTML report in a real browser (headless Chromium, support/browser.py): the DOM it builds
holds what the report was made of, the page asks for nothing (its Content-Security-Policy
reports no violation), it reads at a phone's 400 px (where its elements lie, support/positions.py:
nothing cut off, no label over another, the busy bars on the first screen), and screenshots of
it are kept (their paths printed) to look at.

The inputs are journal lines of generated requests (support.workload); what the DOM must hold
is counted from the generated requests themselves.
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.accounting.lanes import BINS
from exporter.base.times import SECOND
from exporter.web import report_page as pages
from exporter.web import svg
from exporter.web.document import document

from support.browser import dump_dom, screenshot, screenshot_dir
from support.dom import parse, request_rects
from support.positions import Box, framed_screenshot, positions
from support.workload import NODES, OUTCOMES, T0, Req, expected_rects, generate, report_of

pytestmark = pytest.mark.slow  # (starts a real browser)

PHONE = (400, 844)  # a phone's screen, CSS px
WEEK_NODES = (*NODES, "node-d")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG (its IHDR)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", head
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def load(doc: str, path: Path) -> tuple[str, list[str]]:
    """The DOM Chromium builds of `doc` (written to `path`), and its console messages."""
    path.write_text(doc, encoding="utf-8")
    console: list[str] = []
    return dump_dom(path, console), console


def keep_screenshot(path: Path, name: str, size: tuple[int, int] = (1280, 1400)) -> Path:
    shot = screenshot(path, screenshot_dir() / name, size)
    assert png_size(shot) == size
    print(f"screenshot: {shot}")
    return shot


@functools.cache
def three_hours() -> tuple[list[Req], str]:
    """Three hours of three nodes: the requests and their report page."""
    since, until = T0, T0 + 3 * 3600 * SECOND
    reqs = generate(random.Random(11), NODES, since, until, slots=3, gap_s=90.0)
    r = report_of(reqs, NODES, since, until)
    assert r.timeline is not None and not r.timeline.binned
    return reqs, pages.report_html(r)


@functools.cache
def a_week() -> tuple[list[Req], str]:
    """A week of four nodes, busy in the (UTC) day and quiet at night: the requests and their
    (binned) report page."""
    rng = random.Random(12)
    since, until = T0, T0 + 7 * 86400 * SECOND
    reqs = [
        q
        for q in generate(
            rng, WEEK_NODES, since, until, slots=2, gap_s=20.0, durations_s=(2.0, 50.0)
        )
        if 6 <= (q.start_us // SECOND // 3600) % 24 < 20 or rng.random() < 0.1
    ]
    r = report_of(reqs, WEEK_NODES, since, until)
    assert r.timeline is not None and r.timeline.binned
    return reqs, pages.report_html(r)


def test_the_report_in_chromium(tmp_path: Path) -> None:
    since, until = T0, T0 + 3 * 3600 * SECOND
    reqs, doc = three_hours()
    dom, console = load(doc, tmp_path / "report.html")
    assert console == []  # nothing blocked, nothing loaded
    page = parse(dom)
    assert page.lanes() == list(NODES)
    expect = expected_rects(reqs, since, until)
    assert {o for c in expect.values() for _, o in c} == set(OUTCOMES)
    assert request_rects(page) == expect
    assert len(page.in_group("rect", "histogram")) == len(NODES) + 1
    assert {e.attrs.get("data-kind") for e in page.in_group("rect", "mix")} >= {
        "extraction",
        "reconcile",
    }
    assert page.in_group("rect", "concurrency")
    busy = [e for e in page.in_group("rect", "busy") if e.attrs.get("class") == "bar"]
    assert [e.attrs["data-node"] for e in busy] == list(NODES)
    keep_screenshot(tmp_path / "report.html", "report.png")
    size = (PHONE[0], 1400)  # (a phone's width, the page's first charts)
    shot = framed_screenshot(doc, tmp_path, screenshot_dir() / "report-phone.png", *size)
    assert png_size(shot) == size
    print(f"screenshot: {shot}")


def test_a_binned_week_in_chromium(tmp_path: Path) -> None:
    nodes = WEEK_NODES
    since, until = T0, T0 + 7 * 86400 * SECOND
    reqs, doc = a_week()
    counted = [q for q in reqs if since <= q.end_us <= until]
    dom, console = load(doc, tmp_path / "week.html")
    assert console == []
    page = parse(dom)
    assert page.lanes() == list(nodes) and page.find("rect", "request") == []
    bins = page.find("rect", "bin")
    assert sum(int(e.attrs["data-requests"]) for e in bins) == len(counted)
    for node in nodes:
        assert 0 < sum(1 for e in bins if e.lane == node) <= BINS
    assert page.in_group("rect", "histogram") and page.in_group("rect", "mix")
    keep_screenshot(tmp_path / "week.html", "report-week.png")


def overlap(a: Box, b: Box) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and (a["top"] < b["bottom"] and b["top"] < a["bottom"])
    )


def within(b: Box, width: int) -> bool:
    return b["left"] >= 0 and b["right"] <= width


@pytest.mark.parametrize("window", [three_hours, a_week], ids=["three-hours", "week"])
def test_the_report_reads_at_400_px(
    tmp_path: Path, window: Callable[[], tuple[list[Req], str]]
) -> None:
    """On a phone's screen: the page does not scroll sideways, only the seed's tables and the
    timeline do, in their own boxes; the busy bars, the histogram and the kinds chart lie
    within the screen's width, each of their labels whole and over no other; the busy bars
    are on the first screen."""
    _, doc = window()
    width, height = PHONE
    boxes = positions(
        doc, tmp_path, width, height, "html, body > *, .top > *, svg.fluid, svg.fluid text"
    )
    (page,) = [b for b in boxes if b["tag"] == "html"]
    assert page["client_width"] == width and page["scroll_width"] <= width
    blocks = [b for b in boxes if b["tag"] not in ("html", "svg", "text")]
    assert blocks and all(within(b, width) for b in blocks), blocks
    scrolls = {
        b["tag"] + "." + b["attrs"].get("class", "")
        for b in blocks
        if b["scroll_width"] > b["client_width"]
    }
    assert scrolls == {"pre.tables", "div.wrap"}  # (they scroll inside: a phone is narrower)
    charts = {b["attrs"]["aria-label"]: b for b in boxes if b["tag"] == "svg"}
    assert set(charts) == {"busy share of each node", "nodes working at once", "kind mix"}
    assert all(within(chart, width) for chart in charts.values()), charts
    assert charts["busy share of each node"]["bottom"] <= height  # (on the first screen)
    labels = [b for b in boxes if b["tag"] == "text" and b["width"] > 0]  # (shown)
    assert len(labels) > 3 * len(charts)
    assert all(within(b, width) for b in labels), [b for b in labels if not within(b, width)]
    crossed = [
        (a["text"], b["text"])
        for i, a in enumerate(labels)
        for b in labels[i + 1 :]
        if overlap(a, b)
    ]
    assert crossed == []


@pytest.mark.parametrize("width", [PHONE[0], 801])
def test_a_histogram_of_any_size_keeps_its_labels_apart(tmp_path: Path, width: int) -> None:
    """Histograms of 1 to 30 columns, each bar at its widest labels (`119.9 min`), on a phone
    and on the narrowest screen that shows the labels marked wide: every label shown lies
    within its chart and over no other."""
    sizes = range(1, 31)
    charts = "".join(
        svg.histogram([7194 * SECOND] * n, n * 7194 * SECOND + (n > 1) * SECOND) for n in sizes
    )
    doc = document("histograms", "", f"<h1>histograms</h1>{charts}", pages.CSS)
    boxes = positions(doc, tmp_path, width, 900, "svg.fluid, svg.fluid text")
    frames = [b for b in boxes if b["tag"] == "svg"]
    assert len(frames) == len(sizes) and all(within(f, width) for f in frames)
    for n, frame in zip(sizes, frames, strict=True):
        mine = [
            b
            for b in boxes
            if b["tag"] == "text" and b["width"] > 0 and frame["top"] <= b["top"] < frame["bottom"]
        ]
        assert sum(b["text"].isdigit() for b in mine) >= min(n, 6)  # (the columns numbered)
        assert all(frame["left"] <= b["left"] and b["right"] <= frame["right"] for b in mine)
        crossed = [
            (a["text"], b["text"])
            for i, a in enumerate(mine)
            for b in mine[i + 1 :]
            if overlap(a, b)
        ]
        assert crossed == [], (n, width)
        if n <= 4:  # (on any screen, a few columns show their shares and times)
            assert sum(b["text"].endswith("%") for b in mine) == n
            assert sum(b["text"].endswith("min") for b in mine) == n


def test_the_position_check_sees_a_page_cut_off(tmp_path: Path) -> None:
    """(the checks above can fail: a block wider than the screen, and two labels on one spot)"""
    doc = (
        "<!DOCTYPE html><html><body style='margin:0'><div style='width:600px'>wide</div>"
        '<svg class="fluid" width="100%" height="40"><text x="10" y="20">one</text>'
        '<text x="12" y="22">two</text></svg></body></html>'
    )
    boxes = positions(doc, tmp_path, 400, 300, "html, div, text")
    (page, div, one, two) = boxes
    assert page["client_width"] == 400 and page["scroll_width"] == 600
    assert div["right"] == 600
    assert overlap(one, two) and one["text"] == "one"


def test_the_console_check_sees_what_a_page_would_load(tmp_path: Path) -> None:
    """(the console check can fail: a page with the report's policy that asks for an image)"""
    r = report_of(
        generate(random.Random(13), NODES[:1], T0, T0 + 60 * SECOND),
        NODES[:1],
        T0,
        T0 + 60 * SECOND,
    )
    doc = pages.report_html(r).replace(
        "</body>", '<img src="https://example.invalid/x.png"></body>'
    )
    _, console = load(doc, tmp_path / "bad.html")
    assert any("Content Security Policy" in line for line in console), console
