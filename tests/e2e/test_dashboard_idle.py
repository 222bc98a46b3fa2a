"""The dashboard's idle views against a real Prometheus evaluating the real rules: one node idle
for 22 minutes while three others work.

The demo may or may not leave a node idle while the others work when its Prometheus looks, so
this makes a run that does: four nodes of one slot, `a`, `b` and `c` busy nearly all the time
(20-60 s requests, 2 s apart on average), `d` the same until 22 minutes before the end and idle
since. Their journal dumps, up to a few seconds ago, go through the backfill (`sm-llm-exporter
report --format openmetrics`) into promtool's blocks; Debian's `prometheus` reads them with
deploy/prometheus/rules.yml and evaluates the rules every second from its start on, over that
data. Then:
- every rule evaluates with health "ok", and `smllm:node_idle_while_others_work` holds for `d`
  alone, as does SmLlmNodeIdle (pending: its 10 minutes have not passed since Prometheus began);
- the panel "Idle while the others work" shows `d` idle while the others work and `a`, `b`,
  `c` as "no" (every node has a line, the absent rule read as 0);
- "Time since last request" shows each node's wait since its last request ended, counted here
  from the requests themselves, `d`'s the longest;
- "Node busy or idle" draws idle grey and busy green, and the idle view orange: idle alone is no
  fault, idle while the others work is the finding.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from exporter.base.times import SECOND

from support import dashboard
from support.tools import wait_for
from support.workload import idle_while_others_work, journal, write_dump

pytestmark = pytest.mark.slow

NODES = ("a", "b", "c", "d")
IDLE = "d"
IDLE_S = 22 * 60
WINDOW_S = 40 * 60
STEP_S = 5  # the backfill's step, taken as the scrape interval
EVERY_S = 1  # rule evaluation
RED = {"red", "dark-red", "semi-dark-red", "light-red", "super-light-red"}


def by_node(series: list[dict[str, Any]]) -> dict[str, float]:
    return {s["metric"]["node"]: float(s["value"][1]) for s in series}


def panel(title: str) -> dashboard.Panel:
    (found,) = [p for p in dashboard.panels(dashboard.load()) if p.title == title]
    return found


def test_idle_views_on_a_run_with_a_node_idle_while_the_others_work(tmp_path: Path) -> None:
    until_us = (int(time.time()) - 2) * SECOND  # (a backfill ends at now at the latest)
    until_us -= until_us % (STEP_S * SECOND)
    since_us = until_us - WINDOW_S * SECOND
    reqs = idle_while_others_work(NODES, IDLE, until_us, WINDOW_S, IDLE_S)
    inputs = {}
    for node in NODES:
        inputs[node] = tmp_path / f"{node}.json"
        write_dump(inputs[node], journal(node, [r for r in reqs if r.node == node]), "idle")
    last_end = {n: max(r.end_us for r in reqs if r.node == n) / SECOND for n in NODES}
    assert until_us / SECOND - last_end[IDLE] >= IDLE_S
    backfill = dashboard.Backfill(inputs, since_us, until_us, STEP_S)

    with backfill.served(tmp_path, rules=True, every_s=EVERY_S) as api:
        # every rule evaluated over the backfill, none failing
        names = dashboard.rule_names()

        def evaluated() -> dict[str, tuple[str, str]] | None:
            health = dashboard.rule_health(api)
            done = set(health) == names and all(h != "unknown" for h, _ in health.values())
            return health if done else None

        health = wait_for(evaluated, 30, "every rule evaluated")
        bad = {name: h for name, h in health.items() if h != ("ok", "")}
        assert not bad, bad

        # the rule holds for the idle node alone, and SmLlmNodeIdle is pending for it alone
        idle = wait_for(lambda: api.instant(dashboard.IDLE_RULE), 30, dashboard.IDLE_RULE)
        assert [s["metric"]["node"] for s in idle] == [IDLE], idle
        pending = wait_for(
            lambda: api.instant('ALERTS{alertname="SmLlmNodeIdle"}'), 30, "SmLlmNodeIdle"
        )
        assert [(s["metric"]["node"], s["metric"]["alertstate"]) for s in pending] == [
            (IDLE, "pending")
        ]

        now = time.time()
        values = dashboard.variables(
            ".*", ".*", dashboard.grafana_regex(list(NODES)), STEP_S, STEP_S, WINDOW_S
        )

        # "Idle while the others work": 1 for the idle node, 0 ("no") for every other one
        (query,) = dashboard.queries(panel(dashboard.IDLE_PANEL), values)
        assert by_node(api.instant(query[1], now)) == {n: float(n == IDLE) for n in NODES}

        # "Time since last request": now less each node's last end, the idle node's longest
        (query,) = dashboard.queries(panel(dashboard.SINCE_PANEL), values)
        waits = by_node(api.instant(query[1], now))
        assert waits == pytest.approx({n: now - last_end[n] for n in NODES}, abs=1e-3)
        assert max(waits, key=lambda n: waits[n]) == IDLE


def mapping_colours(p: dashboard.Panel) -> dict[str, str]:
    """A state timeline's mapped texts and their colours."""
    (mapping,) = p.panel["fieldConfig"]["defaults"]["mappings"]
    return {m["text"]: m["color"] for m in mapping["options"].values()}


def test_idle_is_neutral_and_idle_while_the_others_work_stands_out() -> None:
    busy = mapping_colours(panel("Node busy or idle"))
    assert busy["busy"] == "green"
    assert busy["idle"] not in RED | {"orange", "yellow", "green"}, busy
    marked = mapping_colours(panel(dashboard.IDLE_PANEL))
    assert marked["idle while the others work"] in RED | {"orange"}, marked
    assert marked["no"] not in RED | {"orange", "yellow"}, marked
    assert dashboard.IDLE_RULE in panel(dashboard.IDLE_PANEL).panel["targets"][0]["expr"]
    # the busy share's 5% line is the idle rule's, and no description calls idle red
    share = panel("Busy share per node").panel
    steps = share["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[0]["color"] not in RED and steps[1]["value"] == 0.05
    for p in dashboard.panels(dashboard.load()):
        text = p.panel.get("description", "").lower()
        assert "red line (5%)" not in text and "red stretches" not in text, p.title


def test_time_since_last_request_is_sorted_longest_first() -> None:
    p = panel(dashboard.SINCE_PANEL).panel
    (target,) = p["targets"]
    assert target["instant"] and target["format"] == "table"
    renamed = next(t for t in p["transformations"] if t["id"] == "organize")
    column = renamed["options"]["renameByName"]["Value"]
    assert p["options"]["sortBy"] == [{"displayName": column, "desc": True}]
    (override,) = [
        o
        for o in p["fieldConfig"]["overrides"]
        if o["matcher"] == {"id": "byName", "options": column}
    ]
    assert {"id": "unit", "value": "s"} in override["properties"]
    steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[0]["color"] == "transparent" and steps[1]["value"] >= 240  # neutral under ~5 min
