"""The status page shows at a glance which node sits idle while the others work, and which are down.

A generated run of seven nodes of one slot, ending a few seconds ago: `a`, `b`, `c` and `d`
busy nearly all the time (20-60 s requests, 2 s apart on average), `e` the same until 22
minutes before the end and idle since, and `f` and `g` file sources whose dump does not exist
(their journals are not followed). The real daemon follows the five dumps and fails on the two
missing ones. Once its figures reach the end of the dumps, one consistent view is taken: the
DOM headless Chromium builds of `/`, the page's HTML and /api/status, all of one history
sample (the same `figures_until` before and after). Then:
- the page marks `idle-while-others-work` exactly the nodes for which `promtool test rules`
  fires SmLlmNodeIdle on the same data (the five dumps through the backfill, `report --format
  openmetrics`, and the two missing sources as the daemon serves them), that set is `e`, and
  `f` and `g` are `down` and never marked;
- each node's busy shares of the last 5 minutes and the last hour (data-share-5m and
  data-share-1h, and the same in /api/status) equal `report --format json`'s busy seconds of
  the same windows over their length, and the busy time of the generated requests themselves;
- at 400 x 800 CSS px (support.positions: a frame of exactly that size) the attention header
  and the rows of `f`, `g` and `e`, with their state and problem, lie on the first screen and
  nothing of them sticks out right of 400 px (screenshots of the page, on a phone and on a
  desktop, are kept: their paths printed);
- the timeline's scroll container opens at now: the plot's right end (now) and the newest
  request are within the screen.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.base.times import SECOND, iso

from support import dashboard
from support.browser import dump_dom, screenshot_dir
from support.daemon_process import DaemonProcess, file_nodes
from support.dom import parse
from support.positions import Box, framed_screenshot, positions
from support.scrape import http_get, parse_metrics
from support.tools import REPO, require_tool, wait_for
from support.workload import Req, idle_while_others_work, journal, write_dump

pytestmark = pytest.mark.slow

WORKING = ("a", "b", "c", "d")
IDLE = "e"
DOWN = ("f", "g")
NODES = (*WORKING, IDLE, *DOWN)
IDLE_S = 22 * 60
WINDOW_S = 50 * 60  # the generated run (the daemon reads the last hour)
BIN_S = 10  # the history's samples: the backfill's step and promtool's evaluation interval
PHONE = (400, 800)  # CSS px: a phone's first screen
DESKTOP = (1280, 760)
TARGET = {"job": "sm-llm-exporter", "instance": "exporter:10027"}  # as a scrape would label it
TARGET_TEXT = "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(TARGET.items())) + "}"
STATES = ("down", "idle-while-others-work", "busy", "idle")  # the order of attention
MARK = "idle-while-others-work"
SHARE_ABS = 0.001  # 0.1% of the window


@dataclass(frozen=True)
class Seen:
    """One consistent view of the daemon: all of one history sample (`until_us`)."""

    tmp: Path
    reqs: list[Req]
    dumps: dict[str, Path]  # the followed nodes' dumps
    until_us: int  # figures_until: the newest sample, where both shares end
    api: dict[str, Any]  # /api/status
    page: str  # `/` as served
    rows: list[dict[str, str]]  # the DOM's node rows (their attributes), in page order
    header: list[str]  # the attention header's items
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]  # /metrics

    def api_node(self, name: str) -> dict[str, Any]:
        (node,) = [n for n in self.api["nodes"] if n["name"] == name]
        found: dict[str, Any] = node
        return found

    def states(self) -> dict[str, str]:
        return {r["data-node"]: r["data-state"] for r in self.rows}


def figures_until(url: str) -> tuple[int | None, dict[str, Any]]:
    status, body, _ = http_get(url + "/api/status")
    assert status == 200, body[:500]
    data: dict[str, Any] = json.loads(body)
    until = data["figures_until"]
    return (None if until is None else round(until * SECOND)), data


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seen]:
    tmp = tmp_path_factory.mktemp("status-glance")
    until_us = (int(time.time()) - 2) * SECOND
    reqs = idle_while_others_work((*WORKING, IDLE), IDLE, until_us, WINDOW_S, IDLE_S)
    dumps = {n: tmp / f"{n}.json" for n in (*WORKING, IDLE)}
    for node, path in dumps.items():
        write_dump(path, journal(node, [r for r in reqs if r.node == node]), "glance")
    # (paths no machine has: the screenshots kept show them, not a temporary directory's)
    missing = {n: Path("/srv/sm-llm-dumps") / f"{n}.json" for n in DOWN}
    assert not any(p.exists() for p in missing.values()), missing
    # stall_seconds: the two missing sources stop holding the figures after 5 s, not 5 min
    config = {
        "nodes": file_nodes({**dumps, **missing}),
        "since": "-1h",
        "slots": 1,
        "stall_seconds": 5,
    }
    with DaemonProcess(tmp / "daemon", config) as d:
        d.start()
        url = d.url

        def caught_up() -> int | None:
            at, _ = figures_until(url)
            return at if at is not None and at >= until_us - BIN_S * SECOND else None

        wait_for(caught_up, 40, "figures up to the end of the dumps")

        def consistent() -> Seen | None:
            before, api = figures_until(url)
            status, page, _ = http_get(url + "/")
            assert status == 200
            dumped = dump_dom(url + "/")
            dom = parse(dumped)
            metrics = parse_metrics(http_get(url + "/metrics")[1].decode())
            after, _ = figures_until(url)
            if before is None or before != after:
                return None  # (a sample was taken meanwhile: look again)
            rows = [e.attrs for e in dom.elements if e.tag == "tr" and "data-node" in e.attrs]
            (head,) = re.findall(r'<div class="attention">(.*?)</div>', dumped, re.DOTALL)
            header = [html.unescape(t) for t in re.findall(r"<span[^>]*>(.*?)</span>", head)]
            return Seen(tmp, reqs, dumps, before, api, page.decode(), rows, header, metrics)

        found = wait_for(consistent, 40, "a view of one history sample")
        d.close(grace=10)
    yield found


# -- the mark: where promtool fires SmLlmNodeIdle -------------------------------------------


def rule_names() -> set[str]:
    """The series names the rules read."""
    groups = yaml.safe_load(dashboard.RULES.read_text(encoding="utf-8"))["groups"]
    exprs = " ".join(str(r["expr"]) for g in groups for r in g["rules"])
    return set(re.findall(r"\bsmllm_[a-z0-9_]+\b", exprs))


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+) (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
Series = dict[tuple[str, tuple[tuple[str, str], ...]], dict[int, float]]


def backfilled(files: list[Path], names: set[str], since_us: int) -> Series:
    """The backfill's samples of the series named `names`: per series, step index -> value."""
    out: Series = {}
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            m = SAMPLE.match(line)
            if m is None or m[1] not in names:
                continue
            labels = tuple(sorted(LABEL.findall(m[2] or "")))
            step = round((float(m[4]) * SECOND - since_us) / (BIN_S * SECOND))
            out.setdefault((m[1], labels), {})[step] = float(m[3])
    return out


