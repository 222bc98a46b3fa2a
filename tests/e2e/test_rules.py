"""deploy/prometheus and deploy/grafana: promtool checks and unit tests, and the dashboard's rules.

`promtool check rules`, `promtool test rules` (deploy/prometheus/rules_test.yml: series that must
fire every alert and series that must not) and `promtool check config` on the example run here
with the real Debian promtool. The rest reads the files: every alert carries a severity, a
summary, a description and a runbook, is tested both ways and is explained in docs/alerts.md; the
idle-node alert needs no launch lines, compares a node with the known nodes only (journal
followed, server not stopped) and leaves a stopped server to SmLlmServerDown; the
dashboard is provisionable (a stable uid, a `datasource` variable used by every panel and query,
a `job` variable and a multi-value `instance` variable that every query filters by, a
multi-value `node` variable used by every per-node query) and every panel says what it shows
and what to do; the metrics page's table names every metric the exporter serves and the rules
and the dashboard read, and no removed one.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.readme import metric_table
from support.tools import REPO, require_tool

PROMETHEUS = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yml"
RULES_TEST = PROMETHEUS / "rules_test.yml"
EXAMPLE_CONFIG = PROMETHEUS / "prometheus.yml"
GRAFANA = REPO / "deploy" / "grafana"
DASHBOARD = GRAFANA / "sm-llm-exporter.json"
PROVISIONING = GRAFANA / "provisioning"
# Where the alerts are explained.
DOCS = [REPO / "docs" / "alerts.md"]
METRICS_PAGE = REPO / "docs" / "metrics.md"
FAMILIES = REPO / "exporter" / "exposition" / "families.py"

DS = {"type": "prometheus", "uid": "${datasource}"}
# The filter on the exporter's target labels every query carries (the rules keep them).
TARGET = 'job=~"$job", instance=~"$instance"'
SEVERITIES = {"info", "warning", "critical"}
# Metrics without a node label (docs/metrics.md, "Metrics"); every other smllm_ metric is per node.
CLUSTER_METRICS = {
    "smllm_nodes_busy",
    "smllm_concurrency_seconds_total",
    "smllm_mix_seconds_total",
    "smllm_accounted_until_timestamp_seconds",
    "smllm_checkpoint_errors_total",
    "smllm_exporter_build_info",
}
# Gauges that only launch (start) lines move: the idle-node alert must not depend on them.
START_LINE_METRICS = {
    "smllm_node_busy",
    "smllm_nodes_busy",
    "smllm_node_requests_in_flight",
    "smllm_node_oldest_in_flight_start_timestamp_seconds",
}
# Metrics the exporter no longer serves, and what took their place.
REMOVED_METRICS = {
    "smllm_requests_cancelled_total": 'smllm_requests_untimed_total{reason="cancelled"}',
}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
NUMBER = re.compile(r"\d+(?:\.\d+)?[smhdwy]?")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def recordings() -> list[dict[str, Any]]:
    return [r for r in rules() if "record" in r]


ALERT_NAMES = [a["alert"] for a in alerts()]
RECORD_NAMES = [r["record"] for r in recordings()]


def names_in(expr: str) -> set[str]:
    """Metric and recorded-series names an expression reads (smllm_*, smllm:*, up)."""
    no_strings = re.sub(r'"[^"]*"', '""', expr)
    return {n for n in NAME.findall(no_strings) if n.startswith(("smllm_", "smllm:")) or n == "up"}


def reaches(expr: str) -> set[str]:
    """Every name an expression reads, itself or through the recording rules it uses."""
    defined = {r["record"]: str(r["expr"]) for r in recordings()}
    seen: set[str] = set()
    todo = list(names_in(expr))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(names_in(defined.get(name, "")))
    return seen


def depends_on(expr: str) -> set[str]:
    """Every raw metric an expression reads, through the recording rules it uses."""
    return {name for name in reaches(expr) if name not in RECORD_NAMES}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=PROMETHEUS,
        timeout=120,
    )


# -- promtool -------------------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_test_rules() -> None:
    result = promtool("test", "rules", RULES_TEST.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "FAILED" not in result.stdout


def promtool_test_with(tmp_path: Path, rules: str) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` of the unit tests on `rules` (a changed rules.yml)."""
    (tmp_path / "rules.yml").write_text(rules, encoding="utf-8")
    (tmp_path / "rules_test.yml").write_text(RULES_TEST.read_text(encoding="utf-8"))
    return subprocess.run(
        [require_tool("promtool"), "test", "rules", "rules_test.yml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=120,
    )


def test_promtool_test_rules_can_fail(tmp_path: Path) -> None:
    """The unit tests catch a wrong rule: the idle alert without its `for:` fires too early."""
    rules = RULES.read_text(encoding="utf-8").replace("for: 10m", "for: 1m", 1)
    result = promtool_test_with(tmp_path, rules)
    assert result.returncode != 0
    assert "SmLlmNodeIdle" in result.stdout + result.stderr


def test_promtool_test_rules_catch_a_sleeping_node_taken_as_known(tmp_path: Path) -> None:
    """The unit tests catch a known-node rule that forgets sleep: the sleeping node's 0 share
    then pulls the others' mean under the line, and the awake idle node beside it stays quiet."""
    clause = " unless (smllm_server_sleeping == 1)"
    rules_text = RULES.read_text(encoding="utf-8")
    assert rules_text.count(clause) == 1
    result = promtool_test_with(tmp_path, rules_text.replace(clause, ""))
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "SmLlmNodeIdle beside a sleeping server" in out, out[-3000:]


def test_promtool_check_example_config() -> None:
    result = promtool("check", "config", EXAMPLE_CONFIG.name)
    assert result.returncode == 0, result.stdout + result.stderr
    config = load_yaml(EXAMPLE_CONFIG)
    assert config["rule_files"] == ["rules.yml"]
    targets = config["scrape_configs"][0]["static_configs"][0]["targets"]
    assert [t.rpartition(":")[2] for t in targets] == ["10027"]


# -- the rules ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_alert_is_documented(name: str) -> None:
    (alert,) = [a for a in alerts() if a["alert"] == name]
    assert name.startswith("SmLlm")
    assert alert["labels"]["severity"] in SEVERITIES
    for key in ("summary", "description", "runbook"):
        text = alert["annotations"].get(key, "")
        assert len(text.split()) >= 5, f"{name}: {key} is missing or too short: {text!r}"
    docs = "\n".join(p.read_text(encoding="utf-8") for p in DOCS if p.exists())
    assert re.search(rf"^#+ .*`?{name}`?", docs, re.MULTILINE), (
        f"{name} has no section in docs/alerts.md"
    )


def alert_cases() -> Iterator[tuple[str, bool]]:
    for group in load_yaml(RULES_TEST)["tests"]:
        for case in group.get("alert_rule_test", []):
            yield case["alertname"], bool(case.get("exp_alerts"))


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_alert_has_unit_tests_both_ways(name: str) -> None:
    cases = [fires for alertname, fires in alert_cases() if alertname == name]
    assert True in cases, f"no series in rules_test.yml make {name} fire"
    assert False in cases, f"no series in rules_test.yml must leave {name} quiet"


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_recording_rule_has_unit_test(name: str) -> None:
    exprs = [
        case["expr"]
        for group in load_yaml(RULES_TEST)["tests"]
        for case in group.get("promql_expr_test", [])
    ]
    assert name in exprs, f"rules_test.yml never checks the values of {name}"


def test_rules_name_no_job() -> None:
    """Rules keep every target label and match none by value: any job name works."""
    for rule in rules():
        assert not re.search(r"\b(job|instance)\s*=~?", str(rule["expr"])), rule


def test_node_idle_alert() -> None:
    (idle,) = [a for a in alerts() if a["alert"] == "SmLlmNodeIdle"]
    assert idle["for"] == "10m"
    raw = depends_on(str(idle["expr"]))
    # Busy seconds (exact with or without launch lines) and the accounted wall time ...
    assert {"smllm_node_busy_seconds_total", "smllm_concurrency_seconds_total"} <= raw
    # ... never a gauge that only launch lines move.
    assert not raw & START_LINE_METRICS, raw & START_LINE_METRICS
    # Not while the exporter's scrape, the node's journal or its llama-server is down: other
    # alerts cover those.
    assert {"up", "smllm_source_up", "smllm_server_up"} <= raw
    # The alert is the recorded condition the dashboard and the status page read, held 10m.
    expr = str(idle["expr"])
    assert names_in(expr) & set(RECORD_NAMES) == {"smllm:node_idle_while_others_work"}, expr
    # "The others" are the known nodes: the node count with sources down and servers stopped
    # (smllm:nodes:count) never enters it.
    reached = reaches(expr)
    assert {"smllm:node_known", "smllm:known_nodes:count"} <= reached, reached
    assert "smllm:nodes:count" not in reached and "smllm:nodes_busy:avg_rate5m" not in reached
    # The server's state only ever takes a node out (`unless`): a node whose journal never said
    # anything about its server (no smllm_server_up series) is known, and watched as before.
    (known,) = [str(r["expr"]) for r in recordings() if r["record"] == "smllm:node_known"]
    assert re.search(r"\bunless\s+\(?\s*smllm_server_up\s*==\s*0\b", known), known
    for rule in recordings():
        if rule["record"] in reached:
            assert not re.search(r"\band\b[^\n]*smllm_server_up", str(rule["expr"])), rule
    fired_for = {
        alert["exp_labels"].get("node")
        for group in load_yaml(RULES_TEST)["tests"]
        for case in group.get("alert_rule_test", [])
        if case["alertname"] == "SmLlmNodeIdle"
        for alert in case.get("exp_alerts") or []
    }
    assert fired_for and None not in fired_for, "SmLlmNodeIdle must carry the node label"


def test_idle_rule_names() -> None:
    """The recorded series the dashboard and the status page read by name; the perfect spread
    still divides by every node followed."""
    for name in (
        "smllm:node_known",
        "smllm:known_node_busy_share:rate5m",
        "smllm:known_nodes:count",
        "smllm:node_others_busy_share:rate5m",
        "smllm:node_idle_while_others_work",
    ):
        assert name in RECORD_NAMES, name
    (spread,) = [r for r in recordings() if r["record"] == "smllm:perfect_spread:ratio_rate5m"]
    assert "smllm:nodes:count" in names_in(str(spread["expr"]))
    (count,) = [r for r in recordings() if r["record"] == "smllm:nodes:count"]
    assert depends_on(str(count["expr"])) == {"smllm_source_up"}


def test_server_down_alert() -> None:
    (down,) = [a for a in alerts() if a["alert"] == "SmLlmServerDown"]
    assert down["for"] == "5m"
    assert down["labels"]["severity"] == "warning"
    # The server's last word, only while the journal that says it is followed.
    assert depends_on(str(down["expr"])) == {"smllm_server_up", "smllm_source_up"}
    # rules_test.yml has SmLlmNodeIdle cases beside a server stopped from the start.
    silenced = [
        group
        for group in load_yaml(RULES_TEST)["tests"]
        if any(
            "smllm_server_up" in s["series"] and s["values"].startswith("0")
            for s in group["input_series"]
        )
        and any(c["alertname"] == "SmLlmNodeIdle" for c in group.get("alert_rule_test", []))
    ]
    assert silenced


def test_slot_utilisation_rule() -> None:
    (rule,) = [r for r in recordings() if r["record"] == "smllm:slot_utilisation:rate5m"]
    expr = str(rule["expr"])
    assert depends_on(expr) >= {"smllm_slot_busy_seconds_total", "smllm_node_slots"}
    # Accounted up to the watermark like the busy seconds: divided by the wall time accounted.
    assert "smllm:accounted_seconds:rate5m" in names_in(expr)
    assert not re.search(r"\b(?:sum|avg|max|min|count)\b", expr), "keeps node and target labels"


@pytest.mark.parametrize("path", [RULES, RULES_TEST, DASHBOARD], ids=lambda p: p.name)
def test_no_removed_metric(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for name, instead in REMOVED_METRICS.items():
        assert name not in text, f"{path.name} reads {name}: read {instead}"


def test_stuck_request_alert_reads_oldest_in_flight() -> None:
    (stuck,) = [a for a in alerts() if a["alert"] == "SmLlmRequestStuck"]
    assert "smllm_node_oldest_in_flight_start_timestamp_seconds" in depends_on(stuck["expr"])


# -- the dashboard --------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def panels() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in dashboard()["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # inside collapsed rows
    return out


def query_panels() -> list[dict[str, Any]]:
    return [p for p in panels() if p["type"] != "row"]


def exprs() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in query_panels() for t in p["targets"]]


def variable(name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        v for v in dashboard()["templating"]["list"] if v["name"] == name
    ]
    (var,) = found
    return var


def test_dashboard_is_provisionable() -> None:
    board = dashboard()
    assert board["uid"] == "sm-llm-exporter"
    assert board["id"] is None
    assert board["schemaVersion"] >= 36
    assert board["title"]
    assert "__inputs" not in board, "provisioning does not resolve __inputs"
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids))


