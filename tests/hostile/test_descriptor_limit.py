"""More nodes than the descriptor limit allows: the listener answers, the rest say why.

The daemon runs under `prlimit --nofile=200:200` with 120 file nodes (each source holds up to
two descriptors). The nodes the budget takes are read exactly; the others are down with their
reason; /metrics and /api/status answer throughout.
"""

from __future__ import annotations

import json
from pathlib import Path

from exporter.base.times import SECOND

from support.daemon_process import DaemonProcess, file_nodes, run_command
from support.scrape import answer
from support.tools import require_tool, wait_for
from support.workload import Req, journal, write_dump

NODES = [f"n{i:03d}" for i in range(120)]
T0 = 1_790_000_000 * SECOND


def limited(config: Path) -> list[str]:
    return [require_tool("prlimit"), "--nofile=200:200", "--", *run_command(config)]


def test_nodes_past_the_descriptor_budget_are_down_and_say_why(tmp_path: Path) -> None:
    paths = {n: tmp_path / f"{n}.json" for n in NODES}
    for i, (node, path) in enumerate(paths.items()):
        reqs = [
            Req(node, T0 + k * 10 * SECOND, T0 + (k * 10 + 3) * SECOND, 100 + i, "timed", 0, k)
            for k in range(1 + i % 3)
        ]
        write_dump(path, journal(node, reqs), "fd")
    config = {
        "nodes": file_nodes(paths),
        "since": "2026-01-01T00:00:00",
        "http_max_connections": 16,
    }
    d = DaemonProcess(tmp_path / "d", config, command=limited)
    d.start()
    try:

        def settled() -> tuple[dict[str, float], dict[str, str]] | None:
            got = answer(d.url + "/api/status")
            if got is None or got[0] != 200:
                return None
            nodes = json.loads(got[1])["nodes"]
            errors = {n["name"]: n["last_error"] for n in nodes if not n["followed"]}
            up = {n["name"] for n in nodes if n["followed"]}
            if not up or not errors or not all(errors.values()):
                return None  # (the sources not all started, or some not read yet)
            samples = d.metrics()
            requests = {
                n: sum(
                    v
                    for (name, labels), v in samples.items()
                    if name == "smllm_requests_total" and ("node", n) in labels
                )
                for n in up
            }
            if any(requests[n] != 1 + NODES.index(n) % 3 for n in up):
                return None
            return requests, errors

        requests, errors = wait_for(settled, 60, "the nodes it can read read, the others down")
        assert 10 <= len(requests) < len(NODES)
        assert all("too few file descriptors" in e for e in errors.values()), errors
        assert all("LimitNOFILE" in e for e in errors.values())
        got = answer(d.url + "/metrics")
        assert got is not None and got[0] == 200
    finally:
        d.stop()