def series_text(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    every = dict(labels) | TARGET
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(every.items()))
    return f"{name}{{{inner}}}"


def rendered(template: str, node: str, value: str) -> str:
    """An annotation of SmLlmNodeIdle as Prometheus renders it for `node`."""
    text = template.replace("{{ $labels.node }}", node)
    text = text.replace("{{ $labels.instance }}", TARGET["instance"])
    text = text.replace("{{ $value | humanizePercentage }}", value)
    assert "{{" not in text, f"a template this test does not render: {text}"
    return text


def node_idle_alert() -> dict[str, Any]:
    groups = yaml.safe_load(dashboard.RULES.read_text(encoding="utf-8"))["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == "SmLlmNodeIdle"]
    found: dict[str, Any] = rule
    return found


def test_the_idle_mark_is_where_promtool_fires_the_idle_alert(seen: Seen) -> None:
    states = seen.states()
    assert sorted(states) == sorted(NODES), states
    assert {n["name"]: n["state"] for n in seen.api["nodes"]} == states
    marked = sorted(n for n, s in states.items() if s == MARK)
    assert marked, f"no node marked {MARK}: {states}"
    assert marked == [IDLE], states  # (the run is made so: `e` alone idle while the others work)
    for node in DOWN:
        assert states[node] == "down", states
        assert seen.api_node(node)["followed"] is False
    # the rows needing attention first, then the others in the config's order
    order = [r["data-node"] for r in seen.rows]
    assert order == sorted(order, key=lambda n: (STATES.index(states[n]), NODES.index(n)))
    assert order[: len(DOWN) + 1] == [*DOWN, IDLE], order
    busy = sum(1 for s in states.values() if s == "busy")
    assert seen.header[:3] == [
        f"{len(DOWN)} journals not followed",
        "1 idle while the others work",
        f"{busy} of {len(NODES)} nodes busy",
    ], seen.header
    assert seen.api["summary"] == {
        "nodes": len(NODES),
        "busy": busy,
        "idle_while_others_work": 1,
        "asleep": 0,
        "sources_down": len(DOWN),
        "servers_down": 0,
    }
    # the idle node's wait is the run's: its last request ended IDLE_S before the run did
    assert seen.api_node(IDLE)["idle_seconds"] >= IDLE_S

    # The same data through promtool: the followed nodes' dumps through the backfill over the
    # history's span, and the missing sources as the daemon serves them (down all along).
    span_us = round(seen.api_node(IDLE)["busy_share_1h_seconds"] * SECOND)
    since_us = seen.until_us - span_us
    steps = span_us // (BIN_S * SECOND)
    names = rule_names()
    backfill = dashboard.Backfill(seen.dumps, since_us, seen.until_us, BIN_S)
    series = backfilled(backfill.write(seen.tmp / "om"), names, since_us)
    assert {dict(k[1]).get("node") for k in series} >= {*WORKING, IDLE}, sorted(series)
    served = {
        (name, labels): v
        for (name, labels), v in seen.metrics.items()
        if name in names and dict(labels).get("node") in DOWN
    }
    assert {dict(k[1])["node"] for k in served} == set(DOWN), sorted(served)
    assert all(v == 0 for (n, _), v in served.items() if n == "smllm_source_up")
    for key, v in served.items():
        series[key] = dict.fromkeys(range(steps + 1), v)
    input_series = [
        {
            "series": series_text(name, labels),
            "values": " ".join(repr(values[k]) if k in values else "_" for k in range(steps + 1)),
        }
        for (name, labels), values in sorted(series.items())
    ]
    rule = node_idle_alert()
    for node in marked:  # (SmLlmNodeIdle's value: the node's own share, 0 in this run)
        assert seen.api_node(node)["busy_share_5m"] == 0, node
    expected = [
        {
            "exp_labels": {"severity": rule["labels"]["severity"], "node": node, **TARGET},
            "exp_annotations": {
                k: rendered(str(v), node, "0%") for k, v in rule["annotations"].items()
            },
        }
        for node in marked
    ]
    known = sum(1 for s in states.values() if s != "down")
    test = {
        "rule_files": [str(dashboard.RULES)],
        "evaluation_interval": f"{BIN_S}s",
        "tests": [
            {
                "name": "the status page's run",
                "interval": f"{BIN_S}s",
                "input_series": input_series,
                "alert_rule_test": [
                    {
                        "eval_time": f"{steps * BIN_S}s",
                        "alertname": "SmLlmNodeIdle",
                        "exp_alerts": expected,
                    }
                ],
                "promql_expr_test": [
                    {
                        "expr": "smllm:known_nodes:count",
                        "eval_time": f"{steps * BIN_S}s",
                        "exp_samples": [
                            {"labels": f"smllm:known_nodes:count{TARGET_TEXT}", "value": known}
                        ],
                    }
                ],
            }
        ],
    }
    path = seen.tmp / "page_rules_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=10_000), encoding="utf-8")
    done = subprocess.run(
        [require_tool("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, (
        f"promtool does not fire SmLlmNodeIdle for exactly {marked} ({path}):\n"
        + (done.stdout + done.stderr)[-5000:]
    )


# -- the shares: the report's, for the same windows ------------------------------------------


def report_busy(seen: Seen, since_us: int, until_us: int) -> dict[str, float]:
    """`report --format json`'s busy seconds of each followed node over [since, until]."""
    argv = [sys.executable, "-m", "exporter", "report", "--format", "json"]
    argv += ["--since", iso(since_us), "--until", iso(until_us)]
    for node, path in seen.dumps.items():
        argv += ["--input", f"{node}={path}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["since"], report["until"]) == (since_us / SECOND, until_us / SECOND)
    return {n: float(v["busy_seconds"]) for n, v in report["nodes"].items()}


def generated_busy(reqs: list[Req], node: str, since_us: int, until_us: int) -> float:
    """The node's busy seconds over [since, until], from the requests themselves (one slot:
    they never overlap)."""
    spans = [(max(r.start_us, since_us), min(r.end_us, until_us)) for r in reqs if r.node == node]
    return sum(max(0, b - a) for a, b in spans) / SECOND


@pytest.mark.parametrize("share", ["5m", "1h"])
def test_busy_shares_equal_the_reports(seen: Seen, share: str) -> None:
    span_s = 300 if share == "5m" else seen.api_node(IDLE)["busy_share_1h_seconds"]
    span_us = round(span_s * SECOND)
    if share == "1h":
        assert 3000 * SECOND <= span_us <= 3600 * SECOND  # (the daemon read the last hour)
    since_us = seen.until_us - span_us
    report = report_busy(seen, since_us, seen.until_us)
    assert sorted(report) == sorted((*WORKING, IDLE))
    dom = {r["data-node"]: r for r in seen.rows}
    for node in NODES:
        page = dom[node].get(f"data-share-{share}")
        api = seen.api_node(node)[f"busy_share_{share}"]
        assert (page is None) == (api is None), node
        if node in DOWN:  # (nothing read: the report cannot read a missing dump either)
            assert api is None or api == 0, (node, api)
            continue
        assert page is not None and api is not None, (node, dom[node])
        assert float(page) == pytest.approx(api, abs=1e-6), node  # (6 decimals in the DOM)
        want = report[node] / (span_us / SECOND)
        assert api == pytest.approx(want, abs=SHARE_ABS), (node, share)
        assert float(page) == pytest.approx(want, abs=SHARE_ABS), (node, share)
        mine = generated_busy(seen.reqs, node, since_us, seen.until_us) / (span_us / SECOND)
        assert want == pytest.approx(mine, abs=1e-6), (node, share)
    # (the run is what it should be: the working nodes busy, the idle one not at all)
    if share == "5m":
        assert all(report[n] / 300 >= 0.5 for n in WORKING), report
        assert report[IDLE] == 0


# -- at a phone's width ----------------------------------------------------------------------


def boxes(seen: Seen, selector: str) -> list[Box]:
    return positions(seen.page, seen.tmp, *PHONE, selector)


def test_at_phone_width_what_needs_attention_is_on_the_first_screen(seen: Seen) -> None:
    width, height = PHONE
    for name, size in (("phone", PHONE), ("desktop", DESKTOP)):  # (kept, for people to look at)
        out = screenshot_dir() / f"status-page-attention-{name}.png"
        framed_screenshot(seen.page, seen.tmp, out, *size)
        print(f"status page screenshot (attention, {name}): {out}")
    found = boxes(seen, "html, .attention, .attention span, tr[data-node], tr[data-node] td")
    page = found[0]
    assert page["tag"] == "html" and page["scroll_width"] <= width, page  # (no sideways scroll)
    header = [b for b in found if b["tag"] == "div"]
    assert len(header) == 1
    for b in [*header, *(b for b in found if b["tag"] == "span")]:
        assert b["top"] >= 0 and b["bottom"] <= height, (b["text"], b)
        assert b["left"] >= 0 and b["right"] <= width, (b["text"], b)
    rows = {b["attrs"]["data-node"]: b for b in found if b["tag"] == "tr"}
    cells: dict[str, dict[str, Box]] = {}
    row = ""
    for b in found:
        if b["tag"] == "tr":
            row = b["attrs"]["data-node"]
        elif b["tag"] == "td":
            cells.setdefault(row, {})[b["attrs"]["class"]] = b
    for node in (*DOWN, IDLE):
        r = rows[node]
        assert 0 <= r["top"] < height, (node, r)
        # its name, state and problem wholly on the first screen
        for cls in ("node", "state", "problem"):
            c = cells[node][cls]
            assert c["height"] > 0 and c["bottom"] <= height, (node, cls, c)
        assert cells[node]["state"]["text"].strip(), node
        assert cells[node]["problem"]["text"].strip(), node
    for node, r in rows.items():  # nothing of any row sticks out right of the screen
        assert r["left"] >= 0 and r["right"] <= width, (node, r)
        assert r["scroll_width"] <= r["client_width"] + 1, (node, r)
        for cls, c in cells[node].items():
            if c["width"]:
                assert c["left"] >= 0 and c["right"] <= width, (node, cls, c)


def test_the_timeline_opens_at_now_on_a_phone(seen: Seen) -> None:
    width, _ = PHONE
    found = boxes(
        seen, ".wrap.now, .wrap.now svg.timeline, .wrap.now rect.track, .wrap.now rect.request"
    )
    (wrap,) = [b for b in found if b["tag"] == "div"]
    (plot,) = [b for b in found if b["tag"] == "svg"]
    assert wrap["left"] >= 0 and wrap["right"] <= width, wrap
    # the plot's right end, where its tracks end (now), is on the screen
    ends = [b["right"] for b in found if b["tag"] == "rect" and b["attrs"]["class"] == "track"]
    assert ends
    assert all(wrap["left"] < e <= wrap["right"] for e in ends), (ends, wrap)
    if wrap["scroll_width"] > wrap["client_width"]:  # (wider than the screen: it opens at now,
        assert plot["right"] == pytest.approx(wrap["right"], abs=1), (plot, wrap)  # its end)
    # the newest request is on the screen
    reqs = [b for b in found if b["tag"] == "rect" and b["attrs"]["class"] == "request"]
    newest = max(reqs, key=lambda b: int(b["attrs"]["data-end"]))
    assert wrap["left"] <= newest["left"] and newest["right"] <= wrap["right"], newest
