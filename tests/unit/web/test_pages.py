"""exporter.web.pages: the status page, /api/status and the HTML report, parsed (support.dom) and
checked against the requests they were made of.

The report's inputs are journal lines of generated requests (support.workload), read by
report.Builder as `report` reads them; what each page must show is counted from the requests
themselves, not from what the exporter made of them.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from collections.abc import Sequence

import pytest

from exporter.accounting.accounting import Accounting
from exporter.accounting.lanes import BINS, MAX_RECTS, RING_SIZE, Recent
from exporter.base.records import Event, EventKind, Interval
from exporter.base.times import SECOND
from exporter.report import text as report_text
from exporter.web import pages

from support.dom import parse, request_rects, self_contained_problems
from support.settings import default_settings
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


# -- the status page -------------------------------------------------------------------------------


def status_view(
    reqs: Sequence[Req],
    nodes: Sequence[str],
    now_us: int,
    in_flight: dict[str, list[int]],
    errors: dict[str, str] | None = None,
) -> pages.StatusView:
    """What the daemon hands the status page: its snapshot, the recent intervals (as the parser
    makes them of the requests), the starts of the requests in flight."""
    ivs = [
        Interval(
            q.node,
            q.start_us,
            q.end_us,
            q.tokens if q.outcome == "timed" else None,
            slot=q.slot,
            reason="" if q.outcome == "timed" else q.outcome,
        )
        for q in sorted(reqs, key=lambda q: q.end_us)
    ]
    recent = Recent(nodes)
    recent.add_all(ivs)
    acc = Accounting(nodes, default_settings(KINDS), origin_us=now_us - 7200 * SECOND)
    acc.add_all(ivs)
    for node, starts in in_flight.items():
        for i, s in enumerate(starts):
            acc.add(Event(node, s, EventKind.STARTED, slot=9, task=90_000 + i))
    acc.advance_to(now_us - 60 * SECOND)
    return pages.StatusView(
        now_us=now_us,
        snapshot=acc.snapshot(),
        kinds=KINDS,
        recent=recent.copy(),
        in_flight=in_flight,
        errors=errors or {},
        version="9.9.9",
    )


def test_the_status_page_shows_each_node_its_requests_and_those_in_flight() -> None:
    rng = random.Random(4)
    now = T0 + 3 * 3600 * SECOND
    lo = now - 3600 * SECOND
    reqs = [
        q for q in generate(rng, NODES, lo - 1800 * SECOND, now - 60 * SECOND) if q.end_us < now
    ]
    in_flight = {"node-a": [now - 300 * SECOND, now - 5 * SECOND], "gpu3": [lo - 600 * SECOND]}
    view = status_view(reqs, NODES, now, in_flight)
    doc = pages.status_html(view).decode()
    page = parse(doc)
    assert page.find("script") == []
    metas = {
        e.attrs.get("http-equiv") or e.attrs.get("name"): e.attrs.get("content")
        for e in page.find("meta")
    }
    assert metas["refresh"] == "10" and metas["viewport"] == "width=device-width, initial-scale=1"
    assert page.lanes() == list(NODES)
    expect = expected_rects(reqs, lo, now)
    assert sum(1 for q in reqs if q.end_us < lo) > 0  # (some are older than the window)
    assert request_rects(page) == expect
    flights = page.find("rect", "in-flight")
    assert sorted((e.lane, int(e.attrs["data-start"])) for e in flights) == sorted(
        (n, s) for n, starts in in_flight.items() for s in starts
    )
    head, *rows = page.rows()
    assert head[:4] == ["node", "now", "slots in use", "in flight (oldest)"]
    assert [r[0] for r in rows] == list(NODES)
    assert [r[1] for r in rows] == ["busy", "idle", "busy"]
    assert rows[0][2] == "2 / ?"  # its two in flight (the server named no slots)
    assert rows[0][3] == "2 (5.0 min)" and rows[1][3] == "0" and rows[2][3] == "1 (70.0 min)"
    assert page.in_group("rect", "concurrency")


def test_the_status_page_escapes_what_comes_from_outside() -> None:
    now = T0 + 3600 * SECOND
    nodes = [HOSTILE, "plain"]
    reqs = [Req(HOSTILE, now - 100 * SECOND, now - 90 * SECOND, 700, "timed", 0, 1)]
    error = "<script>alert(1)</script> & ssh: connection refused"
    view = status_view(reqs, nodes, now, {}, {HOSTILE: error})
    doc = pages.status_html(view).decode()
    assert "<script" not in doc
    page = parse(doc)
    assert page.lanes() == nodes
    assert page.find("rect", "request")[0].lane == HOSTILE
    assert page.rows()[1][0] == HOSTILE and page.rows()[1][-1] == error
    data = json.loads(pages.status_json(view))
    assert [n["name"] for n in data["nodes"]] == nodes and data["nodes"][0]["last_error"] == error


def test_status_json_holds_what_the_page_draws() -> None:
    rng = random.Random(5)
    now = T0 + 3 * 3600 * SECOND
    lo = now - 3600 * SECOND
    reqs = [q for q in generate(rng, NODES, lo - 600 * SECOND, now - 30 * SECOND) if q.end_us < now]
    in_flight = {"node-a": [now - 300 * SECOND], "gpu3": [now - 42 * SECOND]}
    view = status_view(reqs, NODES, now, in_flight, {"gpu3": "journal: gone"})
    data = json.loads(pages.status_json(view))
    page = parse(pages.status_html(view))
    assert data["generated_at"] == now / SECOND and data["version"] == "9.9.9"
    assert data["window"] == {"start": lo / SECOND, "end": now / SECOND, "seconds": 3600.0}
    assert [n["name"] for n in data["nodes"]] == page.lanes() == list(NODES)
    drawn = request_rects(page)
    for n in data["nodes"]:
        got = Counter((q["kind"], q["outcome"]) for q in n["requests"])
        assert got == drawn[n["name"]] == expected_rects(reqs, lo, now)[n["name"]]
        assert n["in_flight"] == n["slots_in_use"] == len(in_flight.get(n["name"], []))
        assert n["busy"] == (n["name"] in in_flight)
        assert n["in_flight_starts"] == [s / SECOND for s in in_flight.get(n["name"], [])]
        mine = [q for q in reqs if q.node == n["name"]]
        assert n["last_end"] == max(q.end_us for q in mine) / SECOND
        timed = [q for q in n["requests"] if q["outcome"] == "timed"]
        assert all(q["kind"] == KINDS.classify(q["tokens"]) for q in timed)
    assert data["nodes"][0]["oldest_in_flight_age_seconds"] == 300.0
    assert data["nodes"][2]["last_error"] == "journal: gone"
    steps = data["concurrency"]
    assert steps[0]["start"] == lo / SECOND and steps[-1]["end"] == now / SECOND
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(steps))
    assert steps[-1]["nodes"] >= 2  # (the two in flight now)
    # the page's strip is the same steps (those with a node busy)
    strip = [
        (int(e.attrs["data-start"]), float(e.attrs["data-nodes"]))
        for e in page.in_group("rect", "concurrency")
    ]
    assert strip == [(round(s["start"] * SECOND), float(s["nodes"])) for s in steps if s["nodes"]]


def test_a_crowded_status_page_is_binned() -> None:
    rng = random.Random(6)
    now = T0 + 3600 * SECOND
    lo = now - 3600 * SECOND
    reqs = [
        q
        for q in generate(rng, NODES, lo, now, slots=4, gap_s=0.2, durations_s=(0.05, 2.0))
        if q.end_us < now
    ]
    view = status_view(reqs, NODES, now, {})
    kept = {n: [iv for iv in ivs if lo <= iv.end_us] for n, ivs in view.recent.items()}
    assert sum(len(v) for v in kept.values()) > pages.STATUS_MAX_RECTS
    page = parse(pages.status_html(view))
    assert page.find("rect", "request") == [] and page.lanes() == list(NODES)
    total = sum(int(e.attrs["data-requests"]) for e in page.find("rect", "bin"))
    assert total == sum(len(v) for v in kept.values())
    data = json.loads(pages.status_json(view))
    assert sum(n["requests_in_window"] for n in data["nodes"]) == total
    for n in data["nodes"]:  # the newest API_REQUESTS of each node: a bounded document
        newest = sorted(kept[n["name"]], key=lambda iv: iv.end_us)[-pages.API_REQUESTS :]
        assert len(n["requests"]) == min(pages.API_REQUESTS, len(kept[n["name"]]))
        assert {r["end"] for r in n["requests"]} == {iv.end_us / SECOND for iv in newest}
    # a ring holds the last RING_SIZE of a node: the page says when the window reaches further
    full = [n for n, ivs in view.recent.items() if len(ivs) == RING_SIZE and ivs[0].end_us > lo]
    assert full  # (this load fills them)
    text = parse(pages.status_html(view)).find("body")[0].text
    for n in full:
        assert f"only the last {RING_SIZE} intervals of {n} are kept" in text


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


def test_a_negative_slot_and_a_lone_surrogate_are_drawn_not_failed() -> None:
    now = T0 + 3600 * SECOND
    view = status_view([], ["a"], now, {}, errors={"a": "bad \udc80 byte"})
    odd = [
        Interval("a", now - 100 * SECOND, now - 90 * SECOND, 700, slot=-1),
        Interval("a", now - 80 * SECOND, now - 70 * SECOND, 700, slot=1),
    ]
    view = pages.StatusView(**{**view.__dict__, "recent": {"a": tuple(odd)}})
    page = parse(pages.status_html(view))
    (track, *_) = page.find("rect", "track")  # the first lane's background
    top, height = float(track.attrs["y"]), float(track.attrs["height"])
    ys = [float(r.attrs["y"]) for r in page.find("rect", "request")]
    assert len(ys) == 2 and all(top <= y < top + height for y in ys), (top, height, ys)
    data = json.loads(pages.status_json(view))
    assert data["nodes"][0]["last_error"] == "bad ? byte"  # (the byte it cannot encode)