def test_dashboard_variables() -> None:
    ds = variable("datasource")
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    node = variable("node")
    assert node["type"] == "query"
    assert node["datasource"] == DS
    assert node["multi"] and node["includeAll"]
    assert re.fullmatch(
        rf"label_values\(smllm_\w+\{{{re.escape(TARGET)}\}}, node\)", query_of(node)
    )
    job = variable("job")
    assert job["type"] == "query" and job["datasource"] == DS
    assert query_of(job) == "label_values(smllm_exporter_build_info, job)"
    instance = variable("instance")
    assert instance["type"] == "query" and instance["datasource"] == DS
    assert instance["multi"] and instance["includeAll"]
    assert query_of(instance) == 'label_values(smllm_exporter_build_info{job=~"$job"}, instance)'
    # each variable after the ones its query reads (Grafana resolves them in order)
    names = [v["name"] for v in dashboard()["templating"]["list"]]
    assert names.index("job") < names.index("instance") < names.index("node")


def query_of(var: dict[str, Any]) -> str:
    query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
    assert isinstance(query, str)
    return query


def datasources(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "datasource":
                yield item
            else:
                yield from datasources(item)
    elif isinstance(value, list):
        for item in value:
            yield from datasources(item)


def test_every_datasource_is_the_variable() -> None:
    board = dashboard()
    found = list(datasources({k: v for k, v in board.items() if k != "annotations"}))
    assert found and all(ds == DS for ds in found), [ds for ds in found if ds != DS]
    for annotation in board["annotations"]["list"]:
        assert annotation["datasource"] in (DS, {"type": "grafana", "uid": "-- Grafana --"})


@pytest.mark.parametrize("title", [p["title"] for p in query_panels()])
def test_panel(title: str) -> None:
    (panel,) = [p for p in query_panels() if p["title"] == title]
    assert panel["type"] in {"timeseries", "stat", "state-timeline", "table"}
    assert len(panel.get("description", "").split()) >= 15, "say what it shows and what to do"
    assert panel["datasource"] == DS
    assert panel["targets"]
    refs = [t["refId"] for t in panel["targets"]]
    assert len(refs) == len(set(refs))
    for t in panel["targets"]:
        assert t["datasource"] == DS
        assert t["expr"].strip()
    grid = panel["gridPos"]
    assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in panels():
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[x, y]}"
                cells[x, y] = p["title"]


