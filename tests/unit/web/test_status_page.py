"""exporter.web.status_page: the status page and /api/status, parsed (support.dom) and checked
against the requests they were made of (support.workload), not against what the exporter made of
them.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from collections.abc import Sequence

from exporter.accounting.accounting import Accounting
from exporter.accounting.lanes import RING_SIZE, Recent
from exporter.base.records import Event, EventKind, Interval
from exporter.base.times import SECOND
from exporter.web import status_page as pages

from support.dom import parse, request_rects
from support.settings import default_settings
from support.workload import (
    KINDS,
    NODES,
    T0,
    Req,
    expected_rects,
    generate,
)

HOSTILE = '<script>alert("x")</script>&amp;"\'node'

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
