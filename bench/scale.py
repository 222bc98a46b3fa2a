"""Benchmark one exporter over 200, 1,000 and 2,000 nodes, by SSH and by journal-remote.

    .venv/bin/python bench/scale.py                               # both kinds, 200 1,000 2,000
    .venv/bin/python bench/scale.py --nodes 20,50 --seconds 15    # a quick check
    .venv/bin/python bench/scale.py --kinds remote --nodes 1000

Every node writes one request a second, 10 journal entries each (`_journalctl.NodeJournal`:
its launch line, the era-D timing block, its release line and five lines without a parser
keyword, with journald's usual fields). Each node's journal starts `--backlog` seconds before
the exporter does, so the exporter has that much to catch up on. Two kinds of fleet:

- **ssh**: `bench/ssh.py`'s servers (`_sshfleet`): one process of asyncssh servers on
  127.0.0.1, a port a node, each emulating the node's `journalctl`. The exporter has one
  `ssh` node each, all sharing one `known_hosts` file, as `sm-llm-exporter known-hosts` prints
  it for a fleet.
- **remote**: real `systemd-journal-upload` sending to one real `systemd-journal-remote
  --split-mode=host` over HTTPS (`_remotefleet`, with the test suite's harness). A network
  namespace per host is too heavy for thousands of hosts, so the hosts sit behind `--gateways`
  gateways (one per 100 hosts by default): a network namespace with its own address and one
  uploader following a journal file that holds the entries of all its hosts, each entry with
  its host's `_HOSTNAME`, `_MACHINE_ID` and `_BOOT_ID`. The collector names its files after
  the uploader's address, so the hosts of a gateway share one of its files, as hosts behind a
  NAT address do, and the exporter tells them apart by `_HOSTNAME`. The exporter has one
  `journal-remote` node per host, on the collector's directory, as an operator's would. Before
  the exporter starts, the collector holds every entry of the backlog.

One run per kind and node count, each with a fresh exporter process (`sm-llm-exporter run`,
`since` at the journals' start, `histograms_per_node: false` as a large fleet is advised to
run, unless `--histograms-per-node`):

1. **catch-up**: from the exporter's start until every source is up and every node's
   `smllm_requests_total` has reached the requests its journal held complete at the start;
2. after a 5 s pause, an **ingest window** of `--seconds`, scraped every 15 s as Prometheus
   would: the exporter's CPU (utime + stime from /proc) as a share of one core;
3. a **scrape window**: `--scrapes` scrapes of /metrics 0.5 s apart, gzip accepted as
   Prometheus does: p50 and p99 to the body's end, the exporter's CPU meanwhile, and the size of
   /metrics (its text, and as sent gzipped);
4. **the end**: every node's journal ends after the requests started by then, and every node's
   counter must come to exactly the requests written (at most 60 s plus 0.05 s a node).

Peak resident memory (VmRSS) is sampled every 0.5 s from the start, and apart the peak of the
exporter's own (RssAnon): VmRSS also counts the pages of the journal files it maps, which the
kernel takes back when memory is short. The processes standing in
for the nodes (the ssh servers; or the writers, uploaders and collector) share the machine:
their CPU and the load average are printed too.

The goals at 2,000 nodes (issue 33): RSS under 500 MB, CPU under 50% of one core, /metrics p99
under 250 ms with gzip, catch-up under 60 s. They are printed with whether each is met, and
each figure's growth from the fewest nodes to the most, against the growth of the node count.
Exit 1 when a run fails or a node's counter is not exactly what was written; the goals are
reported, not asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import _remotefleet
import _sshfleet
from _daemon import Daemon, Scrape, poll, scrape
from _fleet import EndingJournal, PerNode, totals_by, written_by
from _journalctl import now_us
from _proc import cpu_seconds, rss_kb

from exporter.base.times import SECOND, iso

KINDS = ("ssh", "remote")
REQUESTS = "smllm_requests_total"
UP = "smllm_source_up"
GOAL_NODES = 2000
GOAL_RSS_MB = 500.0
GOAL_CPU = 50.0  # % of one core
GOAL_P99_MS = 250.0
GOAL_CATCHUP_S = 60.0
LINEAR_SLACK = 1.25  # a figure that grows by at most this times the nodes' growth is linear
# (systemd-journal-remote writing a gateway's file from export format stops at 120 MiB: at 250
# hosts that is reached within the run)
HOSTS_PER_GATEWAY = 100
PROMETHEUS_EVERY = 15.0  # s, in the ingest window
SCRAPE_EVERY = 0.5  # s, in the scrape window
WARMUP_S = 5.0
POLL_S = 0.5
SCRAPE_TIMEOUT_S = 60.0  # a scrape slower than this counts as this long
START_S = 60.0  # for the exporter to listen
CATCHUP_S, CATCHUP_PER_NODE_S = 120.0, 0.1  # at most, for the catch-up
READY_S, READY_PER_NODE_S = 60.0, 0.1  # at most, for the collector to hold the backlog
END_S, END_PER_NODE_S = 60.0, 0.05  # at most, for the counters to reach what was written
SETTLE_S = 3.0  # after the counters are exact, looked at once more
STOP_S = 60.0  # for the exporter's clean exit
KB_PER_MB = 1024


class Fleet(Protocol):
    """What a run needs of the processes standing in for the nodes (`_sshfleet.Fleet`,
    `_remotefleet.Fleet`)."""

    names: list[str]

    def rows(self) -> list[dict[str, Any]]: ...
    def pids(self) -> list[int]: ...
    def down(self) -> str | None: ...
    def end(self) -> dict[str, int]: ...
    def close(self) -> None: ...


@dataclass
class Row:
    """One run's figures."""

    kind: str
    nodes: int
    catchup_s: float | None = None
    cpu: float | None = None  # % of one core, the ingest window
    scraped_cpu: float | None = None  # % of one core, the scrape window
    rss_mb: float = 0.0  # peak
    anon_mb: float = 0.0  # peak of its own memory (RssAnon), without the journal pages mapped
    latencies_ms: list[float] = field(default_factory=list)
    scrape_errors: int = 0
    size: int = 0  # /metrics text, bytes
    lines: int = 0
    wire: int = 0  # /metrics as sent, gzipped
    written: int = 0  # requests, all nodes
    counted: int = 0
    off: dict[str, tuple[float, int]] = field(default_factory=dict)  # node -> (counted, written)
    fleet_cpu: float | None = None  # the nodes' stand-ins, % of one core, the ingest window
    load: float = 0.0
    note: str = ""
    problems: list[str] = field(default_factory=list)

    def p(self, q: float) -> float | None:
        return percentile(self.latencies_ms, q) if self.latencies_ms else None

    @property
    def exact(self) -> bool:
        return self.written > 0 and not self.off and self.counted == self.written


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


