"""The HTML report in a real browser (headless Chromium, support/browser.py): the DOM it builds
holds what the report was made of, the page asks for nothing (its Content-Security-Policy
reports no violation), and a screenshot of it is kept (its path printed) to look at.

The inputs are journal lines of generated requests (support.workload); what the DOM must hold
is counted from the generated requests themselves.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from exporter.accounting.lanes import BINS
from exporter.base.times import SECOND
from exporter.web import report_page as pages

from support.browser import dump_dom, screenshot, screenshot_dir
from support.dom import parse, request_rects
from support.workload import NODES, OUTCOMES, T0, expected_rects, generate, report_of

pytestmark = pytest.mark.slow  # (starts a real browser)


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


def test_the_report_in_chromium(tmp_path: Path) -> None:
    rng = random.Random(11)
    since, until = T0, T0 + 3 * 3600 * SECOND
    reqs = generate(rng, NODES, since, until, slots=3, gap_s=90.0)
    r = report_of(reqs, NODES, since, until)
    assert r.timeline is not None and not r.timeline.binned
    dom, console = load(pages.report_html(r), tmp_path / "report.html")
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
    keep_screenshot(tmp_path / "report.html", "report.png")
    keep_screenshot(tmp_path / "report.html", "report-phone.png", (390, 1400))


def test_a_binned_week_in_chromium(tmp_path: Path) -> None:
    rng = random.Random(12)
    nodes = (*NODES, "node-d")
    since, until = T0, T0 + 7 * 86400 * SECOND
    # busy in the (UTC) day, quiet at night
    reqs = [
        q
        for q in generate(rng, nodes, since, until, slots=2, gap_s=20.0, durations_s=(2.0, 50.0))
        if 6 <= (q.start_us // SECOND // 3600) % 24 < 20 or rng.random() < 0.1
    ]
    counted = [q for q in reqs if since <= q.end_us <= until]
    r = report_of(reqs, nodes, since, until)
    assert r.timeline is not None and r.timeline.binned
    dom, console = load(pages.report_html(r), tmp_path / "week.html")
    assert console == []
    page = parse(dom)
    assert page.lanes() == list(nodes) and page.find("rect", "request") == []
    bins = page.find("rect", "bin")
    assert sum(int(e.attrs["data-requests"]) for e in bins) == len(counted)
    for node in nodes:
        assert 0 < sum(1 for e in bins if e.lane == node) <= BINS
    assert page.in_group("rect", "histogram") and page.in_group("rect", "mix")
    keep_screenshot(tmp_path / "week.html", "report-week.png")


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
