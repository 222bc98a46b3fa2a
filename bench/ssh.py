"""Benchmark the exporter following many nodes over SSH: CPU, memory, /metrics latency, bytes.

    .venv/bin/python bench/ssh.py                       # 200 nodes, a 60 s window
    .venv/bin/python bench/ssh.py --nodes 20 --seconds 15
    .venv/bin/python bench/ssh.py --old                 # journalctl without --output-fields/--grep
    .venv/bin/python bench/ssh.py --profile             # and where the exporter's time goes

A server process (`_sshfleet`) runs `--nodes` asyncssh servers on 127.0.0.1 (port 0
each, one generated ed25519 host key, one generated client key authorised), each emulating
`journalctl` for its node (`_journalctl`: the command parsed with shlex, -u, -o json,
--no-pager, --all, -n N, --cursor, --after-cursor, --since @S, --follow, --no-tail,
--output-fields=..., --grep PATTERN; any other option refused); with `--old` the options
systemd 219 lacks (--output-fields, --grep) are refused with exit 1 and the JSON is
pretty-spaced as it printed it. Each node's journal is deterministic
(`random.Random`): one request a second, one at a time, each 10 entries: its launch line, the
era-D timing block (prompt eval, eval, total), its release line and 5 lines without a parser
keyword (params, health polls, idle, POST). Every JSON entry has journald's usual fields
(__CURSOR, __REALTIME_TIMESTAMP, __MONOTONIC_TIMESTAMP, _BOOT_ID, _PID, _UID, _GID, _COMM, _EXE,
_CMDLINE, _SYSTEMD_UNIT, _SYSTEMD_CGROUP, _TRANSPORT, SYSLOG_IDENTIFIER, PRIORITY, _HOSTNAME,
MESSAGE), generated as the clock reaches them; --output-fields keeps only the named ones (and the
four journalctl always prints) and --grep only the entries whose MESSAGE matches, so the bytes
sent differ. The server counts, per node, the bytes its follow streams wrote and what the full
entries would have been.

The exporter runs as its own process (`sm-llm-exporter run --config CFG`, `--nodes` ssh
nodes, known_hosts with every `[127.0.0.1]:PORT`, the generated client key, state in a temporary
directory). Once every source is up (sum of smllm_source_up == nodes) and after a 5 s warm-up:
- an ingest window of `--seconds`, scraped every 15 s as Prometheus would: the exporter's CPU
  (utime + stime from /proc/PID/stat) as a share of one core, the rate of smllm_requests_total
  (≈ one a second a node) and the payload bytes sent per request (SSH framing aside);
- then a scrape window: 100 scrapes of /metrics 0.5 s apart (urllib, gzip accepted as
  Prometheus does), their latency and the exporter's CPU meanwhile (a snapshot is rendered and
  gzipped when first scraped, or, for a scraper this frequent, ahead of its scrape).
Peak resident memory (VmRSS from /proc/PID/status) is sampled every 0.5 s over both. The ssh
servers' CPU and the host's load average are printed too: they share the machine.

Checks (exit 1 on failure): every source up, the requests rate within 5% of the nodes' rate and
of what the servers sent, no parse errors, and the goals: under 20% of one core, under 300 MB,
/metrics p99 under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _daemon import Daemon, Scrape, poll, run_command, scrape, total
from _proc import cpu_seconds, rss_kb
from _sshfleet import Fleet, serve

GOAL_CPU = 20.0  # % of one core
GOAL_RSS = 300.0  # MB
GOAL_SCRAPE = 50.0  # ms, p99
SCRAPE_EVERY = 0.5  # s, in the scrape window
SCRAPES = 100
PROMETHEUS_EVERY = 15.0  # s, in the ingest window
WARMUP = 5.0  # s
START_S = 60.0  # for the exporter to start and every source to come up, and per node:
START_PER_NODE_S = 0.5
KB_PER_MB = 1024


# -- the measurement (client side) ----------------------------------------------------------


@dataclass
class Result:
    nodes: int
    window: float
    cpu: float
    rss_mb: float
    scraping_cpu: float
    server_cpu: float
    load: float
    latencies_ms: list[float] = field(default_factory=list)
    rate: float = 0.0
    sent_rate: float = 0.0
    up: float = 0.0
    parse_errors: float = 0.0
    bytes_sent: float = 0.0
    bytes_full: float = 0.0


def up(s: Scrape) -> float:
    return total(s.samples, "smllm_source_up")


def requests(s: Scrape) -> float:
    return total(s.samples, "smllm_requests_total")


def totals(stats: dict[str, dict[str, int]], key: str) -> int:
    return sum(s[key] for s in stats.values())


def measure(args: argparse.Namespace, directory: Path) -> Result:
    fleet = Fleet(directory, args.nodes, old=args.old)
    profile = directory / "exporter.prof"
    exporter: Daemon | None = None
    try:
        rows = fleet.rows()

        def profiled_run(config: Path) -> list[str]:
            """This file, profiling the exporter's event loop over the ingest window."""
            return [sys.executable, __file__, "--profiled", str(profile), "--config", str(config)]

        exporter = Daemon(
            directory / "exporter",
            {"state_dir": str(directory / "state"), "nodes": rows},
            command=profiled_run if args.profile else run_command,
        )
        exporter.start(START_S + args.nodes * START_PER_NODE_S)
        url = exporter.url + "/metrics"
        every_up = poll(
            lambda: up(scrape(url)) >= args.nodes, START_S + args.nodes * START_PER_NODE_S, 0.5
        )
        print(
            f"sources up: {up(scrape(url)):.0f}/{args.nodes}; warming up {WARMUP:.0f} s",
            file=sys.stderr,
        )
        if not every_up:  # the table will say FAIL; the exporter's log says why
            print("\n".join(exporter.log_text().splitlines()[-20:]), file=sys.stderr)
        time.sleep(WARMUP)
        pid = exporter.pid
        # the ingest window: scraped every 15 s, as Prometheus would
        first = scrape(url)
        stats0 = fleet.stats()
        if args.profile:
            os.kill(pid, signal.SIGUSR1)
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        server_cpu0 = cpu_seconds(fleet.pid)
        peak = rss_kb(pid)
        next_scrape = t0 + PROMETHEUS_EVERY
        while (now := time.monotonic()) < t0 + args.seconds:
            time.sleep(min(SCRAPE_EVERY, t0 + args.seconds - now))
            peak = max(peak, rss_kb(pid))
            if time.monotonic() >= next_scrape:
                scrape(url)
                next_scrape += PROMETHEUS_EVERY
        last = scrape(url)
        cpu1, t1 = cpu_seconds(pid), time.monotonic()
        if args.profile:
            os.kill(pid, signal.SIGUSR2)
        server_cpu1 = cpu_seconds(fleet.pid)
        stats1 = fleet.stats()
        window = t1 - t0
        # the scrape window: SCRAPES scrapes, SCRAPE_EVERY apart
        latencies: list[float] = []
        cpu2, t2 = cpu_seconds(pid), time.monotonic()
        for i in range(SCRAPES):
            time.sleep(max(0.0, t2 + (i + 1) * SCRAPE_EVERY - time.monotonic()))
            latencies.append(scrape(url).seconds * 1000)
            peak = max(peak, rss_kb(pid))
        cpu3, t3 = cpu_seconds(pid), time.monotonic()
        sent_requests = totals(stats1, "requests") - totals(stats0, "requests")
        per = max(sent_requests, 1)
        return Result(
            nodes=args.nodes,
            window=window,
            cpu=100 * (cpu1 - cpu0) / window,
            scraping_cpu=100 * (cpu3 - cpu2) / (t3 - t2),
            server_cpu=100 * (server_cpu1 - server_cpu0) / window,
            load=os.getloadavg()[0],
            rss_mb=peak / KB_PER_MB,
            latencies_ms=latencies,
            rate=(requests(last) - requests(first)) / window,
            sent_rate=sent_requests / window,
            up=up(last),
            parse_errors=total(last.samples, "smllm_parse_errors_total"),
            bytes_sent=(totals(stats1, "sent") - totals(stats0, "sent")) / per,
            bytes_full=(totals(stats1, "full") - totals(stats0, "full")) / per,
        )
    finally:
        if exporter is not None:
            exporter.close(grace=20)
        if args.profile and profile.exists():
            out = io.StringIO()
            stats = pstats.Stats(str(profile), stream=out)
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(40)
            print(out.getvalue())
        fleet.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def table(r: Result, old: bool) -> Iterator[str]:
    lat = r.latencies_ms
    p50, p99, worst = statistics.median(lat), percentile(lat, 99), max(lat)
    slow = sum(x >= GOAL_SCRAPE for x in lat)
    mode = "full entries (--old)" if old else "--output-fields + --grep"

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    rows = [
        (
            "exporter CPU, % of one core",
            f"{r.cpu:.1f}",
            f"< {GOAL_CPU:.0f}",
            r.cpu < GOAL_CPU,
        ),
        ("exporter CPU, scrape window", f"{r.scraping_cpu:.1f}", "", None),
        ("exporter RSS, MB (peak)", f"{r.rss_mb:.1f}", f"< {GOAL_RSS:.0f}", r.rss_mb < GOAL_RSS),
        ("/metrics p50, ms", f"{p50:.1f}", "", None),
        ("/metrics p99, ms", f"{p99:.1f}", f"< {GOAL_SCRAPE:.0f}", p99 < GOAL_SCRAPE),
        ("/metrics max, ms", f"{worst:.1f}", "", None),
        (f"/metrics over {GOAL_SCRAPE:.0f} ms, scrapes", f"{slow}", "", None),
        ("requests/s counted", f"{r.rate:.1f}", f"≈ {r.nodes}", None),
        ("requests/s sent by the servers", f"{r.sent_rate:.1f}", "", None),
        (f"bytes/request sent: {mode}", f"{r.bytes_sent:.0f}", "", None),
        ("bytes/request as full entries", f"{r.bytes_full:.0f}", "", None),
        ("ssh servers' CPU, % of one core", f"{r.server_cpu:.1f}", "", None),
        (f"host: {os.cpu_count()} cores, load average (1 min)", f"{r.load:.2f}", "", None),
    ]
    yield (
        f"{r.nodes} nodes: ingest window {r.window:.1f} s (a scrape every"
        f" {PROMETHEUS_EVERY:.0f} s), then a scrape window of {len(lat)} scrapes"
        f" {SCRAPE_EVERY} s apart"
    )
    yield f"{'':42} {'value':>10}  {'goal':>6}  verdict"
    for name, value, goal, ok in rows:
        yield f"{name:42} {value:>10}  {goal:>6}  {'' if ok is None else verdict(ok)}"


