"""The dashboard and the rules against a real Prometheus scraping the real daemon.

The daemon runs the embedded demo (`sm-llm-exporter demo`: three nodes' journals, the last hour
written at once and each later line appended when its time comes). Debian's `prometheus` on
127.0.0.1 scrapes it every second and evaluates deploy/prometheus/rules.yml every second, with
the scrape config of deploy/prometheus/prometheus.yml pointed at the daemon. Then every query of
every dashboard panel, read from deploy/grafana/sm-llm-exporter.json with its variables
substituted as Grafana would, returns data through the HTTP API, both as the range query a
panel runs and as an instant query, and every recording and alert rule has evaluated with
health "ok". Panels inside collapsed rows are queried too. Those the demo cannot fill, and the
idle rule it may not make hold, are named in `ELSEWHERE` and `MAY_BE_EMPTY` with the reason and
the run that fills them.

Prometheus scrapes the daemon through a recording proxy: the scrapes asked for OpenMetrics
(Prometheus 2.42, Debian bookworm's, predates `scrape_protocols` (2.49) but prefers OpenMetrics
1.0.0 in its Accept header by default; a newer one is configured to), the daemon answered
OpenMetrics, and Prometheus took it: every panel's data above came that way.
"""

from __future__ import annotations

import http.server
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.exposition.render import OPENMETRICS_CONTENT_TYPE
from exporter.web.routes import wants_openmetrics

from support import dashboard as dash
from support import prometheus as prom
from support.daemon_process import DaemonProcess
from support.dashboard import finite_nonzero, grafana_regex, substitute
from support.scrape import http_get
from support.tools import REPO, wait_for

pytestmark = pytest.mark.slow

RULES = REPO / "deploy" / "prometheus" / "rules.yml"
EXAMPLE_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "sm-llm-exporter.json"

SCRAPE_SECONDS = 1
STEP_SECONDS = 1  # the range queries' step, Grafana's $__interval for them
# Grafana: $__rate_interval = max($__interval + scrape interval, 4 x scrape interval), with the
# data source's "scrape interval" set to Prometheus's (1 s here): max(1 s + 1 s, 4 s) = 4 s, so
# every rate() window holds about four samples, never fewer than the two rate() needs.
RATE_INTERVAL_SECONDS = max(STEP_SECONDS + SCRAPE_SECONDS, 4 * SCRAPE_SECONDS)
SETTLE_SECONDS = 3

# Rows whose panels the demo cannot fill: the reason, and where they are checked against a real
# Prometheus instead. Their queries must still be valid PromQL on the demo's.
ELSEWHERE = {
    dash.ROUTER_ROW: "the demo has no router-mode llama-server, so no smllm_model_* series; "
    "test_dashboard_router.py runs the row on a recorded router run",
    dash.INIT_ROW: "the demo has no init-timeline node, so no smllm_init_* series; "
    "test_dashboard_init_timeline.py runs the row on a recorded vllm-omni start-up",
    dash.DETAILS_ROW: "the demo's llama-servers never sleep, draft, queue for a model or log "
    "live decode lines; test_dashboard_llama_lines.py runs the row on recorded runs",
}
# Series present only while a condition holds, which the demo may or may not meet when this
# test looks: with their panels, and where they are shown to return data.
MAY_BE_EMPTY = {
    dash.IDLE_RULE: (
        dash.IDLE_PANEL,
        "present only while a node is idle while the others work; "
        "test_dashboard_idle.py runs it on a run where one is",
    ),
}
# Panels whose figures are legitimately all zero on the demo (nothing fails there); every other
# panel must show at least one finite nonzero value.
ZERO_ON_DEMO = {
    "Requests lost and server restarts",
    # (the demo's embeddings and cancels come a few a minute: a test's minute may have none;
    # tests/unit/ingest/test_recorded_runs.py holds these counters to a real server's)
    "Untimed slot occupancy by reason",
    "Reconnects, gaps, parse errors, late intervals",
    "Checkpoint errors",
    "Starting now",  # (the demo's start-ups are done within seconds: 0 the rest of the hour)
}


@dataclass
class Prometheus(prom.Api):
    started: float
    proxy: Proxy
    daemon: str

    def range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query_range", query=expr, start=start, end=end, step=STEP_SECONDS)
        result: list[dict[str, Any]] = data["result"]
        return result


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[str]:
    """The demo daemon on a port the kernel chose; its host:port."""

    def demo(_: Path) -> list[str]:
        listen = ["--listen", "127.0.0.1:0"]
        return [sys.executable, "-m", "exporter", "demo", "--dir", str(tmp_path / "demo"), *listen]

    with DaemonProcess(tmp_path / "daemon", command=demo) as d:
        d.start(40)
        yield f"127.0.0.1:{d.port}"
        d.close(grace=10)


