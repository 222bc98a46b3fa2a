"""The replicated pair: two exporters on the same journals, one killed and restarted, scraped by a
real Prometheus and kept as one series by a real VictoriaMetrics; increase() over the run of that
series equals the report's figures (plus what VictoriaMetrics adds for a drop, below).

Two daemons (`replica` a and b) run the same config on the same dump files. The test writes
requests of three nodes into the files as their time comes, in two phases. Between the phases
one replica is killed with SIGKILL, Prometheus scrapes it down, and it is started again: it
resumes from its checkpoint. Prometheus (Debian's, every second) scrapes both with the scrape job
of deploy/prometheus/remote-write.yml and sends their samples to VictoriaMetrics (Debian's
1.79.5) with that file's `write_relabel_configs`, which drop `replica` and set one `instance`.
VictoriaMetrics runs with the flags of deploy/victoria-metrics/victoria-metrics, its
`-dedup.minScrapeInterval` set to the scrape interval. Both examples are loaded and only their
addresses (and that interval) filled in, so they cannot rot.

What VictoriaMetrics 1.79.5 does with the pair, from its source:

- lib/storage/dedup.go, `DeduplicateSamples`: of each series it keeps the last sample in each
  interval (k-1)*d < t <= k*d of the epoch, d = -dedup.minScrapeInterval. Prometheus scrapes each
  target at a fixed phase within its interval, so while both replicas are up the replica scraped
  later in the second is the one kept; while it is down, its partner's samples are.
- app/vmselect/promql/rollup.go, `removeCounterResets`: every drop of a counter is a reset. A drop
  smaller than 1/8 of the value is a "partial counter reset": the drop is added back (commit
  84e373e5c7, 2022-06-30, VictoriaMetrics issue 2787; before 1.79 such a drop was taken as the
  jitter of an HA pair and the earlier value kept). So increase() is exact only over a series
  that never drops. A replica serves what its last checkpoint holds, up to a second behind, and
  after a restart it serves its checkpoint until it has read what it missed. At a switch from one
  replica to the other the kept series can then drop, and increase() counts the drop twice (a
  drop of 1/8 of the value or more: the whole value before it, again).

So the switches here happen where the replicas agree. The replica VictoriaMetrics keeps is killed
once both served everything written so far, and nothing is written until it is back and scraped.
Elsewhere a switch needs a scrape late by more than the gap between the replicas' phases or to
the second's end: each replica's scrapes are kept MARGIN_MS clear of the dedup grid's edges (the
pair is started again on other ports, which moves them, until they are). A machine loaded enough
still delays a scrape past that now and then; where the two then differ the series drops.

Checked: VictoriaMetrics holds one series per node and kind (no `replica`); in the killed
replica's gap its samples are the partner's; its series drop only at a switch between replicas,
and not at the kill and the restart; increase() over the run equals the figures of
`sm-llm-exporter report` over the same window (busy seconds per node, requests, tokens and
untimed requests per node and kind or reason, and the seconds with 1-3 nodes busy), plus what
`removeCounterResets` adds for the drops a late scrape made (none when every scrape came on
time, as on a machine not loaded). In Prometheus, each replica's own series gives the report's
figures by increase() over its first to its last sample: the killed one's has a gap, and its
counters go on from its checkpoint. Counts match exactly; seconds to the microsecond (the
counters' unit, read back through floats).
"""

from __future__ import annotations

import functools
import json
import math
import random
import shlex
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.times import SECOND, iso
from exporter.commands.demo import DemoLine, short_iso

from support import prometheus as prom
from support import victoria
from support.daemon_process import DaemonProcess, file_nodes
from support.dumps import report_of_dumps
from support.scrape import Samples, value
from support.tools import REPO, now_us, require_tool, wait_for
from support.workload import OUTCOMES, Req, journal

pytestmark = pytest.mark.slow

PROMETHEUS_EXAMPLE = REPO / "deploy" / "prometheus" / "prometheus.yml"
REMOTE_WRITE = REPO / "deploy" / "prometheus" / "remote-write.yml"
VM_DEFAULTS = REPO / "deploy" / "victoria-metrics" / "victoria-metrics"

MS = 1000  # microseconds
SCRAPE_S = 1
MARGIN_MS = 80  # how far each replica's scrapes keep from the dedup grid's edges
PAIR_ATTEMPTS = 8
NODES = ("node0", "node1", "node2")
SLOTS = 2
PID = 4242
PHASE_S = 8  # each phase's requests, written live
REPLICAS = ("a", "b")

