"""Benchmark the backfill of a long window: the report's OpenMetrics, then promtool's blocks.

`report --format openmetrics` and `promtool tsdb create-blocks-from openmetrics`, each timed
with its peak memory.

A window (default 30 days) of the demo's three nodes (`exporter.commands.demo.node_lines`: the
seed's workload, one request at a time per node, era-D lines: launch, timing block, release;
now and then an embedding or a cancelled request) as short-iso-precise dumps; the report runs
as its own process (sm-llm-exporter report ... --output-dir), then promtool on each part file it
wrote (one a two-hour block). Peak memory is each process's maximum resident set (getrusage of
the children of a small wrapper, one wrapper a process).

    .venv/bin/python bench/backfill.py [--days 30] [--step 15]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _daemon import exporter_command

from exporter.base.times import SECOND
from exporter.commands.demo import NODES, SEED, node_lines, short_iso

UNTIL_US = 1_790_000_000 * SECOND  # the window's end, long past
DAY_US = 86_400 * SECOND
WRAPPER = (
    "import resource, subprocess, sys, time; t = time.perf_counter(); "
    "r = subprocess.run(sys.argv[1:], capture_output=True); "
    "print(r.returncode, time.perf_counter() - t, "
    "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)
MIB = 2**20
KIB_PER_MIB = 1024


def measured(argv: list[str]) -> tuple[float, float]:
    """Seconds and peak resident MiB of one process."""
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, check=False
    )
    code, seconds, kib = out.stdout.split()
    if code != "0":
        raise SystemExit(f"{argv[0]} failed ({code}): {out.stderr[-2000:]}")
    return float(seconds), int(kib) / KIB_PER_MIB


def stamp(t_us: int) -> str:
    return datetime.fromtimestamp(t_us // SECOND, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def write_dumps(directory: Path, since_us: int, until_us: int) -> tuple[dict[str, Path], int, int]:
    """Each demo node's lines of the window as a dump: the paths, the lines and the requests."""
    paths, lines, requests = {}, 0, 0
    for node in NODES:
        paths[node] = directory / f"{node}.log"
        with paths[node].open("w", encoding="utf-8") as f:
            for line in node_lines(node, SEED, since_us, until_us):
                f.write(short_iso(node, line) + "\n")
                lines += 1
                requests += "total time" in line.message
    return paths, lines, requests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--step", type=int, default=15, help="seconds")
    args = ap.parse_args()
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool missing: `make test` as root installs Debian's prometheus")
    since = UNTIL_US - args.days * DAY_US
    with tempfile.TemporaryDirectory(prefix="smllm-bench-backfill-") as tmp:
        work = Path(tmp)
        began = time.perf_counter()
        paths, lines, requests = write_dumps(work, since, UNTIL_US)
        made_s = time.perf_counter() - began
        argv = [*exporter_command(), "report", "--since", stamp(since), "--until", stamp(UNTIL_US)]
        argv += [a for node, path in paths.items() for a in ("--input", f"{node}={path}")]
        out = work / "om"
        report_s, report_mib = measured(
            [*argv, "--format", "openmetrics", "--step", f"{args.step}s", "--output-dir", str(out)]
        )
        parts = sorted(out.iterdir())
        size_mib = sum(p.stat().st_size for p in parts) / MIB
        promtool_s, promtool_mib = 0.0, 0.0
        for part in parts:
            s, mib = measured(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", str(part), str(work / "db")]
            )
            promtool_s += s
            promtool_mib = max(promtool_mib, mib)
        result = {
            "days": args.days,
            "nodes": len(NODES),
            "requests": requests,
            "journal_lines": lines,
            "step_seconds": args.step,
            "generated_seconds": round(made_s, 1),
            "report_seconds": round(report_s, 1),
            "report_peak_mib": round(report_mib, 1),
            "parts": len(parts),
            "openmetrics_mib": round(size_mib, 1),
            "promtool_seconds_total": round(promtool_s, 1),
            "promtool_peak_mib": round(promtool_mib, 1),
        }
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
