"""The Grafana dashboard's panels and queries as Grafana would run them against a Prometheus.

`panels` lists every panel with the row it sits in, those inside collapsed rows too;
`substitute` interpolates variables as Grafana does, `grafana_regex` writes a multi-value
variable, `rate_interval` is Grafana's `$__rate_interval`, and `variables` the whole set for a
range and step. `Backfill` puts journal dumps into a real Prometheus without scraping anything:
`sm-llm-exporter report --format openmetrics`, then `promtool tsdb create-blocks-from
openmetrics` into the data directory a real `prometheus` then reads, with the rules loaded when
asked (they are evaluated from its start on, over the blocks).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exporter.base.times import iso

from support import prometheus as prom
from support.tools import REPO, require_tool

DASHBOARD = REPO / "deploy" / "grafana" / "sm-llm-exporter.json"
RULES = REPO / "deploy" / "prometheus" / "rules.yml"

ROUTER_ROW = "Models (router mode)"
DETAILS_ROW = "llama-server details"  # sleep, drafts, prefill and decode, the router's queue
STARTUP_PANEL = "Last start-up and its phases: $node"
BUSY_PANEL = "Node busy or idle"
INIT_ROW = "vllm-omni start-ups (init timeline)"
IDLE_PANEL = "Idle while the others work"
SINCE_PANEL = "Time since last request"
IDLE_RULE = "smllm:node_idle_while_others_work"


def load() -> dict[str, Any]:
    board: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return board


@dataclass(frozen=True)
class Panel:
    row: str  # the title of the row it sits in ("" above the first row)
    panel: dict[str, Any]

    @property
    def title(self) -> str:
        return str(self.panel["title"])


def panels(board: dict[str, Any]) -> list[Panel]:
    """Every panel that queries, with its row; a collapsed row holds its panels itself."""
    out: list[Panel] = []
    row = ""
    for panel in board["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            out.extend(Panel(row, inner) for inner in panel.get("panels", []))
        else:
            out.append(Panel(row, panel))
    return out


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Grafana's variable interpolation: ${name} and $name, longest names first."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", variables[name])
        literal = variables[name].replace("\\", "\\\\")  # re.sub's repl: backslashes as is
        expr = re.sub(rf"\${re.escape(name)}\b", literal, expr)
    return expr


def grafana_regex(values: list[str]) -> str:
    """A multi-value variable in a Prometheus query, as Grafana writes it: (a|b|c), escaped."""
    escaped = [re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", v) for v in values]
    return "(" + "|".join(escaped) + ")"


def rate_interval(step_s: int, scrape_s: int) -> int:
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 x scrape interval),
    with the data source's "scrape interval" set to Prometheus's."""
    return max(step_s + scrape_s, 4 * scrape_s)


def variables(
    job: str, instance: str, node: str, step_s: int, scrape_s: int, range_s: int
) -> dict[str, str]:
    """Every variable a panel's query may hold, the selections given as regexes."""
    return {
        "datasource": "prometheus",
        "job": job,
        "instance": instance,
        "node": node,
        "__rate_interval": f"{rate_interval(step_s, scrape_s)}s",
        "__interval": f"{step_s}s",
        "__interval_ms": str(step_s * 1000),
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
        "__range_ms": str(range_s * 1000),
    }


def queries(panel: Panel, values: Mapping[str, str]) -> list[tuple[str, str]]:
    """(refId, query) of each of the panel's targets, its variables substituted."""
    out = []
    for target in panel.panel["targets"]:
        expr = substitute(target["expr"], values)
        assert "$" not in expr, f"{panel.title}: unsubstituted variable in {expr}"
        out.append((str(target["refId"]), expr))
    return out


def finite_nonzero(series: list[dict[str, Any]]) -> bool:
    values = [v for s in series for _, v in s.get("values", [s.get("value", [0, "0"])])]
    return any(math.isfinite(float(v)) and float(v) != 0 for v in values)


def range_query(
    api: prom.Api, expr: str, start: float, end: float, step_s: int
) -> list[dict[str, Any]]:
    data = api.get("/api/v1/query_range", query=expr, start=start, end=end, step=step_s)
    result: list[dict[str, Any]] = data["result"]
    return result


def rule_health(api: prom.Api) -> dict[str, tuple[str, str]]:
    """Each loaded rule's (health, last error), by its record or alert name."""
    groups = api.get("/api/v1/rules")["groups"]
    return {r["name"]: (r["health"], r.get("lastError", "")) for g in groups for r in g["rules"]}


def rule_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {str(r.get("record") or r["alert"]) for g in groups for r in g["rules"]}


@dataclass
class Backfill:
    """Journal dumps (node -> file) of [since, until], one sample every `step_s`."""

    inputs: Mapping[str, Path]
    since_us: int
    until_us: int
    step_s: int

    def write(self, directory: Path) -> list[Path]:
        """`report --format openmetrics --output-dir`, as a process: its files, one a block."""
        argv = [sys.executable, "-m", "exporter", "report"]
        argv += ["--since", iso(self.since_us), "--until", iso(self.until_us)]
        for node, path in self.inputs.items():
            argv += ["--input", f"{node}={path}"]
        argv += ["--format", "openmetrics", "--step", f"{self.step_s}s"]
        argv += ["--output-dir", str(directory)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
        assert done.returncode == 0, done.stderr
        files = sorted(directory.glob("*.om"))
        assert files, done.stderr
        return files

    def blocks(self, work: Path) -> Path:
        """The backfill in promtool's blocks: the data directory."""
        promtool = require_tool("promtool")
        data = work / "data"
        for part in self.write(work / "om"):
            done = subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", str(part), str(data)],
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
            assert done.returncode == 0, done.stdout + done.stderr
        return data

    @contextmanager
    def served(self, work: Path, *, rules: bool, every_s: int = 1) -> Iterator[prom.Api]:
        """A real Prometheus over the backfill's blocks, scraping nothing; with `rules`,
        deploy/prometheus/rules.yml evaluated every `every_s` seconds from its start on."""
        data = self.blocks(work)
        config: dict[str, Any] = {"global": {"evaluation_interval": f"{every_s}s"}}
        if rules:
            config["rule_files"] = [str(RULES)]
        path = work / "prometheus.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        binary = prom.binary()
        for attempt in range(prom.ATTEMPTS):
            started = prom.start(binary, path, data, work / f"prometheus{attempt}.log")
            if started is not None:
                break
        else:
            raise AssertionError(f"no free port for prometheus after {prom.ATTEMPTS} tries")
        process, url = started
        try:
            yield prom.Api(url)
        finally:
            prom.terminate(process)
