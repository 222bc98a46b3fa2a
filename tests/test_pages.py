"""exporter.pages: the status page, /api/status and the HTML report, parsed (html.parser) and
checked against the requests they were made of.

The report's inputs are journal lines (`journal`, one node's, from `Req`s: launch, timing or
cancel/error line, release), read by report.Builder as `report` reads them; what each page
must show is counted from the `Req`s themselves, not from what the exporter made of them.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser

import pytest

from exporter import pages, report
from exporter.accounting import SECOND, Accounting
from exporter.kinds import Kinds, split_rules
from exporter.logline import Batch, Event, EventKind, Interval, LogLine
from exporter.timeline import BINS, MAX_RECTS, RING_SIZE, Recent

T0 = 1_790_062_375 * SECOND  # 2026-09-22T07:32:55Z
KINDS = Kinds(split_rules(600))
OUTCOMES = ("timed", "cancelled", "error", "untimed")
HOSTILE = '<script>alert("x")</script>&amp;"\'node'


# -- inputs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Req:
    """One request as the journal will tell it: busy on `slot` during [start_us, end_us]."""

    node: str
    start_us: int
    end_us: int
    tokens: int
    outcome: str  # one of OUTCOMES
    slot: int
    task: int

    @property
    def kind(self) -> str:
        return KINDS.classify(self.tokens) if self.outcome == "timed" else ""

    def belongs(self, since_us: int, until_us: int) -> bool:
        """On the timeline of [since, until]: counted (its end inside) or reaching past it."""
        return since_us <= self.end_us <= until_us or self.start_us < until_us < self.end_us


def journal(node: str, reqs: Iterable[Req]) -> list[LogLine]:
    """The journal lines of one node's requests, in journal order (era D: a `total time` line
    for a timed request; a cancel or send_error line, or neither, before an untimed release)."""
    entries: list[tuple[int, str]] = []
    for r in reqs:
        head = f"id  {r.slot} | task {r.task} |"
        entries.append((r.start_us, f"slot launch_slot_: {head} processing task"))
        if r.outcome == "timed":
            ms = (r.end_us - r.start_us) / 1000
            entries.append(
                (
                    r.end_us,
                    f"slot print_timing: {head}       total time = {ms:10.2f} ms / {r.tokens:5d} tokens",
                )
            )
        elif r.outcome == "cancelled":
            entries.append((r.end_us, f"srv          stop: cancel task, id_task = {r.task}"))
        elif r.outcome == "error":
            entries.append((r.end_us, f"srv    send_error: task id = {r.task}, error: too long"))
        entries.append(
            (
                r.end_us,
                f"slot      release: {head} stop processing: n_tokens = {r.tokens}, truncated = 0",
            )
        )
    entries.sort(key=lambda e: e[0])  # (stable: a request's lines of one time keep their order)
    return [LogLine(node, t, "", 4242, m) for t, m in entries]


def generate(
    rng: random.Random,
    nodes: Sequence[str],
    since_us: int,
    until_us: int,
    *,
    slots: int = 2,
    gap_s: float = 60.0,
    durations_s: tuple[float, float] = (2.0, 60.0),
    weights: Sequence[int] = (90, 4, 2, 4),
) -> list[Req]:
    """Requests on every slot of every node, one after another with random gaps, from a little
    before the window to a little after it; durations are multiples of 10 us (what `total
    time` logs)."""
    out = []
    for node in nodes:
        task = 1
        for slot in range(slots):
            t = since_us - rng.randrange(0, 120 * SECOND)
            while t < until_us + 30 * SECOND:
                d = rng.randrange(int(durations_s[0] * 100_000), int(durations_s[1] * 100_000)) * 10
                outcome = rng.choices(OUTCOMES, weights)[0]
                out.append(Req(node, t, t + d, rng.randint(50, 1200), outcome, slot, task))
                task += 1
                t += d + 20_000 + int(rng.expovariate(1 / gap_s) * SECOND)
    return out


def report_of(
    reqs: Sequence[Req], nodes: Sequence[str], since_us: int, until_us: int
) -> report.Report:
    builder = report.Builder(nodes, KINDS, since_us, until_us)
    for node in nodes:
        lines = journal(node, [r for r in reqs if r.node == node])
        for i in range(0, len(lines), 5000):  # (batches, as a source hands them over)
            builder.add(Batch(node, tuple(lines[i : i + 5000])))
    return builder.finish()


# -- reading the pages ----------------------------------------------------------------------------


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    lane: str | None  # data-node of the lane it is in
    groups: tuple[str, ...]  # classes of the <g> elements it is in
    text: str = ""  # its own text and its children's (a rect's <title>)


class Page(HTMLParser):
    """Every element of a document, with the lane and groups it is in."""

    VOID = frozenset({"meta", "link", "br", "img", "input", "hr", "wbr", "source"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.open: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        lane = next((e.attrs.get("data-node") for e in reversed(self.open) if is_lane(e)), None)
        groups = tuple(e.attrs.get("class", "") for e in self.open if e.tag == "g")
        el = Element(tag, {k: v or "" for k, v in attrs}, lane, groups)
        self.elements.append(el)
        if tag not in self.VOID:
            self.open.append(el)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.open.pop()

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            if self.open.pop().tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for el in self.open:
            el.text += data

    def find(self, tag: str, cls: str | None = None) -> list[Element]:
        return [
            e
            for e in self.elements
            if e.tag == tag and (cls is None or e.attrs.get("class") == cls)
        ]

    def rows(self) -> list[list[str]]:
        """The text of each table row's cells (th or td)."""
        rows: list[list[str]] = []
        for e in self.elements:
            if e.tag == "tr":
                rows.append([])
            elif e.tag in ("td", "th") and rows:
                rows[-1].append(e.text)
        return rows

    def lanes(self) -> list[str]:
        return [e.attrs["data-node"] for e in self.elements if is_lane(e)]

    def in_group(self, tag: str, group: str) -> list[Element]:
        return [e for e in self.elements if e.tag == tag and group in e.groups]