@pytest.mark.parametrize(("title", "expr"), exprs())
def test_query(title: str, expr: str) -> None:
    """Every series filtered by $job and $instance, per-node metrics by $node too; recorded
    series exist; no fixed windows but 5m."""
    no_strings = re.sub(r'"[^"]*"', '""', expr)
    selectors = list(re.finditer(r"\b(smllm[_:][a-zA-Z0-9_:]*|up)\b(\{[^}]*\})?", expr))
    assert selectors, f"{title!r} reads no series"
    for m in selectors:
        matchers = [x.strip() for x in (m.group(2) or "{}")[1:-1].split(",")]
        assert matchers[:2] == ['job=~"$job"', 'instance=~"$instance"'], (
            f"{m.group(1)} in {title!r} ignores $job or $instance: {m.group(0)}"
        )
    for m in re.finditer(r"(smllm_[a-z_]+)(\{[^}]*\})?", expr):
        name, selector = m.group(1), m.group(2) or ""
        if name not in CLUSTER_METRICS and not name.startswith("smllm_exporter"):
            assert 'node=~"$node"' in selector, f"{name} in {title!r} ignores $node"
    for name in names_in(expr):
        if ":" in name:
            assert name in RECORD_NAMES, f"{title!r} reads {name}, which rules.yml never records"
    for window in re.findall(r"\[([^\]]+)\]", no_strings):
        assert window in {"$__rate_interval", "$__range", "1d"}, f"{title!r}: [{window}]"


