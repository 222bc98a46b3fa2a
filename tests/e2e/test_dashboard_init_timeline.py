"""The dashboard's vllm-omni row against a real Prometheus scraping a daemon with an
init-timeline node.

The demo has no init-timeline node, so its Prometheus has no `smllm_init_*` series. Here
vllm-omni's own init_timeline.py (the seed, run for real by support/vllm_timeline.py: an engine
and two worker processes) records a start-up; the daemon runs as a real process with that run as
an init-timeline node beside an ordinary `file` node, and Debian's `prometheus` scrapes it every
second. Every query of every panel of the row, with its variables substituted as Grafana would
(the `node` variable at All, its `allValue`, since the variable lists the llama-server nodes
only), returns finite nonzero data for the init-timeline node, both as the range query a panel
runs and as an instant query.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from support import dashboard
from support import prometheus as prom
from support.daemon_process import DaemonProcess
from support.tools import wait_for
from support.vllm_timeline import needs_seed, record_run

pytestmark = [pytest.mark.slow, needs_seed]

NODE = "omni"
FILE_NODE = "a"
SCRAPE_S = 1


def test_init_timeline_row_on_a_real_vllm_omni_start_up(tmp_path: Path) -> None:
    run = record_run(tmp_path / "recorded")
    journal = tmp_path / f"{FILE_NODE}.log"
    journal.write_text("", encoding="utf-8")
    nodes = [
        {"name": FILE_NODE, "source": "file", "path": str(journal)},
        {
            "name": NODE,
            "source": "init-timeline",
            "path": str(run.run_dir),
            "dump": str(run.dump),
            "poll_seconds": 0.2,
        },
    ]
    board = dashboard.load()
    row = [p for p in dashboard.panels(board) if p.row == dashboard.INIT_ROW]
    assert len(row) >= 3, "the init-timeline row has lost its panels"
    (node_var,) = [v for v in board["templating"]["list"] if v["name"] == "node"]

    with DaemonProcess(tmp_path / "daemon", {"since": "-1h", "nodes": nodes}) as daemon:
        daemon.start()
        config = {
            "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
            "scrape_configs": [
                {
                    "job_name": "sm-llm-exporter",
                    "static_configs": [{"targets": [f"127.0.0.1:{daemon.port}"]}],
                }
            ],
        }
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        with prom.started(path, tmp_path) as api:
            started = time.time()
            # a few scrapes with the node read, so that every range query has points
            wait_for(
                lambda: api.instant(
                    f'count_over_time(smllm_init_source_up{{node="{NODE}"}}[1m]) >= 3'
                ),
                60,
                "the init-timeline node scraped three times",
            )
            end = time.time()
            values = dashboard.variables(
                dashboard.grafana_regex(["sm-llm-exporter"]),
                dashboard.grafana_regex([f"127.0.0.1:{daemon.port}"]),
                str(node_var["allValue"]),
                SCRAPE_S,
                SCRAPE_S,
                round(end - started) + 1,
            )
            for panel in row:
                for ref, expr in dashboard.queries(panel, values):
                    where = f"{panel.title} / {ref}: {expr}"
                    for got in (
                        api.instant(expr, end),
                        dashboard.range_query(api, expr, started, end, SCRAPE_S),
                    ):
                        mine = [s for s in got if s["metric"].get("node") == NODE]
                        assert dashboard.finite_nonzero(mine), f"no data: {where} -> {got}"
                        assert all(s["metric"].get("node") == NODE for s in got), where