def checks(r: Result) -> list[str]:
    problems = []
    if r.up != r.nodes:
        problems.append(f"sources up {r.up:.0f}, not {r.nodes}")
    if abs(r.rate - r.nodes) > 0.05 * r.nodes:
        problems.append(f"requests/s counted {r.rate:.1f}, not ≈ {r.nodes}")
    if abs(r.rate - r.sent_rate) > 0.05 * max(r.sent_rate, 1):
        problems.append(f"requests/s counted {r.rate:.1f} vs sent {r.sent_rate:.1f}")
    if r.parse_errors:
        problems.append(f"{r.parse_errors:.0f} parse errors")
    if r.cpu >= GOAL_CPU:
        problems.append(f"CPU {r.cpu:.1f}% of one core, goal < {GOAL_CPU:.0f}%")
    if r.rss_mb >= GOAL_RSS:
        problems.append(f"RSS {r.rss_mb:.1f} MB, goal < {GOAL_RSS:.0f} MB")
    p99 = percentile(r.latencies_ms, 99)
    if p99 >= GOAL_SCRAPE:
        problems.append(f"/metrics p99 {p99:.1f} ms, goal < {GOAL_SCRAPE:.0f} ms")
    return problems


def profiled(path: Path, config: str) -> int:
    """The exporter, its event loop's thread profiled from SIGUSR1 to SIGUSR2 (the ingest
    window; threads that render or write checkpoints are not), the profile written to `path`."""
    import cProfile

    from exporter import cli

    profiler = cProfile.Profile()

    def stop(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(path)

    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, stop)
    return cli.main(["run", "--config", config])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--old", action="store_true", help="journalctl without --output-fields/--grep")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="profile the exporter's event loop over the ingest window with cProfile (its CPU"
        " figure then includes the profiler's)",
    )
    ap.add_argument("--profiled", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        asyncio.run(serve(args.nodes, args.dir, args.old))
        return 0
    if args.profiled:
        return profiled(args.profiled, args.config)
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as tmp:
        r = measure(args, Path(tmp))
    for line in table(r, args.old):
        print(line)
    problems = checks(r)
    for p in problems:
        print(f"FAIL: {p}")
    print("FAIL" if problems else "PASS")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