# The families compared, by the labels that tell their series apart. Not the seconds with no
# node busy: they grow with each replica's own watermark, which the two move at their own pace.
FAMILIES = {
    "smllm_node_busy_seconds_total": ("node",),
    "smllm_requests_total": ("node", "kind"),
    "smllm_tokens_total": ("node", "kind"),
    "smllm_requests_untimed_total": ("node", "reason"),
    "smllm_concurrency_seconds_total": ("nodes_busy",),
}
SECONDS = ("smllm_node_busy_seconds_total", "smllm_concurrency_seconds_total")


def key(name: str, labels: Mapping[str, str]) -> str | None:
    """A compared series' name, e.g. `smllm_requests_total{node0,extraction}`; None for a series
    not compared."""
    if name not in FAMILIES or labels.get("nodes_busy") == "0":
        return None
    return f"{name}{{{','.join(labels[k] for k in FAMILIES[name])}}}"


def differences(got: Mapping[str, float], want: Mapping[str, float]) -> list[str]:
    """Where `got` is not `want`: counts exactly, seconds to the microsecond."""
    bad = []
    for k in sorted(got.keys() | want.keys()):
        g, w = got.get(k), want.get(k)
        tolerance = 1e-6 if k.startswith(SECONDS) else 0
        if g is None or w is None or abs(g - w) > tolerance:
            bad.append(f"{k}: {g} (expected {w})")
    return bad


# -- the journals -----------------------------------------------------------------------------


def plan(rng: random.Random, start_us: int, end_us: int, first_task: int) -> list[Req]:
    """Requests of 0.3-2 s on each slot of each node, one after another with short gaps, all
    ended 0.3 s before `end_us`; most timed, some cancelled, failed or untimed."""
    reqs = []
    task = first_task
    for node in NODES:
        for slot in range(SLOTS):
            t = start_us + rng.randrange(0, 400) * MS
            while True:
                d = rng.randrange(30_000, 200_000) * 10  # (whole 10 us: what `total time` logs)
                if t + d + 300 * MS > end_us:
                    break
                outcome = rng.choices(OUTCOMES, (85, 5, 5, 5))[0]
                reqs.append(Req(node, t, t + d, rng.randint(50, 1200), outcome, slot, task))
                task += 1
                t += d + rng.randrange(50, 600) * MS
    return reqs


def lines_of(reqs: list[Req]) -> list[tuple[int, str, str]]:
    """(time, node, message) of every node's journal lines, in time order."""
    out = [
        (line.time_us, node, line.message)
        for node in NODES
        for line in journal(node, [r for r in reqs if r.node == node])
    ]
    out.sort(key=lambda x: x[0])  # (stable: a node's lines of one time keep their order)
    return out


class Writer(threading.Thread):
    """Appends each line when its time comes, as a live journal grows. Should it fall behind (a
    busy machine), the lines from there on are stamped later by as much, in order and with their
    spacing kept: a line always carries about the time it is written at."""

    SLACK_US = 100 * MS

    def __init__(self, paths: Mapping[str, Path], lines: list[tuple[int, str, str]]) -> None:
        super().__init__(name="writer", daemon=True)
        self.paths, self.queue = paths, lines
        self.halt = threading.Event()
        self.shift_us = 0
        self.last_us = 0  # the time stamped on the last line written
        self.errors: list[BaseException] = []

    def run(self) -> None:
        files: dict[str, IO[str]] = {}
        try:
            files = {n: p.open("a", encoding="utf-8") for n, p in self.paths.items()}
            i = 0
            while i < len(self.queue) and not self.halt.is_set():
                now = now_us()
                self.shift_us = max(self.shift_us, now - self.queue[i][0] - self.SLACK_US)
                due: dict[str, list[str]] = {}
                while i < len(self.queue) and self.queue[i][0] + self.shift_us <= now:
                    t, node, message = self.queue[i]
                    self.last_us = t + self.shift_us
                    line = DemoLine(self.last_us, PID, message)
                    due.setdefault(node, []).append(short_iso(node, line) + "\n")
                    i += 1
                for node, texts in due.items():
                    files[node].write("".join(texts))
                    files[node].flush()
                if i < len(self.queue):
                    wait_us = self.queue[i][0] + self.shift_us - now_us()
                    self.halt.wait(min(0.05, max(0.0, wait_us / SECOND)))
        except BaseException as e:
            self.errors.append(e)
            raise
        finally:
            for f in files.values():
                f.close()


