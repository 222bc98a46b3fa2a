"""Issue 27, the alert rules: a node down from the start is down, not lagging.

The exporter's own figures for such a node (its batches through the ingest step, rendered as
/metrics renders them) are handed to the real promtool with deploy/prometheus/rules.yml: only
SmLlmSourceDown fires for it, and SmLlmSourceLagging still fires for a node that reads far
behind.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Batch
from exporter.base.times import SECOND
from exporter.exposition.render import Renderer
from exporter.ingest.step import apply_batch
from exporter.parse.parser import Parser

from support.scrape import parse_metrics, sample
from support.settings import default_settings
from support.tools import REPO, require_tool

RULES = REPO / "deploy" / "prometheus" / "rules.yml"
SINCE = 1_790_062_375_000_000  # 2026-09-22T07:32:55Z
NOW = SINCE + 3600 * SECOND  # an hour after `since`
TARGET = 'job="sm-llm-exporter", instance="exporter:10027"'
MINUTES = 40  # how long promtool holds the figures


def served() -> dict[str, tuple[float, float]]:
    """Each node's (smllm_source_up, smllm_source_lag_seconds) as /metrics serves them: `down`
    never connects, `behind` reads its backlog 20 minutes behind, `fine` is caught up."""
    nodes = ["down", "behind", "fine"]
    acc = Accounting(nodes, default_settings(Kinds(DEFAULT_RULES)), origin_us=SINCE)
    batches = [
        Batch("down", up=False, error="ssh: connection refused"),
        Batch("behind", entries=10, newest_us=NOW - 1200 * SECOND),
        Batch("fine", entries=10, newest_us=NOW - SECOND, caught_up=True),
    ]
    for batch in batches:
        apply_batch(batch, Parser(batch.node), acc, NOW)
    m = parse_metrics(Renderer("0").text(acc.snapshot()))
    out = {}
    for node in nodes:
        up = sample(m, "smllm_source_up", node=node)
        lag = sample(m, "smllm_source_lag_seconds", node=node)
        assert up is not None and lag is not None
        out[node] = (up, lag)
    return out


def test_a_source_down_from_the_start_shows_no_lag() -> None:
    """Before, its lag was now minus `since` (an hour), as if it read an hour behind."""
    figures = served()
    assert figures["down"] == (0, 0)
    assert figures["behind"] == (1, 1200)
    assert figures["fine"] == (1, 0)


def _source_down(node: str) -> list[dict[str, object]]:
    """SmLlmSourceDown for `node` as rules.yml says it (its templates name only labels)."""
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    (rule,) = [
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "SmLlmSourceDown"
    ]
    labels = {"job": "sm-llm-exporter", "instance": "exporter:10027", "node": node}
    filled = {}
    for key, text in rule["annotations"].items():
        for name, value in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", value)
        filled[key] = text.strip()
    return [{"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": filled}]


@pytest.mark.slow
def test_a_node_down_from_the_start_raises_source_down_alone(tmp_path: Path) -> None:
    """Its figures and a caught-up node's, as served, held for 40 minutes: SmLlmSourceDown
    fires for it, and SmLlmSourceLagging for no node."""
    promtool = require_tool("promtool")
    figures = served()
    series = [{"series": f"up{{{TARGET}}}", "values": f"1+0x{MINUTES}"}]
    for node in ("down", "fine"):
        up, lag = figures[node]
        labels = f'{TARGET}, node="{node}"'
        for name, value in (("smllm_source_up", up), ("smllm_source_lag_seconds", lag)):
            series.append({"series": f"{name}{{{labels}}}", "values": f"{value:g}+0x{MINUTES}"})
    checks: list[dict[str, object]] = []
    for minute in (20, MINUTES):
        at = f"{minute}m"
        checks.append(
            {"eval_time": at, "alertname": "SmLlmSourceDown", "exp_alerts": _source_down("down")}
        )
        checks.append({"eval_time": at, "alertname": "SmLlmSourceLagging", "exp_alerts": []})
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}],
    }
    path = tmp_path / "figures_test.yml"
    path.write_text(json.dumps(tests))  # (JSON is YAML)
    result = subprocess.run(
        [promtool, "test", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