@dataclass
class Proxy:
    """An HTTP proxy to the daemon that notes each scrape's Accept and the Content-Type of its
    answer."""

    target: str
    seen: list[tuple[str, str]] = field(default_factory=list)  # (Accept, Content-Type)
    address: str = ""

    def __enter__(self) -> Proxy:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                forward = {k: v for k, v in self.headers.items() if k.lower().startswith("accept")}
                status, body, headers = http_get(f"http://{proxy.target}{self.path}", forward)
                proxy.seen.append((self.headers.get("Accept", ""), headers["Content-Type"]))
                self.send_response(status)
                for key in ("Content-Type", "Content-Encoding"):
                    if key in headers:
                        self.send_header(key, headers[key])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def prometheus_config(tmp_path: Path, target: str, version: tuple[int, ...]) -> Path:
    """deploy/prometheus/prometheus.yml, scraping `target` every second, with our rules; asking
    for OpenMetrics first where the version has scrape_protocols."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    config["global"]["scrape_interval"] = f"{SCRAPE_SECONDS}s"
    config["global"]["evaluation_interval"] = f"{SCRAPE_SECONDS}s"
    config["rule_files"] = [str(RULES)]
    config.pop("alerting", None)  # no Alertmanager here
    (scrape,) = config["scrape_configs"]
    scrape["static_configs"][0]["targets"] = [target]
    if version >= (2, 49):
        scrape["scrape_protocols"] = ["OpenMetricsText1.0.0", "PrometheusText0.0.4"]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture
def prometheus(tmp_path: Path, daemon: str) -> Iterator[Prometheus]:
    with Proxy(daemon) as proxy:
        config = prometheus_config(tmp_path, proxy.address, prom.version(prom.binary()))
        with prom.started(config, tmp_path) as api:
            yield Prometheus(api.url, time.time(), proxy, daemon)


def label_values(prom: Prometheus, var: dict[str, Any], variables: dict[str, str]) -> list[str]:
    """A query variable's values: label_values(SELECTOR, LABEL), its variables substituted."""
    query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
    m = re.fullmatch(r"label_values\((.+), (\w+)\)", substitute(query, variables))
    assert m and "$" not in m.group(0), query
    values: list[str] = prom.get(f"/api/v1/label/{m.group(2)}/values", **{"match[]": m.group(1)})
    return values


def seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    m = re.fullmatch(r"now-(\d+)([smhdw])", duration)
    assert m, duration
    return int(m.group(1)) * units[m.group(2)]


def rule_groups(prom: Prometheus) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = prom.get("/api/v1/rules")["groups"]
    return groups


def every_rule_evaluated(prom: Prometheus) -> list[dict[str, Any]] | None:
    rules = [r for g in rule_groups(prom) for r in g["rules"]]
    if not rules or any(r["health"] == "unknown" for r in rules):
        return None
    return rules


def query_panels(
    prom: Prometheus, board: dict[str, Any], variables: dict[str, str], start: float, end: float
) -> tuple[int, list[str], list[str]]:
    """Every panel's every query, instant at `end` and ranged over [start, end]: how many were
    run, those without data and the panels with no finite nonzero value (the rows and panels
    the demo cannot fill excepted)."""
    # the series that may be absent on the demo, and whether they were there while it ran
    held = {name: bool(prom.range(name, start, end)) for name in MAY_BE_EMPTY}
    may_be_flat = {title for name, (title, _) in MAY_BE_EMPTY.items() if not held[name]}
    empty: list[str] = []
    flat: list[str] = []
    queried = 0
    for row, panel in ((p.row, p.panel) for p in dash.panels(board)):
        panel_values: list[dict[str, Any]] = []
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            expr = substitute(target["expr"], variables)
            assert "$" not in expr, f"unsubstituted variable in {expr}"
            instant = prom.instant(expr, end)  # (valid PromQL, or prom.get fails)
            ranged = prom.range(expr, start, end)
            queried += 1
            if row in ELSEWHERE:
                continue
            if not instant or not ranged:
                empty.append(f"{panel['title']} / {target['refId']}: {expr}")
            panel_values += ranged
        if row in ELSEWHERE:
            continue
        if panel["title"] not in ZERO_ON_DEMO | may_be_flat and not finite_nonzero(panel_values):
            seen = sorted({v for s in panel_values for _, v in s["values"]})
            flat.append(
                f"{panel['title']}: {substitute(panel['targets'][0]['expr'], variables)}"
                f" -> {seen[:5]}"
            )
    return queried, empty, flat