def write_live(paths: Mapping[str, Path], reqs: list[Req]) -> int:
    """`reqs`' lines written as their time comes; the time stamped on the last one."""
    writer = Writer(paths, lines_of(reqs))
    writer.start()
    try:
        writer.join(PHASE_S + 30)
    finally:
        writer.halt.set()
    assert not writer.is_alive() and not writer.errors, writer.errors
    return writer.last_us


def count_lines(paths: Mapping[str, Path]) -> dict[str, int]:
    return {n: p.read_bytes().count(b"\n") for n, p in paths.items()}


# -- the exporters ----------------------------------------------------------------------------


def served(samples: Samples) -> dict[str, float]:
    """The compared figures of one scrape."""
    out = {}
    for (name, labels), v in samples.items():
        k = key(name, dict(labels))
        if k is not None:
            out[k] = v
    return out


def settled(d: DaemonProcess, lines: Mapping[str, int], last_us: int) -> Samples | None:
    """What `d` serves once it has read every line, holds no request in flight and has accounted
    past the last line; None before."""
    s = d.metrics()
    done = (
        all(value(s, "smllm_source_entries_total", node=n) == lines[n] for n in NODES)
        and all(value(s, "smllm_node_requests_in_flight", node=n) == 0 for n in NODES)
        and value(s, "smllm_accounted_until_timestamp_seconds") * SECOND > last_us
    )
    return s if done else None


def both_settled(
    daemons: Mapping[str, DaemonProcess], lines: Mapping[str, int], last_us: int
) -> dict[str, float]:
    """Both replicas settled; the figures they serve, the same for both."""
    got = {
        r: served(wait_for(functools.partial(settled, d, lines, last_us), 30, f"{r} settled"))
        for r, d in daemons.items()
    }
    assert got["a"] == got["b"], differences(got["a"], got["b"])
    return got["a"]


# -- Prometheus -------------------------------------------------------------------------------


