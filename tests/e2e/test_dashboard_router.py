"""The dashboard's "Models (router mode)" row against a real Prometheus holding a real router run.

The demo has no router, so its Prometheus has no `smllm_model_*` series. Here the recorded run
of a real llama-server in router mode (tests/testdata/llama-server/router.journal.json: two
models, an instance unloaded and one killed) goes through the backfill (`sm-llm-exporter report
--format openmetrics`, one sample a second, as a 1 s scrape would have taken them) into
promtool's blocks, read by Debian's `prometheus`. Every query of every panel of the row, with its
variables substituted as Grafana would over the run's window, returns finite nonzero data for
each model the run's spawn lines name; and the counters those panels read end at what the run's
lines say, read here with plain regular expressions (support/recorded.py).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from exporter.base.times import SECOND

from support import dashboard
from support.recorded import FIXTURES, entries, occupancies

pytestmark = pytest.mark.slow

RUN = "router"
NODE = "router"
MODEL = re.compile(r"\bsmllm_model_[a-z_]+")
STEP_S = 1  # the backfill's step, taken as the scrape interval and the panels' step


def expected() -> tuple[dict[str, int], dict[str, float]]:
    """Per model, the requests and request seconds the run's timing lines say."""
    requests: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for occ in occupancies(RUN):
        if occ.total_us is not None and not occ.child:
            requests[occ.key[0]] += 1
            seconds[occ.key[0]] += occ.total_us / SECOND
    return dict(requests), dict(seconds)


def test_router_row_on_a_real_router_run(tmp_path: Path) -> None:
    requests, seconds = expected()
    assert set(requests) == {"tiny-a", "tiny-b"}, requests  # (the run's two models)
    stamps = [int(e["__REALTIME_TIMESTAMP"]) for e in entries(RUN)]
    since_us = min(stamps) // SECOND * SECOND
    until_us = (max(stamps) // SECOND + 5) * SECOND
    backfill = dashboard.Backfill(
        {NODE: FIXTURES / f"{RUN}.journal.json"}, since_us, until_us, STEP_S
    )

    row = [p for p in dashboard.panels(dashboard.load()) if p.row == dashboard.ROUTER_ROW]
    assert len(row) >= 2, "the router row has lost its panels"
    reads = {n for p in row for t in p.panel["targets"] for n in MODEL.findall(t["expr"])}
    assert {"smllm_model_requests_total", "smllm_model_request_seconds_total"} <= reads

    with backfill.served(tmp_path, rules=False) as api:
        # (a backfill has no target labels: every job and instance is selected)
        values = dashboard.variables(
            ".*",
            ".*",
            dashboard.grafana_regex([NODE]),
            STEP_S,
            STEP_S,
            (until_us - since_us) // SECOND,
        )
        start, end = since_us / SECOND, until_us / SECOND
        for panel in row:
            for ref, expr in dashboard.queries(panel, values):
                got = dashboard.range_query(api, expr, start, end, STEP_S)
                where = f"{panel.title} / {ref}: {expr}"
                assert dashboard.finite_nonzero(got), f"no data on the router run: {where}"
                for model in requests:
                    mine = [s for s in got if s["metric"].get("model") == model]
                    assert dashboard.finite_nonzero(mine), f"nothing for {model}: {where}"
                # one line per node and model, whatever other labels the series carry
                assert all(set(s["metric"]) == {"node", "model"} for s in got), where
                assert all(s["metric"]["node"] == NODE for s in got), where

        def final(name: str) -> dict[str, float]:
            got = api.instant(f'{name}{{node="{NODE}"}}', end)
            return {s["metric"]["model"]: float(s["value"][1]) for s in got}

        assert final("smllm_model_requests_total") == requests
        assert final("smllm_model_request_seconds_total") == pytest.approx(seconds, abs=1e-9)