def all_exprs() -> str:
    return "\n".join(expr for _, expr in exprs())


@pytest.mark.parametrize(
    "needed",
    [
        "smllm:node_busy_share:rate5m",  # busy share per node (the alert's input)
        "smllm_nodes_busy",  # the active-node gauge ...
        "smllm:nodes_busy:avg_rate5m",  # ... beside the average from busy seconds
        "smllm:concurrency_share:rate5m",  # 0..N nodes busy, stacked
        "smllm_requests_total",
        "smllm_request_seconds_total",
        "smllm_tokens_total",
        "smllm_request_duration_seconds_bucket",
        "smllm_prompt_seconds_total",  # prefill speed
        "smllm_generation_seconds_total",  # decode speed
        "smllm_node_busy",  # the busy/idle state timeline
        "smllm_source_up",
        "smllm_source_lag_seconds",
        "smllm_source_reconnects_total",
        "smllm_parse_errors_total",
        "smllm:perfect_spread:ratio_rate5m",  # the seed's perfect spread
        "smllm:slot_utilisation:rate5m",  # slot utilisation per node
        "smllm_server_up",  # llama-server running or stopped
        "smllm_requests_untimed_total",  # untimed occupancies by reason ...
        "smllm_untimed_request_seconds_total",  # ... and the slot seconds they held
    ],
)
def test_dashboard_shows(needed: str) -> None:
    assert re.search(rf"{re.escape(needed)}\b(?!:)", all_exprs()), f"no panel reads {needed}"


