"""exporter.web.status_page: the status page and /api/status, parsed (support.dom) and checked
against the requests they were made of (support.workload), not against what the exporter made of
them.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from collections import Counter
from collections.abc import Sequence

from exporter.accounting.accounting import Accounting
from exporter.accounting.history import History
from exporter.accounting.lanes import Recent
from exporter.base.records import Event, EventKind, Interval
from exporter.base.times import SECOND
from exporter.web import status_api, status_timeline
from exporter.web import status_page as pages
from exporter.web.fleet import StatusView

from support.dom import Element, Page, parse, request_rects
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
    *,
    down: Sequence[str] = (),
) -> StatusView:
    """What the daemon hands the status page: its snapshot, the recent intervals (as the parser
    makes them of the requests), the starts of the requests in flight, the history's samples
    (the accounting swept to a minute ago, in steps of a minute as a daemon would)."""
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
    origin = now_us - 7200 * SECOND
    acc = Accounting(nodes, default_settings(KINDS), origin_us=origin)
    acc.history = History(acc.node_names)
    for node in nodes:
        up = node not in down
        acc.source_state(node, up=up, caught_up=up, now_us=origin)
    acc.add_all(ivs)
    for node, starts in in_flight.items():
        for i, s in enumerate(starts):
            acc.add(Event(node, s, EventKind.STARTED, slot=9, task=90_000 + i))
    for t in range(origin, now_us - 60 * SECOND, 60 * SECOND):
        acc.advance_to(t)
    acc.advance_to(now_us - 60 * SECOND)
    return StatusView(
        now_us=now_us,
        snapshot=acc.snapshot(),
        kinds=KINDS,
        recent=recent.copy(),
        in_flight=in_flight,
        errors=errors or {},
        version="9.9.9",
        samples=tuple(acc.history.samples),
        sample_nodes=acc.history.nodes,
    )


def busy_us(reqs: Sequence[Req], node: str, lo: int, hi: int) -> int:
    """The node's busy (union) microseconds in [lo, hi), merged here from its requests."""
    spans = sorted((max(q.start_us, lo), min(q.end_us, hi)) for q in reqs if q.node == node)
    total, reach = 0, lo
    for s, e in spans:
        if e > max(s, reach):
            total += e - max(s, reach)
            reach = e
    return total


def rows_by_node(page: Page) -> dict[str, Element]:
    return {e.attrs["data-node"]: e for e in page.find("tr") if "data-node" in e.attrs}


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
    assert head[:2] == ["node", "now"]
    slots = head.index("in flight (oldest)")
    # b's server logs no launch lines: it is busy while it worked 5% of the last 5 minutes
    data = {n["name"]: n for n in json.loads(status_api.status_json(view))["nodes"]}
    b = "busy" if data["b.example.internal"]["busy_share_5m"] >= 0.05 else "idle"
    states = {n: e.attrs["data-state"] for n, e in rows_by_node(page).items()}
    assert states == {"node-a": "busy", "gpu3": "busy", "b.example.internal": b}
    # the busy first, in the config's order
    order = ["node-a", "b.example.internal", "gpu3"] if b == "busy" else [*in_flight, NODES[1]]
    assert [r[0] for r in rows] == order
    cells = {r[0]: r for r in rows}
    assert cells["node-a"][1] == "busy" and cells["node-a"][slots] == "2 / ? (5.0 min)"
    assert cells["gpu3"][slots] == "1 / ? (70.0 min)"
    assert cells["b.example.internal"][slots] == "not logged"
    assert cells["b.example.internal"][1] == {"busy": "busy (no launch lines)", "idle": "idle"}[b]
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
    head, first, *_ = page.rows()
    assert first[0] == HOSTILE and first[head.index("problem")] == error
    assert list(rows_by_node(page)) == nodes
    data = json.loads(status_api.status_json(view))
    assert [n["name"] for n in data["nodes"]] == nodes and data["nodes"][0]["last_error"] == error


