"""Backfill of a long window: `report --format openmetrics` and `promtool tsdb create-blocks-from
openmetrics`, each timed with its peak memory.

A generated window (default 30 days) of three nodes with two slots each, era-D lines (launch,
timing block, release; some cancels and errors) as short-iso-precise dumps; the report runs as
its own process (python -m exporter report ... --output-dir), then promtool on each part file
it wrote (one a two-hour block). Peak memory is each process's maximum resident set
(getrusage of the children of a small wrapper, one wrapper a process).

    .venv/bin/python bench/backfill.py [--days 30] [--step 15]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.workload import generate, journal

SECOND = 1_000_000
NODES = ("a", "b", "c")
WRAPPER = (
    "import resource, subprocess, sys, time; t = time.perf_counter(); "
    "r = subprocess.run(sys.argv[1:], capture_output=True); "
    "print(r.returncode, time.perf_counter() - t, "
    "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def measured(argv: list[str]) -> tuple[float, float]:
    """Seconds and peak resident MiB of one process."""
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, check=False
    )
    code, seconds, kib = out.stdout.split()
    if code != "0":
        raise SystemExit(f"{argv[0]} failed ({code}): {out.stderr[-2000:]}")
    return float(seconds), int(kib) / 1024


def short_iso(node: str, t_us: int, pid: int, message: str) -> str:
    stamp = datetime.fromtimestamp(t_us // SECOND, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{t_us % SECOND:06d}+0000 {node} sm-llm[{pid}]: {message}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--step", type=int, default=15, help="seconds")
    args = ap.parse_args()
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool missing: `make test` as root installs Debian's prometheus")
    until = 1_790_000_000 * SECOND
    since = until - args.days * 86_400 * SECOND
    with tempfile.TemporaryDirectory(prefix="smllm-bench-backfill-") as tmp:
        work = Path(tmp)
        began = time.perf_counter()
        reqs = generate(random.Random(30), NODES, since, until, slots=2, gap_s=30)
        argv = [
            sys.executable,
            "-m",
            "exporter",
            "report",
            "--since",
            datetime.fromtimestamp(since // SECOND, UTC).strftime("%Y-%m-%dT%H:%M:%S"),
            "--until",
            datetime.fromtimestamp(until // SECOND, UTC).strftime("%Y-%m-%dT%H:%M:%S"),
        ]
        lines = 0
        for node in NODES:
            path = work / f"{node}.log"
            with path.open("w", encoding="utf-8") as f:
                for ln in journal(node, [r for r in reqs if r.node == node]):
                    f.write(short_iso(node, ln.time_us, ln.pid, ln.message))
                    lines += 1
            argv += ["--input", f"{node}={path}"]
        made_s = time.perf_counter() - began
        out = work / "om"
        report_s, report_mib = measured(
            [*argv, "--format", "openmetrics", "--step", f"{args.step}s", "--output-dir", str(out)]
        )
        parts = sorted(out.iterdir())
        size_mib = sum(p.stat().st_size for p in parts) / 2**20
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
            "requests": len(reqs),
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