def test_busy_state_timeline() -> None:
    (timeline,) = [
        p
        for p in query_panels()
        if p["type"] == "state-timeline" and "smllm_node_busy{" in p["targets"][0]["expr"]
    ]
    mapped = timeline["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {mapped["0"]["text"], mapped["1"]["text"]} == {"idle", "busy"}


def test_server_up_state_timeline() -> None:
    (timeline,) = [
        p
        for p in query_panels()
        if p["type"] == "state-timeline" and "smllm_server_up{" in p["targets"][0]["expr"]
    ]
    mapped = timeline["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {mapped["0"]["text"], mapped["1"]["text"]} == {"stopped", "running"}


def test_untimed_panel_by_reason() -> None:
    """Untimed occupancies by reason, requests and seconds, in one panel."""
    (panel,) = [
        p
        for p in query_panels()
        if any("smllm_untimed_request_seconds_total" in t["expr"] for t in p["targets"])
    ]
    found = [t["expr"] for t in panel["targets"]]
    assert any("smllm_requests_untimed_total" in e for e in found), found
    assert all(re.search(r"by \([^)]*\breason\b", e) for e in found), found


def test_stacked_concurrency_panel() -> None:
    (panel,) = [
        p for p in query_panels() if "smllm:concurrency_share:rate5m" in p["targets"][0]["expr"]
    ]
    assert panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"


def test_provisioning_files() -> None:
    dashboards = load_yaml(PROVISIONING / "dashboards.yaml")
    assert dashboards["apiVersion"] == 1
    (provider,) = dashboards["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"]
    sources = load_yaml(PROVISIONING / "datasources.yaml")
    assert sources["apiVersion"] == 1
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus"
    assert NUMBER.fullmatch(source["jsonData"]["timeInterval"])


# -- the metrics page's table ---------------------------------------------------------------


def test_metric_table_has_one_section() -> None:
    """The metrics page holds its table under one `## Metrics` heading."""
    headings = re.findall(r"^## (.+)$", METRICS_PAGE.read_text(encoding="utf-8"), re.MULTILINE)
    assert headings.count("Metrics") == 1


def test_metric_table_rows() -> None:
    for name, (kind, labels, meaning) in metric_table().items():
        assert kind in {"counter", "gauge", "histogram"}, name
        assert name.endswith("_total") == (kind == "counter"), f"{name} is a {kind}"
        assert len(meaning.split()) >= 3, name
        if name not in CLUSTER_METRICS:
            assert re.match(r"node\b", labels), f"{name}: every per-node metric has node first"


def test_metric_table_cluster_metrics() -> None:
    """The metrics without a node label are the same in the table as in these tests."""
    table = metric_table()
    no_node = {n for n, (_, labels, _) in table.items() if not re.search(r"\bnode\b", labels)}
    assert no_node == CLUSTER_METRICS


def test_metric_table_names_what_rules_and_dashboard_read() -> None:
    table = metric_table()
    read = {n for r in rules() for n in names_in(str(r["expr"]))}
    read |= {n for _, e in exprs() for n in names_in(e)}
    for name in sorted(n for n in read if n.startswith("smllm_")):
        base = name
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in table:
                base = name.removesuffix(suffix)
        assert base in table, (
            f"{name} is read by a rule or panel but not in the metrics page's table"
        )


def test_metric_table_has_no_removed_metric() -> None:
    table = metric_table()
    for name in REMOVED_METRICS:
        assert name not in table


def test_metric_table_names_what_the_collector_serves() -> None:
    """Every smllm_ family the collector writes is a row (its _total added for counters)."""
    table = metric_table()
    source = FAMILIES.read_text(encoding="utf-8")
    served = set(re.findall(r'"(smllm_[a-z_]+)"', source))
    assert served
    missing = sorted(n for n in served if n not in table and f"{n}_total" not in table)
    assert not missing, f"served but not in the metrics page's table: {missing}"