def test_status_json_holds_what_the_page_draws() -> None:
    rng = random.Random(5)
    now = T0 + 3 * 3600 * SECOND
    lo = now - 3600 * SECOND
    reqs = [q for q in generate(rng, NODES, lo - 600 * SECOND, now - 30 * SECOND) if q.end_us < now]
    in_flight = {"node-a": [now - 300 * SECOND], "gpu3": [now - 42 * SECOND]}
    view = status_view(reqs, NODES, now, in_flight, {"gpu3": "journal: gone"})
    data = json.loads(status_api.status_json(view))
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
    # the strip: the mean number of nodes busy every 10 s, from the history's samples
    steps = data["concurrency"]
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(steps))
    until = round(data["figures_until"] * SECOND)
    assert steps[-1]["end"] * SECOND == until and until == (now - 60 * SECOND) // 10**7 * 10**7
    for st in steps:
        s, e = round(st["start"] * SECOND), round(st["end"] * SECOND)
        # (requests in flight are counted once they end: the daemon's watermark waits for them;
        # this accounting was swept past their starts, so they are in no step)
        mean = sum(busy_us(reqs, n, s, e) for n in NODES) / (e - s)
        assert abs(st["nodes"] - mean) < 1e-9, st
    strip = [
        (int(e.attrs["data-start"]), float(e.attrs["data-nodes"]))
        for e in page.in_group("rect", "concurrency")
    ]
    assert strip == [
        (round(s["start"] * SECOND), float(f"{s['nodes']:.3f}")) for s in steps if s["nodes"]
    ]


def test_the_busy_shares_are_each_nodes_over_5_minutes_and_the_hour() -> None:
    rng = random.Random(7)
    now = T0 + 3 * 3600 * SECOND
    reqs = [
        q for q in generate(rng, NODES, now - 7000 * SECOND, now - 60 * SECOND) if q.end_us < now
    ]
    view = status_view(reqs, NODES, now, {})
    data = json.loads(status_api.status_json(view))
    until = round(data["figures_until"] * SECOND)
    rows = rows_by_node(parse(pages.status_html(view)))
    for n in data["nodes"]:
        for key, window in (("5m", 300), ("1h", 3600)):
            share = busy_us(reqs, n["name"], until - window * SECOND, until) / (window * SECOND)
            assert abs(n[f"busy_share_{key}"] - share) < 1e-9
            assert float(rows[n["name"]].attrs[f"data-share-{key}"]) == round(share, 6)
        assert n["busy_share_1h_seconds"] == 3600.0
        assert (
            n["idle_seconds"] == (now - max(q.end_us for q in reqs if q.node == n["name"])) / SECOND
        )


def idle_run(down: Sequence[str] = (), stopped: Sequence[str] = ()) -> StatusView:
    """An hour: node-a idle for its last 22 minutes, the others busy 80% of every minute."""
    now = T0 + 3600 * SECOND
    reqs = [Req("node-a", now - 3600 * SECOND, now - 22 * 60 * SECOND, 700, "timed", 0, 1)]
    for i, n in enumerate(NODES[1:]):
        for m in range(60):
            s = now - 3600 * SECOND + m * 60 * SECOND
            reqs.append(Req(n, s, s + 48 * SECOND, 700, "timed", 0, 100 * i + m))
    view = status_view([q for q in reqs if q.end_us < now - 60 * SECOND], NODES, now, {}, down=down)
    if not stopped:
        return view
    snap = view.snapshot
    nodes = tuple(
        dataclasses.replace(n, server_up=0) if n.name in stopped else n for n in snap.nodes
    )
    return dataclasses.replace(view, snapshot=dataclasses.replace(snap, nodes=nodes))


def test_a_node_idle_while_the_others_work_is_marked_first() -> None:
    view = idle_run()
    page = parse(pages.status_html(view))
    rows = rows_by_node(page)
    assert rows["node-a"].attrs["data-state"] == "idle-while-others-work"
    assert {rows[n].attrs["data-state"] for n in NODES[1:]} == {"busy"}  # (80% of 5 min)
    head, *table = page.rows()
    assert table[0][0] == "node-a"  # (first: it needs attention)
    problem = table[0][head.index("problem")]
    assert (
        problem.startswith("idle for 22.0 min") and "while the 2 other nodes worked 80%" in problem
    )
    header = page.find("div", "attention")[0].text
    assert "1 idle while the others work" in header
    data = json.loads(status_api.status_json(view))
    assert data["summary"]["idle_while_others_work"] == 1
    assert data["nodes"][0]["state"] == "idle-while-others-work"