def is_lane(e: Element) -> bool:
    return e.tag == "g" and e.attrs.get("class") == "lane"


def parse(doc: str | bytes) -> Page:
    page = Page()
    page.feed(doc.decode() if isinstance(doc, bytes) else doc)
    page.close()
    return page


def self_contained_problems(doc: str) -> list[str]:
    """What would make a document load or run something: a URL, an element that loads or
    runs, an attribute that names something to load, a style that imports."""
    problems = [m for m in ("http://", "https://", "<script", "@import") if m in doc]
    problems += [m.group(0) for m in re.finditer(r"url\((?!\s*['\"]?data:)[^)]*\)", doc)]
    for e in parse(doc).elements:
        if e.tag in ("script", "iframe", "object", "embed", "link", "img", "image", "use"):
            problems.append(f"<{e.tag}>")
        problems += [
            f"{e.tag} {a}=" for a in e.attrs if a in ("src", "href", "xlink:href", "srcset")
        ]
        problems += [f"{e.tag} {a}=" for a in e.attrs if a.startswith("on")]
    return problems


def request_rects(page: Page) -> dict[str, Counter[tuple[str, str]]]:
    """Per lane, the request rects by (kind, outcome)."""
    out: dict[str, Counter[tuple[str, str]]] = {}
    for e in page.find("rect", "request"):
        assert e.lane is not None, e.attrs
        out.setdefault(e.lane, Counter())[e.attrs["data-kind"], e.attrs["data-outcome"]] += 1
    return out


def expected_rects(
    reqs: Iterable[Req], since_us: int, until_us: int
) -> dict[str, Counter[tuple[str, str]]]:
    out: dict[str, Counter[tuple[str, str]]] = {}
    for r in reqs:
        if r.belongs(since_us, until_us):
            out.setdefault(r.node, Counter())[r.kind, r.outcome] += 1
    return out


# -- the report -----------------------------------------------------------------------------------


NODES = ("node-a", "b.example.internal", "gpu3")


def test_the_report_draws_every_request_of_the_window() -> None:
    rng = random.Random(1)
    since, until = T0, T0 + 2 * 3600 * SECOND
    reqs = generate(rng, NODES, since, until)
    r = report_of(reqs, NODES, since, until)
    doc = pages.report_html(r)
    page = parse(doc)
    assert not r.timeline.binned
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
    assert pre.text == report.to_text(r)
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
    assert r.timeline.binned and page.find("rect", "request") == []
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
    acc = Accounting(nodes, KINDS, origin_us=now_us - 7200 * SECOND)
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
    assert sum(len(n["requests"]) for n in data["nodes"]) == total
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