def prometheus_config(directory: Path, targets: Mapping[str, str], remote: str) -> Path:
    """deploy/prometheus/prometheus.yml scraping every SCRAPE_S, with remote-write.yml's scrape
    job and remote_write merged in as its comment says: its targets and URL pointed here."""
    config = yaml.safe_load(PROMETHEUS_EXAMPLE.read_text(encoding="utf-8"))
    fragment = yaml.safe_load(REMOTE_WRITE.read_text(encoding="utf-8"))
    config["global"]["scrape_interval"] = f"{SCRAPE_S}s"
    config["global"]["evaluation_interval"] = f"{SCRAPE_S}s"
    config.pop("rule_files")  # (the rules are another test's; no Alertmanager here)
    config.pop("alerting")
    (job,) = fragment["scrape_configs"]
    assert job["job_name"] == config["scrape_configs"][0]["job_name"]
    replicas = [c["labels"]["replica"] for c in job["static_configs"]]
    assert sorted(replicas) == list(REPLICAS), replicas
    for c in job["static_configs"]:
        c["targets"] = [targets[c["labels"]["replica"]]]
    (write,) = fragment["remote_write"]
    url = urllib.parse.urlsplit(write["url"])
    write["url"] = urllib.parse.urlunsplit(
        url._replace(netloc=urllib.parse.urlsplit(remote).netloc)
    )
    config["scrape_configs"] = fragment["scrape_configs"]
    config["remote_write"] = fragment["remote_write"]
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    check = subprocess.run(
        [require_tool("promtool"), "check", "config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    return path


def raw(api: prom.Api | victoria.Victoria, selector: str, seconds: float) -> list[dict[str, Any]]:
    """The samples of the last `seconds` of every series `selector` names."""
    return api.instant(f"{selector}[{math.ceil(seconds)}s]", time.time())


def points(series: dict[str, Any]) -> list[tuple[int, float]]:
    """A range's samples: (milliseconds since the epoch, value)."""
    return [(round(float(t) * 1000), float(v)) for t, v in series["values"]]


def scrape_phases(api: prom.Api) -> dict[str, int] | None:
    """Where in its second each replica is scraped (1-1000 ms: a sample at a whole second ends
    the dedup interval before it), once each has been scraped up three times; None before."""
    phases = {}
    for r in REPLICAS:
        found = raw(api, f'up{{replica="{r}"}}', 10)
        up = [t for s in found for t, v in points(s) if v == 1]
        if len(up) < 3:
            return None
        phases[r] = (up[-1] - 1) % 1000 + 1
    return phases


def clear_of_the_grid(phases: Mapping[str, int]) -> bool:
    """A scrape late by less than MARGIN_MS cannot make the other replica the one kept: the
    later one's scrapes are that far from the second's end and from the earlier one's."""
    early, late = sorted(phases.values())
    return 1000 - late >= MARGIN_MS and late - early >= MARGIN_MS


def nearest(t_ms: int, phases: Mapping[str, int]) -> str:
    """The replica whose scrape phase a sample's time is nearest to."""

    def apart(p: int) -> int:
        d = abs((t_ms - p) % 1000)
        return min(d, 1000 - d)

    return min(phases, key=lambda r: apart(phases[r]))


def prom_settled(api: prom.Api, replica: str, lines: int, last_us: int) -> bool:
    """Prometheus's last sample of `replica` holds every line and a watermark past the last."""
    sel = f'{{replica="{replica}"}}'
    entries = api.instant(f"sum(smllm_source_entries_total{sel})")
    until = api.instant(f"smllm_accounted_until_timestamp_seconds{sel}")
    return (
        bool(entries and until)
        and float(entries[0]["value"][1]) == lines
        and float(until[0]["value"][1]) * SECOND > last_us
    )


def prometheus_holds(api: prom.Api, lines: Mapping[str, int], last_us: int) -> None:
    """Wait until Prometheus's last sample of each replica is settled."""
    for r in REPLICAS:
        check = functools.partial(prom_settled, api, r, sum(lines.values()), last_us)
        wait_for(check, 30, f"Prometheus to scrape replica {r} settled")


def rfc3339(ms: int) -> str:
    """A time Prometheus reads to the millisecond exactly."""
    return (
        datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"
    )


def replica_increase(api: prom.Api, replica: str, run_s: float) -> tuple[dict[str, float], int]:
    """increase() of each compared series of `replica` from its first sample to its last (no
    extrapolation: both ends are samples), and how many samples it has."""
    (first_series, *_) = raw(api, f'smllm_node_busy_seconds_total{{replica="{replica}"}}', run_s)
    stamps = [t for t, _ in points(first_series)]
    span_ms = stamps[-1] - stamps[0]
    out: dict[str, float] = {}
    for name in FAMILIES:
        expr = f'increase({name}{{replica="{replica}"}}[{span_ms}ms])'
        found = api.get("/api/v1/query", query=expr, time=rfc3339(stamps[-1]))["result"]
        for s in found:
            k = key(name, s["metric"])
            if k is not None:
                out[k] = float(s["value"][1])
    return out, len(stamps)


# -- VictoriaMetrics --------------------------------------------------------------------------


def victoria_flags(interval_s: int) -> list[str]:
    """The ARGS of deploy/victoria-metrics/victoria-metrics, with the dedup interval `interval_s`
    (Prometheus's scrape interval) and without the data path (the test's own)."""
    text = VM_DEFAULTS.read_text(encoding="utf-8")
    (args,) = [line for line in text.splitlines() if line.startswith("ARGS=")]
    (flags_text,) = shlex.split(args.removeprefix("ARGS="))
    flags = dict(f.lstrip("-").split("=", 1) for f in shlex.split(flags_text))
    example = yaml.safe_load(PROMETHEUS_EXAMPLE.read_text(encoding="utf-8"))
    # the rule: one sample kept per scrape interval, in the examples as here
    assert flags["dedup.minScrapeInterval"] == example["global"]["scrape_interval"], flags
    flags["dedup.minScrapeInterval"] = f"{interval_s}s"
    del flags["storageDataPath"]
    return [f"-{k}={v}" for k, v in flags.items()]


def vm_increase(vm: victoria.Victoria, at: float, window_s: int) -> dict[str, float]:
    out = {}
    for name in FAMILIES:
        for s in vm.instant(f"increase({name}[{window_s}s])", at):
            k = key(name, s["metric"])
            if k is not None:
                out[k] = float(s["value"][1])
    return out


@dataclass(frozen=True)
class Drop:
    series: str
    before: tuple[int, float]  # (ms, value)
    after: tuple[int, float]


def drops(series: Iterable[dict[str, Any]]) -> list[Drop]:
    """Every drop within a compared series (stale markers, NaN, aside)."""
    found = []
    for s in series:
        k = key(s["metric"]["__name__"], s["metric"])
        last = None
        for t, v in points(s):
            if k is None or math.isnan(v):
                continue
            if last is not None and v < last[1]:
                found.append(Drop(k, last, (t, v)))
            last = (t, v)
    return found


def reset_excess(series: dict[str, Any]) -> float:
    """What VictoriaMetrics 1.79.5 adds to increase() for a series' drops (rollup.go,
    `removeCounterResets`): a drop smaller than 1/8 of the value before it, the drop; a larger
    one, the whole value before it."""
    excess, prev = 0.0, None
    for _, v in points(series):
        if math.isnan(v):
            continue
        if prev is not None and v < prev:
            excess += prev - v if (prev - v) * 8 < prev else prev
        prev = v
    return excess


# -- the pair ---------------------------------------------------------------------------------


@dataclass
class Pair:
    prom: prom.Api
    daemons: dict[str, DaemonProcess]
    phases: dict[str, int]  # where in its second each replica is scraped, in ms
    tried: list[dict[str, int]]  # the phases of the pairs started before, not clear of the grid

    @property
    def kept(self) -> str:
        """The replica VictoriaMetrics keeps while both are up: the one scraped later."""
        return max(self.phases, key=lambda r: self.phases[r])

    @property
    def partner(self) -> str:
        return next(r for r in REPLICAS if r != self.kept)


@contextmanager
def pair_running(
    tmp_path: Path, paths: Mapping[str, Path], since_us: int, vm: victoria.Victoria
) -> Iterator[Pair]:
    """Both replicas and Prometheus, each replica scraped clear of the dedup grid's edges."""
    config = {"since": iso(since_us), "nodes": file_nodes(paths)}
    tried: list[dict[str, int]] = []
    for attempt in range(PAIR_ATTEMPTS):
        directory = tmp_path / f"attempt{attempt}"
        with ExitStack() as stack:
            daemons = {
                r: stack.enter_context(DaemonProcess(directory / r, config)) for r in REPLICAS
            }
            for d in daemons.values():
                d.start()
            targets = {r: f"127.0.0.1:{d.port}" for r, d in daemons.items()}
            api = stack.enter_context(
                prom.started(prometheus_config(directory, targets, vm.url), directory)
            )
            phases = wait_for(
                functools.partial(scrape_phases, api), 30, "each replica scraped three times"
            )
            if clear_of_the_grid(phases):
                yield Pair(api, daemons, phases, tried)
                return
            tried.append(phases)
    pytest.fail(f"no pair scraped clear of the dedup grid in {PAIR_ATTEMPTS} tries: {tried}")


def kill_and_restart(pair: Pair, before: Mapping[str, float]) -> tuple[float, int]:
    """The kept replica killed; once Prometheus scraped it down and its partner after that, it
    is started again and serves what it served before (`before`), from its checkpoint. When it
    was killed (s) and Prometheus's first scrape of it back up (ms)."""
    api, kept, partner = pair.prom, pair.kept, pair.partner
    d = pair.daemons[kept]
    d.kill()
    killed_at = time.time()

    def down_and_partner_on() -> bool:
        ups = {r: points(s) for r in REPLICAS for s in raw(api, f'up{{replica="{r}"}}', 30)}
        failed = [t for t, v in ups[kept] if v == 0 and t > killed_at * 1000]
        return bool(failed) and sum(t > failed[0] for t, _ in ups[partner]) >= 2

    wait_for(down_and_partner_on, 30, f"Prometheus to scrape {kept} down and {partner} on")
    d.start()
    assert "resuming from checkpoint" in d.log_text(), d.log_text()[-3000:]
    assert served(d.metrics()) == before

    def back() -> int | None:
        (up,) = raw(api, f'up{{replica="{kept}"}}', 30)
        after = [t for t, v in points(up) if v == 1 and t > killed_at * 1000]
        return after[0] if after else None

    return killed_at, wait_for(back, 30, f"Prometheus to scrape {kept} up again")


@dataclass
class Run:
    """What the run left: the figures served at the end, and what Prometheus and
    VictoriaMetrics hold of it."""

    pair: Pair
    config: Path  # the replicas' config file
    since_us: int
    until_us: int  # a whole second past the last line
    written_from: float  # when the first line was written (s)
    killed_at: float  # s
    back_ms: int  # Prometheus's first scrape of the killed replica back up
    quiet_until: float  # when the second phase's first line was written (s)
    settled_at: float  # when Prometheus held the end of both (s)
    served: dict[str, float]  # at the end, the same of both
    in_vm: dict[str, float]  # increase() over the run in VictoriaMetrics
    vm_series: list[dict[str, Any]]  # VictoriaMetrics's samples of every compared family
    vm_entries: list[dict[str, Any]]  # ... and of smllm_source_entries_total
    per_replica: dict[str, tuple[dict[str, float], int]]  # increase() in Prometheus, samples


def received(vm: victoria.Victoria, since: float) -> bool:
    """VictoriaMetrics holds a sample taken at or after `since` (s)."""
    vm.flush()
    found = raw(vm, "smllm_source_entries_total", 30)
    return bool(found) and max(t for s in found for t, _ in points(s)) >= since * 1000


def run_pair(tmp_path: Path, paths: Mapping[str, Path]) -> Run:
    """The pair over two phases of requests, the kept replica killed and restarted between."""
    began = time.time()
    rng = random.Random(33)
    since_us = (now_us() - 60 * SECOND) // SECOND * SECOND
    with (
        victoria.started(victoria_flags(SCRAPE_S), tmp_path) as vm,
        pair_running(tmp_path, paths, since_us, vm) as pair,
    ):
        print(f"scrape phases {pair.phases} ms (before: {pair.tried}); kill {pair.kept}")
        # phase 1; both agree, and Prometheus holds it of both
        written_from = time.time()
        last_us = write_live(paths, plan(rng, now_us() + 300 * MS, now_us() + PHASE_S * SECOND, 1))
        lines = count_lines(paths)
        before = both_settled(pair.daemons, lines, last_us)
        prometheus_holds(pair.prom, lines, last_us)
        killed_at, back_ms = kill_and_restart(pair, before)
        # phase 2; both agree, Prometheus holds it of both, and VictoriaMetrics received it
        second = plan(rng, now_us() + 300 * MS, now_us() + PHASE_S * SECOND, 100_000)
        quiet_until = time.time()
        last_us = write_live(paths, second)
        lines = count_lines(paths)
        final = both_settled(pair.daemons, lines, last_us)
        prometheus_holds(pair.prom, lines, last_us)
        settled_at = time.time()
        wait_for(functools.partial(received, vm, settled_at), 30, "VictoriaMetrics to receive it")
        at = time.time()
        window_s = math.ceil(at - began) + 5
        for r, d in pair.daemons.items():
            for run in range(1, d.run + 1):
                assert "Traceback" not in d.log_text(run), (r, run, d.log_text(run)[-3000:])
        return Run(
            pair=pair,
            config=pair.daemons["a"].config,
            since_us=since_us,
            until_us=(last_us + SECOND) // SECOND * SECOND,
            written_from=written_from,
            killed_at=killed_at,
            back_ms=back_ms,
            quiet_until=quiet_until,
            settled_at=settled_at,
            served=final,
            in_vm=vm_increase(vm, at, window_s),
            vm_series=[s for name in FAMILIES for s in raw(vm, name, window_s)],
            vm_entries=raw(vm, "smllm_source_entries_total", window_s),
            per_replica={r: replica_increase(pair.prom, r, window_s) for r in REPLICAS},
        )


def report_figures(run: Run, paths: Mapping[str, Path]) -> dict[str, float]:
    """The compared figures of `sm-llm-exporter report` over [since, until] of the same config,
    and the tokens by kind (which its JSON adds up per node) from the same report read in
    process."""
    window = ["--since", iso(run.since_us), "--until", iso(run.until_us), "--format", "json"]
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--config", str(run.config), *window],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    snap = report_of_dumps(paths, Kinds(DEFAULT_RULES), run.since_us, run.until_us).snapshot
    want: dict[str, float] = {}
    for figures in snap.nodes:
        n, node = figures.name, report["nodes"][figures.name]
        want[f"smllm_node_busy_seconds_total{{{n}}}"] = node["busy_seconds"]
        for kind, count in node["kinds"].items():
            want[f"smllm_requests_total{{{n},{kind}}}"] = count
        for reason, untimed in node["untimed"].items():
            want[f"smllm_requests_untimed_total{{{n},{reason}}}"] = untimed["requests"]
        assert {k: c.requests for k, c in figures.kinds.items()} == node["kinds"]
        assert sum(c.tokens for c in figures.kinds.values()) == node["tokens"]
        for kind, c in figures.kinds.items():
            want[f"smllm_tokens_total{{{n},{kind}}}"] = c.tokens
    assert sorted(report["nodes"]) == sorted(NODES)
    for k, seconds in report["concurrency_seconds"].items():
        if k != "0":
            want[f"smllm_concurrency_seconds_total{{{k}}}"] = seconds
    # (a run that shows something: requests on every node, and 1, 2 and 3 nodes busy at once)
    assert all(report["nodes"][n]["requests"] > 5 for n in NODES), report["nodes"]
    assert all(report["concurrency_seconds"][k] > 0 for k in ("1", "2", "3")), report
    return want


def origins(run: Run) -> tuple[int, list[str]]:
    """Whose samples VictoriaMetrics kept from the first lines to the end of the run (not
    after: its last second may hold the partner's sample and not yet the kept one's): how many
    of the partner's in the killed replica's gap, and those from the other replica than planned
    (the kept one's in the gap, the partner's elsewhere: a scrape late by more than its
    margin)."""
    pair, kill_ms = run.pair, round(run.killed_at * 1000)
    in_gap, unplanned = 0, []
    for s in run.vm_entries:
        for t, v in points(s):
            if not run.written_from * 1000 <= t <= run.settled_at * 1000 or math.isnan(v):
                continue
            gap = kill_ms < t < run.back_ms
            planned = pair.partner if gap else pair.kept
            source = nearest(t, pair.phases)
            in_gap += gap and source == planned
            if source != planned:
                unplanned.append(f"{s['metric']['node']} at {t} ms: {v}, from {source}")
    return in_gap, unplanned


def test_replicated_pair_into_victoria_metrics(tmp_path: Path) -> None:
    paths = {n: tmp_path / f"{n}.log" for n in NODES}
    for p in paths.values():
        p.touch()
    run = run_pair(tmp_path, paths)
    want = report_figures(run, paths)
    pair = run.pair

    # what both replicas served at the end is the report
    assert not differences(run.served, want), differences(run.served, want)

    # VictoriaMetrics: one series per node and kind, without `replica`, from both replicas
    labels = [
        s["metric"] for s in run.vm_series if s["metric"]["__name__"] == "smllm_requests_total"
    ]
    assert all("replica" not in m and m["instance"] == "sm-llm-exporter" for m in labels), labels
    assert sorted((m["node"], m["kind"]) for m in labels) == sorted(
        (n, k) for n in NODES for k in Kinds(DEFAULT_RULES).names
    )
    # one sample a second (the dedup interval) of each series
    for s in run.vm_series:
        seconds = [math.ceil(t / 1000) for t, _ in points(s)]  # (the interval a sample ends)
        assert len(seconds) == len(set(seconds)), s["metric"]
    # in the gap its partner's samples, elsewhere (but for a late scrape) the kept one's
    in_gap, unplanned = origins(run)
    assert in_gap, pair.phases
    # a series drops only where VictoriaMetrics switched replicas, and not at the kill and
    # restart, where the two agreed
    for drop in drops(run.vm_series):
        sources = {nearest(t, pair.phases) for t in (drop.before[0], drop.after[0])}
        assert len(sources) == 2, drop
        assert not run.killed_at * 1000 < drop.after[0] < run.quiet_until * 1000, drop

    # increase() over the run of the deduplicated series: the report's figures, and what
    # VictoriaMetrics adds for a drop at a switch a late scrape made (none on a machine that
    # scrapes on time)
    excess = {
        k: reset_excess(s)
        for s in run.vm_series
        if (k := key(s["metric"]["__name__"], s["metric"])) is not None
    }
    print(f"late-scrape switches: {unplanned}; drops: {drops(run.vm_series)}")
    expected = {k: v + excess.get(k, 0.0) for k, v in want.items()}
    assert not differences(run.in_vm, expected), differences(run.in_vm, expected)

    # in Prometheus, each replica's own series from its first sample to its last: the same;
    # the killed one has fewer samples (its gap), and its counters went on from its checkpoint
    for r, (got, _) in run.per_replica.items():
        assert not differences(got, want), (r, differences(got, want))
    assert run.per_replica[pair.kept][1] < run.per_replica[pair.partner][1], run.per_replica