def test_down_sources_are_down_not_lagging_and_counted_first() -> None:
    view = idle_run(down=["gpu3"])
    page = parse(pages.status_html(view))
    head, *table = page.rows()
    assert table[0][0] == "gpu3" and table[0][head.index("lag")] == "down"
    assert table[0][head.index("problem")] == "journal not followed"
    assert rows_by_node(page)["gpu3"].attrs["data-state"] == "down"
    # the one other known node works 80%: node-a is still idle while the others work
    assert rows_by_node(page)["node-a"].attrs["data-state"] == "idle-while-others-work"
    assert "1 journal not followed" in page.find("div", "attention")[0].text


def test_a_stopped_server_is_down_and_not_one_of_the_others() -> None:
    view = idle_run(stopped=["node-a"])
    rows = rows_by_node(parse(pages.status_html(view)))
    assert rows["node-a"].attrs["data-state"] == "down"


def test_a_crowded_status_page_is_binned_from_the_history() -> None:
    rng = random.Random(6)
    now = T0 + 3600 * SECOND
    lo = now - 3600 * SECOND
    reqs = [
        q
        for q in generate(
            rng, NODES, lo - 600 * SECOND, now, slots=4, gap_s=0.2, durations_s=(0.05, 2.0)
        )
        if q.end_us < now
    ]
    view = status_view(reqs, NODES, now, {})
    kept = {n: [iv for iv in ivs if lo <= iv.end_us] for n, ivs in view.recent.items()}
    assert sum(len(v) for v in kept.values()) > status_timeline.STATUS_MAX_RECTS
    page = parse(pages.status_html(view))
    assert page.find("rect", "request") == [] and page.lanes() == list(NODES)
    bins = page.find("rect", "bin")
    assert bins and all("data-requests" not in e.attrs for e in bins)
    for e in bins:  # each bin: the node's busy share of it, merged here from the requests
        s, t = int(e.attrs["data-start"]), int(e.attrs["data-end"])
        assert abs(float(e.attrs["data-busy"]) - busy_us(reqs, e.lane or "", s, t) / (t - s)) < 1e-4
    data = json.loads(status_api.status_json(view))
    each = status_api.API_REQUESTS // len(NODES)
    for n in data["nodes"]:  # each node's newest: a bounded document
        newest = sorted(kept[n["name"]], key=lambda iv: iv.end_us)[-each:]
        assert len(n["requests"]) == min(each, len(kept[n["name"]]))
        assert {r["end"] for r in n["requests"]} == {iv.end_us / SECOND for iv in newest}


def test_a_thousand_nodes_make_a_bounded_page() -> None:
    nodes = [f"n{i:04}" for i in range(1000)]
    now = T0 + 3600 * SECOND
    reqs = [
        Req(
            n,
            now - 3000 * SECOND + k * 100 * SECOND,
            now - 2950 * SECOND + k * 100 * SECOND,
            700,
            "timed",
            0,
            i * 100 + k,
        )
        for i, n in enumerate(nodes)
        for k in range(25)
    ]
    view = status_view(reqs, nodes, now, {})
    page = parse(pages.status_html(view))
    assert len(rows_by_node(page)) == 1000
    assert len(page.lanes()) == status_timeline.TIMELINE_LANES
    assert len(page.find("rect", "bin")) <= status_timeline.TIMELINE_LANES * status_timeline.BINNED
    assert len(page.in_group("rect", "concurrency")) <= 360
    data = json.loads(status_api.status_json(view))
    assert sum(len(n["requests"]) for n in data["nodes"]) <= status_api.API_REQUESTS


def test_a_negative_slot_and_a_lone_surrogate_are_drawn_not_failed() -> None:
    now = T0 + 3600 * SECOND
    view = status_view([], ["a"], now, {}, errors={"a": "bad \udc80 byte"})
    odd = [
        Interval("a", now - 100 * SECOND, now - 90 * SECOND, 700, slot=-1),
        Interval("a", now - 80 * SECOND, now - 70 * SECOND, 700, slot=1),
    ]
    view = StatusView(**{**view.__dict__, "recent": {"a": tuple(odd)}})
    page = parse(pages.status_html(view))
    (track, *_) = page.find("rect", "track")  # the first lane's background
    top, height = float(track.attrs["y"]), float(track.attrs["height"])
    ys = [float(r.attrs["y"]) for r in page.find("rect", "request")]
    assert len(ys) == 2 and all(top <= y < top + height for y in ys), (top, height, ys)
    data = json.loads(status_api.status_json(view))
    assert data["nodes"][0]["last_error"] == "bad ? byte"  # (the byte it cannot encode)