class PeakRss(threading.Thread):
    """A process's peak resident memory, sampled every `POLL_S` until `stop`: all of it
    (`kb`), and its own (`anon_kb`: without the pages of the journal files it maps, which the
    kernel takes back when memory is short)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.kb, self.anon_kb = pid, 0, 0
        self._done = threading.Event()

    def run(self) -> None:
        while True:
            self._sample()
            if self._done.wait(POLL_S):
                return

    def _sample(self) -> None:
        self.kb = max(self.kb, rss_kb(self.pid))
        self.anon_kb = max(self.anon_kb, rss_kb(self.pid, "RssAnon"))

    def stop(self) -> tuple[float, float]:
        """Stop sampling: the peaks, all and its own, in MB."""
        self._done.set()
        self.join()
        self._sample()
        return self.kb / KB_PER_MB, self.anon_kb / KB_PER_MB


def cpu_of(pids: list[int]) -> float:
    """The CPU seconds of the processes so far (those gone count 0)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += cpu_seconds(pid)
    return total


def wire_size(url: str) -> int:
    """The bytes of /metrics as the exporter sends them to a client that accepts gzip."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT_S) as r:
        return len(r.read())


def per_node(url: str) -> PerNode | None:
    """The per-node requests and sources up, or None when /metrics does not answer."""
    try:
        text = scrape(url, SCRAPE_TIMEOUT_S).text
    except OSError:
        return None
    return PerNode.scan(text, (REQUESTS, UP))


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- one run ----------------------------------------------------------------------------------


def start_fleet(kind: str, nodes: int, directory: Path, t0_us: int, gateways: int) -> Fleet:
    if kind == "ssh":
        return _sshfleet.Fleet(directory, nodes, t0_us=t0_us)
    lacking = _remotefleet.missing()
    if lacking:
        raise RuntimeError("the remote kind needs " + ", ".join(lacking))
    fleet = _remotefleet.Fleet(directory, nodes, gateways, t0_us)
    try:
        # the backlog written, and every entry of it at the collector (the entries written
        # since go on coming: a busy fleet's collector is always a little behind its writer)
        began = now_us()
        backlog: list[int] = []

        def uploaded() -> bool:
            if (problem := fleet.down()) is not None:
                raise RuntimeError(problem)
            if not backlog and (stats := fleet.stats())["until_us"] >= began:
                backlog.append(stats["entries"])
            return bool(backlog) and fleet.collected() >= backlog[0]

        if not poll(uploaded, READY_S + nodes * READY_PER_NODE_S, POLL_S):
            raise RuntimeError(
                f"the collector holds {fleet.collected():,} entries of {fleet.written():,}"
            )
    except BaseException:
        fleet.close()
        raise
    return fleet


def measure(row: Row, args: argparse.Namespace, directory: Path) -> None:
    """One run into `row` (see the module's docstring); an exception when it cannot go on."""
    nodes = row.nodes
    t0_us = (now_us() - round(args.backlog * SECOND)) // SECOND * SECOND
    gateways = args.gateways or math.ceil(nodes / HOSTS_PER_GATEWAY)
    if row.kind == "remote":
        row.note = f"{gateways} gateway{'s' if gateways > 1 else ''}"
    say(f"{row.kind}, {nodes} nodes: starting the fleet")
    fleet = start_fleet(row.kind, nodes, directory, t0_us, gateways)
    exporter: Daemon | None = None
    peak: PeakRss | None = None
    try:
        # when each node's requests were complete, as far as the catch-up needs
        journals = [EndingJournal(i, t0_us) for i in range(nodes)]
        horizon = now_us() + round((START_S + 10) * SECOND)
        totals = {j.name: totals_by(j, horizon) for j in journals}
        exporter = daemon = Daemon(
            directory / "exporter",
            {
                "state_dir": str(directory / "state"),
                "since": iso(t0_us),
                "histograms_per_node": args.histograms_per_node,
                "nodes": fleet.rows(),
            },
        )
        say(f"{row.kind}, {nodes} nodes: the exporter starts; catching up")
        start_us = now_us()
        began = time.monotonic()
        proc = exporter.launch()
        peak = PeakRss(proc.pid)
        peak.start()
        port = poll(lambda: daemon.bound() if proc.poll() is None else -1, START_S)
        if port is None or port < 0:
            raise RuntimeError(f"the exporter did not start: {daemon.log_text()[-3000:]}")
        if now_us() > horizon:
            raise RuntimeError("the exporter took longer to listen than the totals reach")
        url = daemon.url + "/metrics"
        expected = {name: written_by(t, start_us) for name, t in totals.items()}
        row.catchup_s = catch_up(row, fleet, url, expected, began, proc.pid)
        time.sleep(WARMUP_S)
        ingest(row, fleet, url, args.seconds, proc.pid)
        scrape_window(row, url, args.scrapes, proc.pid)
        count_the_end(row, fleet, url)
        daemon.stop(STOP_S)
    finally:
        if peak is not None:
            row.rss_mb, row.anon_mb = peak.stop()
        if exporter is not None:
            if row.problems or row.catchup_s is None:
                say("\n".join(exporter.log_text().splitlines()[-20:]))
            exporter.close(grace=20)
        fleet.close()


def catch_up(
    row: Row, fleet: Fleet, url: str, expected: dict[str, int], began: float, pid: int
) -> float | None:
    """Seconds from the start until every source is up and every node has counted what its
    journal held at the start (None, and a problem, if not within the deadline)."""
    deadline = CATCHUP_S + row.nodes * CATCHUP_PER_NODE_S
    last: list[str] = ["no answer from /metrics"]

    def caught_up() -> bool:
        if (problem := fleet.down()) is not None:
            raise RuntimeError(problem)
        if rss_kb(pid) == 0:
            raise RuntimeError("the exporter exited")
        figures = per_node(url)
        if figures is None:
            return False
        up = sum(figures.of(UP).values())
        counted = figures.of(REQUESTS)
        behind = [n for n, want in expected.items() if counted.get(n, 0.0) < want]
        last[0] = f"{up:.0f} of {row.nodes} sources up, {len(behind)} nodes behind"
        return up >= row.nodes and not behind

    if poll(caught_up, deadline, POLL_S):
        seconds = time.monotonic() - began
        say(f"{row.kind}, {row.nodes} nodes: caught up in {seconds:.1f} s")
        return seconds
    row.problems.append(f"not caught up within {deadline:.0f} s: {last[0]}")
    return None


def ingest(row: Row, fleet: Fleet, url: str, seconds: float, pid: int) -> None:
    """The ingest window: the exporter's CPU and the fleet's, scraped as Prometheus would."""
    say(f"{row.kind}, {row.nodes} nodes: ingest window of {seconds:.0f} s")
    pids = fleet.pids()
    cpu0, fleet0, t0 = cpu_seconds(pid), cpu_of(pids), time.monotonic()
    next_scrape = t0
    while (now := time.monotonic()) < t0 + seconds:
        if now >= next_scrape:
            with contextlib.suppress(OSError):
                scrape(url, SCRAPE_TIMEOUT_S)
            next_scrape += PROMETHEUS_EVERY
        time.sleep(max(0.0, min(next_scrape, t0 + seconds) - time.monotonic()))
    window = time.monotonic() - t0
    row.cpu = 100 * (cpu_seconds(pid) - cpu0) / window
    row.fleet_cpu = 100 * (cpu_of(pids) - fleet0) / window
    row.load = os.getloadavg()[0]
    if (problem := fleet.down()) is not None:
        raise RuntimeError(problem)


def scrape_window(row: Row, url: str, scrapes: int, pid: int) -> None:
    """`scrapes` scrapes, `SCRAPE_EVERY` apart: their latency, the size, the CPU meanwhile."""
    say(f"{row.kind}, {row.nodes} nodes: {scrapes} scrapes")
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    last: Scrape | None = None
    for i in range(scrapes):
        time.sleep(max(0.0, t0 + i * SCRAPE_EVERY - time.monotonic()))
        try:
            last = scrape(url, SCRAPE_TIMEOUT_S)
            row.latencies_ms.append(last.seconds * 1000)
        except OSError:
            row.scrape_errors += 1
            row.latencies_ms.append(SCRAPE_TIMEOUT_S * 1000)
    row.scraped_cpu = 100 * (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
    if last is not None:
        row.size = len(last.text.encode())
        row.lines = last.text.count("\n")
        with contextlib.suppress(OSError):
            row.wire = wire_size(url)


def count_the_end(row: Row, fleet: Fleet, url: str) -> None:
    """End the journals; every node's counter must come to exactly the requests written."""
    written = fleet.end()
    row.written = sum(written.values())
    say(f"{row.kind}, {row.nodes} nodes: journals ended at {row.written:,} requests; counting")
    deadline = END_S + row.nodes * END_PER_NODE_S
    seen: list[dict[str, float]] = [{}]

    def reached() -> bool:
        figures = per_node(url)
        if figures is None:
            return False
        seen[0] = figures.of(REQUESTS)
        return all(seen[0].get(n, 0.0) >= w for n, w in written.items())

    if poll(reached, deadline, POLL_S):
        time.sleep(SETTLE_S)  # then once more: nothing may come past what was written
        figures = per_node(url)
        if figures is not None:
            seen[0] = figures.of(REQUESTS)
    counted = seen[0]
    row.counted = round(sum(counted.get(n, 0.0) for n in written))
    row.off = {n: (counted.get(n, 0.0), w) for n, w in written.items() if counted.get(n, 0.0) != w}
    if row.off:
        some = ", ".join(f"{n} {c:.0f} of {w}" for n, (c, w) in list(row.off.items())[:5])
        nodes = f"{len(row.off)} node{'s' * (len(row.off) > 1)}"
        row.problems.append(f"counters not exact on {nodes}: {some}")


def run(kind: str, nodes: int, args: argparse.Namespace) -> Row:
    row = Row(kind, nodes)
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{kind}-{nodes}-") as tmp:
        directory = Path(tmp) if args.keep is None else args.keep / f"{kind}-{nodes}"
        directory.mkdir(parents=True, exist_ok=True)
        try:
            measure(row, args, directory)
        except Exception as failed:  # the run failed: said, and the others still run
            row.problems.append(f"the run failed: {failed}")
    for p in row.problems:
        say(f"{kind}, {nodes} nodes: FAIL: {p}")
    return row


# -- the report -------------------------------------------------------------------------------


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def table(rows: list[Row]) -> Iterator[str]:
    head = (
        "kind",
        "nodes",
        "catch-up",
        "CPU",
        "CPU scraped",
        "RSS peak (anon)",
        "p50",
        "p99",
        "/metrics",
        "gzipped",
        "requests",
        "counters",
        "fleet CPU",
        "load",
    )
    cells = [head]
    for r in rows:
        exact = "exact" if r.exact else f"{len(r.off)} off" if r.written else "-"
        cells.append(
            (
                r.kind + (f" ({r.note})" if r.note else ""),
                f"{r.nodes:,}",
                fmt(r.catchup_s, ".1f", " s"),
                fmt(r.cpu, ".1f", "%"),
                fmt(r.scraped_cpu, ".1f", "%"),
                f"{r.rss_mb:.0f} MB ({r.anon_mb:.0f})",
                fmt(r.p(50), ".1f", " ms"),
                fmt(r.p(99), ".1f", " ms")
                + (f" ({r.scrape_errors} failed)" * bool(r.scrape_errors)),
                f"{r.size / 1e6:.2f} MB, {r.lines:,} lines" if r.size else "-",
                f"{r.wire / 1e6:.2f} MB" if r.wire else "-",
                f"{r.counted:,} of {r.written:,}" if r.written else "-",
                exact,
                fmt(r.fleet_cpu, ".0f", "%"),
                f"{r.load:.2f}",
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for k, c in enumerate(cells):
        yield "  ".join(
            x.ljust(w) if i == 0 else x.rjust(w)
            for i, (x, w) in enumerate(zip(c, widths, strict=True))
        )
        if k == 0:
            yield "  ".join("-" * w for w in widths)


def goals(rows: list[Row]) -> Iterator[str]:
    yield (
        f"Goals at {GOAL_NODES:,} nodes: RSS < {GOAL_RSS_MB:.0f} MB, CPU < {GOAL_CPU:.0f}% of"
        f" one core, /metrics p99 < {GOAL_P99_MS:.0f} ms with gzip, catch-up <"
        f" {GOAL_CATCHUP_S:.0f} s"
    )
    for kind in dict.fromkeys(r.kind for r in rows):
        at = next((r for r in rows if r.kind == kind and r.nodes == GOAL_NODES), None)
        if at is None:
            yield f"  {kind}: no {GOAL_NODES:,}-node run"
            continue
        checks = (
            ("RSS", at.rss_mb if at.rss_mb else None, GOAL_RSS_MB, ".0f", " MB"),
            ("CPU", at.cpu, GOAL_CPU, ".1f", "%"),
            ("p99", at.p(99), GOAL_P99_MS, ".1f", " ms"),
            ("catch-up", at.catchup_s, GOAL_CATCHUP_S, ".1f", " s"),
        )
        verdicts = []
        for name, value, goal, spec, unit in checks:
            met = "not measured" if value is None else "met" if value < goal else "NOT met"
            verdicts.append(f"{name} {fmt(value, spec, unit)} {met}")
        yield f"  {kind}: " + "; ".join(verdicts)


def growth(rows: list[Row]) -> Iterator[str]:
    for kind in dict.fromkeys(r.kind for r in rows):
        done = sorted((r for r in rows if r.kind == kind and not r.problems), key=lambda r: r.nodes)
        if len(done) < 2 or done[0].nodes == done[-1].nodes:
            yield f"Growth, {kind}: fewer than two node counts measured"
            continue
        a, b = done[0], done[-1]
        n = b.nodes / a.nodes
        figures = (
            ("CPU", a.cpu, b.cpu),
            ("RSS", a.rss_mb, b.rss_mb),
            ("p50", a.p(50), b.p(50)),
            ("p99", a.p(99), b.p(99)),
            ("/metrics size", float(a.size), float(b.size)),
            ("catch-up", a.catchup_s, b.catchup_s),
        )
        parts = []
        for name, x, y in figures:
            if not x or y is None:
                parts.append(f"{name} -")
                continue
            f = y / x
            verdict = "linear or less" if f <= LINEAR_SLACK * n else "MORE than linear"
            parts.append(f"{name} {f:.1f}x ({verdict})")
        yield f"Growth, {kind}, {a.nodes:,} -> {b.nodes:,} nodes ({n:.3g}x): " + "; ".join(parts)


def node_counts(text: str) -> list[int]:
    counts = [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("node counts: positive integers, comma-separated")
    return counts


def kinds(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out or any(k not in KINDS for k in out):
        raise argparse.ArgumentTypeError(f"kinds: among {', '.join(KINDS)}, comma-separated")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", type=node_counts, default=[200, 1000, 2000], metavar="N,N,...")
    ap.add_argument("--kinds", type=kinds, default=list(KINDS), metavar="ssh,remote")
    ap.add_argument("--seconds", type=float, default=60.0, help="the ingest window (default 60)")
    ap.add_argument("--scrapes", type=int, default=100, help="the scrape window (default 100)")
    ap.add_argument(
        "--backlog", type=float, default=60.0, help="seconds of journal before the start (60)"
    )
    ap.add_argument(
        "--gateways", type=int, default=0, help=f"remote: default one per {HOSTS_PER_GATEWAY} hosts"
    )
    ap.add_argument(
        "--histograms-per-node", action="store_true", help="the exporter's default, not a fleet's"
    )
    ap.add_argument(
        "--keep", type=Path, help="run in DIR/KIND-NODES and keep it (the journals, the logs)"
    )
    args = ap.parse_args(argv)
    say(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    rows = [run(kind, n, args) for kind in args.kinds for n in args.nodes]
    print(
        f"One exporter, one request a node a second, a backlog of {args.backlog:.0f} s;"
        f" ingest window {args.seconds:.0f} s, then {args.scrapes} scrapes"
        f" {SCRAPE_EVERY} s apart; histograms_per_node: {str(args.histograms_per_node).lower()}"
    )
    for line in table(rows):
        print(line)
    print()
    for line in goals(rows):
        print(line)
    for line in growth(rows):
        print(line)
    failed = [r for r in rows if r.problems]
    for r in failed:
        for p in r.problems:
            print(f"FAIL: {r.kind}, {r.nodes} nodes: {p}")
    print("FAIL" if failed else "PASS: every run done, every counter exact")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