def test_dashboard_and_rules_on_real_prometheus(prometheus: Prometheus) -> None:
    prom = prometheus
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    expected_rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))

    # Enough data, already SETTLE_SECONDS ago so that the panels' range queries (which end at
    # the last step before now) hold it for a few steps: a request completed while scraped, and
    # the watermark moved between scrapes (busy shares are ratios of what was accounted, 0/0
    # until it moves; the demo's first move comes about 10 s after start).
    def settled(expr: str) -> bool:
        return finite_nonzero(prom.instant(expr, time.time() - SETTLE_SECONDS))

    wait_for(
        lambda: settled("sum(increase(smllm_requests_total[1m]))"),
        60,
        "a request completed while Prometheus scraped",
    )
    wait_for(
        lambda: settled("smllm:node_busy_share:rate5m"),
        60,
        "the watermark to move between scrapes",
    )

    # Every rule loaded and evaluated, none failing.
    rules = wait_for(lambda: every_rule_evaluated(prom), 30, "every rule evaluated")
    names = {r["name"] for r in rules}
    want = {r.get("record") or r["alert"] for g in expected_rules["groups"] for r in g["rules"]}
    assert names == want
    bad = [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    assert all(not r.get("lastError") for r in rules)
    for name in sorted(n for n in names if ":" in n and n not in MAY_BE_EMPTY):
        assert prom.instant(name), f"recording rule {name} produced nothing"

    # Every scrape asked for OpenMetrics first and was answered OpenMetrics, and Prometheus
    # read it as such (its metadata names a counter by its family, without _total).
    assert prom.proxy.seen
    for accept, content_type in prom.proxy.seen:
        assert wants_openmetrics(accept.lower().encode()), accept
        assert content_type == OPENMETRICS_CONTENT_TYPE, (accept, content_type)
    metadata = prom.get("/api/v1/metadata")
    assert metadata["smllm_requests"][0]["type"] == "counter", metadata.get("smllm_requests")
    assert "smllm_requests_total" not in metadata

    # The variables, as Grafana would resolve them, each query after the ones before it:
    # the one job, All of its instances, All of their nodes.
    board_vars = {v["name"]: v for v in board["templating"]["list"]}
    variables = {"datasource": "prometheus"}
    jobs = label_values(prom, board_vars["job"], variables)
    assert jobs == ["sm-llm-exporter"]
    variables["job"] = grafana_regex(jobs)
    instances = label_values(prom, board_vars["instance"], variables)
    assert instances == [prom.proxy.address]
    variables["instance"] = grafana_regex(instances)
    nodes = label_values(prom, board_vars["node"], variables)
    assert nodes == ["node0", "node1", "node2"]
    range_s = seconds(board["time"]["from"])
    variables |= {
        "node": grafana_regex(nodes),
        "__rate_interval": f"{RATE_INTERVAL_SECONDS}s",
        "__interval": f"{STEP_SECONDS}s",
        "__interval_ms": str(STEP_SECONDS * 1000),
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
        "__range_ms": str(range_s * 1000),
    }

    queried, empty, flat = query_panels(prom, board, variables, prom.started, time.time())
    assert queried >= 35
    assert not empty, "queries without data:\n" + "\n".join(empty)
    assert not flat, "panels with no finite nonzero value on the demo:\n" + "\n".join(flat)
    # every row the demo cannot fill still holds panels, and says why they are empty
    rows = {p.row for p in dash.panels(board)}
    assert set(ELSEWHERE) <= rows, set(ELSEWHERE) - rows
    for name, (title, _) in MAY_BE_EMPTY.items():
        assert name in names and any(p.title == title for p in dash.panels(board)), name

    # The annotation query is valid PromQL (it is empty while nothing fires).
    for annotation in board["annotations"]["list"]:
        if "expr" in annotation:
            prom.instant(substitute(annotation["expr"], variables), time.time())

    # Figures a reader would check: the shares are shares, the gauge counts nodes.
    for share in prom.instant("smllm:node_busy_share:rate5m"):
        assert 0 <= float(share["value"][1]) <= 1, share
    total = sum(float(s["value"][1]) for s in prom.instant("smllm:concurrency_share:rate5m"))
    assert total == pytest.approx(1), total
    (busy,) = prom.instant("smllm_nodes_busy")
    assert 0 <= float(busy["value"][1]) <= 3
