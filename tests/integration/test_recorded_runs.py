"""The daemon on a real llama-server's recorded runs: it serves what the report says, and a
stopped unit is `smllm_server_up 0`, never an idle node."""

from __future__ import annotations

import copy
import subprocess
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.base.records import REASONS
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon
from exporter.sources.file import FileNode

from support.daemon_thread import DaemonThread
from support.recorded import (
    FIXTURES,
    RUNS,
    entries,
    report_json,
    window,
)
from support.scrape import parse_metrics, sample
from support.tools import REPO, require_tool, wait_for


def daemon_config(tmp_path: Path, since_us: int) -> Config:
    return Config(
        state_dir=tmp_path / "state",
        listen_host="127.0.0.1",
        listen_port=0,
        since=datetime.fromtimestamp(since_us // SECOND, UTC).isoformat(),
        nodes=tuple(FileNode(run, FIXTURES / f"{run}.journal.json") for run in RUNS),
        slots=3,
        # (a node without launch lines holds the figures this long behind now: the runs may
        # have been recorded minutes ago)
        max_request_seconds=5,
    )


def test_the_daemon_serves_what_the_report_says(tmp_path: Path) -> None:
    since, until = window()
    nodes = report_json(since, until)["nodes"]
    expected_entries = {run: len(entries(run)) for run in RUNS}

    def settled() -> dict[Any, float] | None:
        samples = parse_metrics(d.metrics())
        accounted = sample(samples, "smllm_accounted_until_timestamp_seconds") or 0
        for run, n in expected_entries.items():
            if sample(samples, "smllm_source_entries_total", node=run) != n:
                return None
        return samples if accounted * SECOND > until else None

    with DaemonThread(Daemon(daemon_config(tmp_path, since), publish_seconds=0.1)) as d:
        samples = wait_for(settled, 30, "every run read and accounted")
    for run in RUNS:
        node = nodes[run]
        requests = sum(
            v
            for (name, labels), v in samples.items()
            if name == "smllm_requests_total" and dict(labels)["node"] == run
        )
        assert requests == node["requests"], run
        for metric, key in (
            ("smllm_node_busy_seconds_total", "busy_seconds"),
            ("smllm_slot_busy_seconds_total", "slot_busy_seconds"),
        ):
            assert sample(samples, metric, node=run) == pytest.approx(node[key], abs=1e-6), run
        for reason in REASONS:
            figures = node["untimed"][reason]
            assert (
                sample(samples, "smllm_requests_untimed_total", node=run, reason=reason)
                == (figures["requests"])
            )
            assert sample(
                samples, "smllm_untimed_request_seconds_total", node=run, reason=reason
            ) == pytest.approx(figures["seconds"], abs=1e-6)
        assert sample(samples, "smllm_server_up", node=run) == node["server_up"]
        assert sample(samples, "smllm_node_slots", node=run) == node["slots"]
    for model, figures in nodes["router"]["models"].items():
        assert (
            sample(samples, "smllm_model_requests_total", node="router", model=model)
            == (figures["requests"])
        )
        assert sample(
            samples, "smllm_model_request_seconds_total", node="router", model=model
        ) == pytest.approx(figures["request_seconds"], abs=1e-6)


RULES = REPO / "deploy" / "prometheus" / "rules.yml"


RULES_TEST = REPO / "deploy" / "prometheus" / "rules_test.yml"


def idle_case(server_up: float) -> dict[str, Any]:
    """The rules test that fires SmLlmNodeIdle for node2, with node2's smllm_server_up as
    given for the whole of it."""
    tests: list[dict[str, Any]] = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))["tests"]
    case = copy.deepcopy(
        next(
            t
            for t in tests
            if t["name"].startswith("SmLlmNodeIdle fires for a node idle the whole")
        )
    )
    labels = 'job="sm-llm-exporter", instance="exporter:10027", node="node2"'
    case["input_series"].append(
        {"series": f"smllm_server_up{{{labels}}}", "values": f"{server_up:g}+0x40"}
    )
    return case


def promtool_test(tmp_path: Path, case: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "case.yml"
    path.write_text(
        yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [case]}),
        encoding="utf-8",
    )
    return subprocess.run(
        [require_tool("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_stopped_unit_is_server_up_0_and_never_an_idle_node(tmp_path: Path) -> None:
    # the daemon over a real run whose unit systemd stopped at the end
    since, _ = window(("speculative",))
    cfg = daemon_config(tmp_path, since)
    cfg = replace(cfg, nodes=(FileNode("node2", FIXTURES / "speculative.journal.json"),))
    with DaemonThread(Daemon(cfg, publish_seconds=0.1)) as d:
        up = wait_for(
            lambda: next(
                (
                    [v]
                    for v in [sample(parse_metrics(d.metrics()), "smllm_server_up", node="node2")]
                    if v is not None
                ),
                None,
            ),
            20,
            "the server's state",
        )[0]
    assert up == 0
    # what the rules make of it: the case that fires SmLlmNodeIdle for node2 fires no more
    case = idle_case(up)
    for check in case["alert_rule_test"]:
        if check["alertname"] == "SmLlmNodeIdle":
            check["exp_alerts"] = []
    run = promtool_test(tmp_path, case)
    assert run.returncode == 0, run.stdout + run.stderr
    # ... while it still fires for node2 running (1) as the case expects: the test can fail
    run = promtool_test(tmp_path, idle_case(1))
    assert run.returncode == 0, run.stdout + run.stderr
    stopped = idle_case(up)
    run = promtool_test(tmp_path, stopped)
    assert run.returncode != 0 and "SmLlmNodeIdle" in run.stdout + run.stderr
