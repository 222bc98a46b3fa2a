"""Benchmark the `report` path against the seed's 0.5 s sampling algorithm, as ratios.

    .venv/bin/python bench/report.py            # 1,000 3,000 10,000 (both) + 100,000 1,000,000
    .venv/bin/python bench/report.py --quick    # 1,000 3,000 (both) + 100,000 (ours)
    .venv/bin/python bench/report.py --sizes 1000 20000

Each size is one deterministic workload (`random.Random`): three nodes serving the seed's mix
(extraction: 600-1000 tokens, 20-60 s; reconcile: under 600 tokens, 2-15 s), one request at a
time per node, gaps of a few seconds and now and then idle minutes; the window runs from the
first start to the last end. The workload is written as era-D `total time` lines in
`journalctl -o short-iso-precise` form, one dump per node, in a temporary directory.

Three figures per size:
- seed: a faithful port of timeline.py's computation (its node table, the 0.5 s sampling loop
  that checks every request at every step, the kind split, medians, ideal), on the float tuples
  its own regex and datetime parsing give for the same lines (fetching and parsing not timed);
- ours (accounting): `Accounting.add` for every interval, `advance_to(until)`, `snapshot()`
  (building the Interval objects not timed);
- ours (report): `report` over the dump files (each read through the report's own reader),
  then `to_text`:
  reading, parsing, accounting and formatting, end to end.

Where the seed runs too, the script checks that both compute the same thing: counts and busy
seconds equal, medians equal, and the seed's concurrency and mix seconds equal exactly what our
accounting gives for the same intervals with every end snapped to the seed's 0.5 s grid, so
that the difference from our exact figures is the sampling error alone (printed). The seed
counts requests and ours distinct nodes; with one slot per node the two agree, so the workload
keeps one request at a time per node. The seed's loop is quadratic: at 10,000 requests it takes
minutes; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from _seed import Figures as SeedFigures
from _seed import Progress
from _seed import Request as SeedRequest
from _seed import fetch as seed_fetch
from _seed import figures as seed_figures
from _seed import median as seed_median
from _seed import window as seed_window

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import Snapshot
from exporter.base.kinds import Kinds, split_rules
from exporter.base.records import Interval
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.ingest.settings import settings
from exporter.report import text as report_text
from exporter.report import window as report
from exporter.sources import registry as sources
from exporter.sources.file import FileNode

NODES = ("node0", "node1", "node2")
SPLIT_TOKENS = 600
KINDS = Kinds(split_rules(SPLIT_TOKENS))
STEP = 0.5  # the seed's sampling step, seconds
EPOCH_US = 1_790_062_375 * SECOND  # 2026-09-22T07:32:55Z, the seed's example run
PIDS = (4711, 5012, 5313)
DEFAULT_SIZES = (1_000, 3_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 3_000, 100_000)
SEED_MAX = 10_000  # largest size the seed's port runs at by default


# -- the workload ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    end_us: int  # journal time of the total line
    duration_cs: int  # hundredths of a millisecond, as logged (`47390.06 ms`)
    tokens: int
    task: int

    @property
    def duration_us(self) -> int:
        return self.duration_cs * 10

    @property
    def start_us(self) -> int:
        return self.end_us - self.duration_us


@dataclass(frozen=True, slots=True)
class Workload:
    nodes: dict[str, list[Request]]
    since_us: int  # first start
    until_us: int  # last end

    @property
    def requests(self) -> int:
        return sum(len(r) for r in self.nodes.values())


def generate(n_requests: int, seed: int) -> Workload:
    """Three nodes, one request at a time each, the seed's mix of kinds, gaps and idle minutes."""
    rng = random.Random(seed)
    nodes: dict[str, list[Request]] = {}
    for i, name in enumerate(NODES):
        count = n_requests // len(NODES) + (i < n_requests % len(NODES))
        t = EPOCH_US + round(rng.uniform(0.0, 20.0) * SECOND)
        task = rng.randrange(1, 500)
        reqs: list[Request] = []
        for _ in range(count):
            if rng.random() < 0.3:  # extraction: a long prompt, many tokens
                tokens = rng.randint(SPLIT_TOKENS, 1000)
                duration_cs = rng.randint(2_000_000, 6_000_000)  # 20-60 s
            else:  # reconcile: one fact against another
                tokens = rng.randint(40, SPLIT_TOKENS - 1)
                duration_cs = rng.randint(200_000, 1_500_000)  # 2-15 s
            end = t + duration_cs * 10
            reqs.append(Request(end, duration_cs, tokens, task))
            task += rng.randint(1, 3)  # a task id per request, some used by other calls
            if rng.random() < 0.01:  # the pipeline waits: idle minutes
                gap = rng.uniform(60.0, 600.0)
            else:
                gap = 0.001 + min(rng.expovariate(1 / 1.5), 30.0)
            t = end + round(gap * SECOND)
        nodes[name] = reqs
    since = min(r[0].start_us for r in nodes.values() if r)
    until = max(r[-1].end_us for r in nodes.values() if r)
    return Workload(nodes, since, until)


def _stamp(us: int, cache: dict[int, str]) -> str:
    sec, frac = divmod(us, SECOND)
    prefix = cache.get(sec)
    if prefix is None:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        cache[sec] = prefix
    return f"{prefix}.{frac:06d}+0000"


def dump_lines(w: Workload, node: str) -> list[str]:
    """The node's journal as `journalctl -u sm-llm -o short-iso-precise | grep 'total time'`."""
    pid = PIDS[NODES.index(node)]
    cache: dict[int, str] = {}
    out = []
    for r in w.nodes[node]:
        ms = f"{r.duration_cs // 100}.{r.duration_cs % 100:02d}"
        out.append(
            f"{_stamp(r.end_us, cache)} {node} sm-llm[{pid}]: slot print_timing: id  0 | "
            f"task {r.task} |       total time = {ms:>10} ms / {r.tokens:5d} tokens\n"
        )
    return out


def write_dumps(w: Workload, directory: Path) -> tuple[dict[str, Path], int]:
    paths: dict[str, Path] = {}
    size = 0
    for node in w.nodes:
        path = directory / f"{node}.log"
        with path.open("w", encoding="utf-8") as f:
            lines = dump_lines(w, node)
            for i in range(0, len(lines), 65_536):
                f.write("".join(lines[i : i + 65_536]))
        paths[node] = path
        size += path.stat().st_size
    return paths, size


def seed_inputs(paths: dict[str, Path]) -> dict[str, list[SeedRequest]]:
    """The (start, end, tokens) float tuples the seed's fetch() makes of the same lines."""
    return {node: seed_fetch(path.read_text(encoding="utf-8")) for node, path in paths.items()}


def intervals(w: Workload) -> list[Interval]:
    """What the parser gives for the dump's lines, node by node as the report feeds them."""
    return [
        Interval(node, r.start_us, r.end_us, r.tokens, slot=0, task=r.task, pid=PIDS[i])
        for i, (node, reqs) in enumerate(w.nodes.items())
        for r in reqs
    ]


# -- ours -----------------------------------------------------------------------------------


def ours_accounting(ivs: Sequence[Interval], since_us: int, until_us: int) -> Snapshot:
    acc = Accounting(NODES, settings(Config(), KINDS), origin_us=since_us)
    for iv in ivs:
        acc.add(iv)
    acc.advance_to(until_us)
    return acc.snapshot()


def ours_report(paths: dict[str, Path], since_us: int, until_us: int) -> tuple[report.Report, str]:
    """`report --input` of the dumps, in this process: each read through the report's reader
    (up to `until + max_request_seconds`) into its Builder, then its text."""
    s = settings(Config(), KINDS)
    builder = report.Builder(list(paths), s, since_us, until_us)
    nodes = [FileNode(n, p) for n, p in paths.items()]
    read_until = until_us + s.max_request_us
    failed = asyncio.run(sources.read_windows(nodes, since_us, read_until, builder.add))
    if failed:
        raise RuntimeError(f"could not read {failed}")
    r = builder.finish()
    return r, report_text.to_text(r)


T = TypeVar("T")


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[float, T]:
    best = math.inf
    result: T | None = None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    assert result is not None
    return best, result


# -- like with like -------------------------------------------------------------------------


SEED_MIX = {
    "extract-only": "extraction",
    "reconcile-only": "reconcile",
    "mixed": "extraction+reconcile",
}


def snapped(
    nodes: dict[str, list[SeedRequest]], t0: float, t1: float
) -> tuple[list[Interval], int]:
    """The seed's requests with both ends moved to the next sample at or after them.

    Sample i (time t0 + i * STEP, for t0 + i * STEP < t1) sees a request iff s <= t < e, that
    is iff first(s) <= i < first(e) with first(x) the first sample at or after x; so the seed's
    sampled seconds are exactly the exact seconds of [first(s), first(e)) in units of STEP.
    """
    n = 0 if t1 <= t0 else math.ceil((t1 - t0) / STEP)
    while n > 0 and t0 + (n - 1) * STEP >= t1:
        n -= 1
    while t0 + n * STEP < t1:
        n += 1

    def first(x: float) -> int:
        i = min(max(math.ceil((x - t0) / STEP), 0), n)
        while i > 0 and t0 + (i - 1) * STEP >= x:
            i -= 1
        while i < n and t0 + i * STEP < x:
            i += 1
        return i

    unit = round(STEP * SECOND)
    out = []
    for node, reqs in nodes.items():
        for s, e, tokens in reqs:
            a, b = first(s), first(e)
            if b > a:
                out.append(Interval(node, a * unit, b * unit, tokens))
    return out, n * unit


@dataclass(frozen=True, slots=True)
class Agreement:
    ok: bool
    problems: list[str]
    conc_diff_s: float  # max |seed - ours exact| over the concurrency rows, seconds
    conc_diff_pp: float  # the same in percentage points of the window
    mix_diff_s: float  # max over the seed's three kind rows
    snap_diff_s: float  # max |seed - ours on snapped intervals|: 0 but for float rounding
    busy_diff_s: float
    median_diff_s: float


def agreement(
    seed: SeedFigures,
    nodes: dict[str, list[SeedRequest]],
    t0: float,
    t1: float,
    ours: report.Report,
) -> Agreement:
    problems: list[str] = []
    snap = ours.snapshot
    wall = t1 - t0
    by_name = {n.name: n for n in snap.nodes}

    for name, (total, ext, rec) in seed.requests.items():
        kinds = by_name[name].kinds
        got = (
            sum(c.requests for c in kinds.values()),
            kinds["extraction"].requests,
            kinds["reconcile"].requests,
        )
        if got != (total, ext, rec):
            problems.append(f"{name}: requests {got} != seed {(total, ext, rec)}")
    busy_diff = max(abs(seed.busy[n.name] - n.busy_us / SECOND) for n in snap.nodes)
    medians = [
        (seed_median(reqs), report_text.median_us(ours.durations_us[kind]))
        for kind, reqs in (("extraction", seed.ext), ("reconcile", seed.rec))
        if reqs
    ]
    median_diff = max(
        (math.inf if s is None or o is None else abs(s - o / SECOND) for s, o in medians),
        default=math.inf,
    )
    for label, s, o in (
        ("extraction", seed.ext_s, sum(n.kinds["extraction"].request_us for n in snap.nodes)),
        ("reconcile", seed.rec_s, sum(n.kinds["reconcile"].request_us for n in snap.nodes)),
    ):
        if abs(s - o / SECOND) > 1e-3:
            problems.append(f"{label} node-seconds {o / SECOND} != seed {s}")
    if busy_diff > 1e-3:
        problems.append(f"busy seconds differ by {busy_diff} s")
    if median_diff > 1e-5:
        problems.append(f"medians differ by {median_diff} s")

    # Our exact figures against the seed's samples: the difference is sampling error, each of
    # the 2N ends moving by less than a step.
    conc = [v / SECOND for v in snap.concurrency_us]
    conc_diff = max(abs(seed.hist[k] - conc[k]) for k in range(len(seed.hist)))
    mix_diff = max(abs(v - snap.mix_us[SEED_MIX[k]] / SECOND) for k, v in seed.kinds.items())
    bound = STEP * (2 * sum(len(r) for r in nodes.values()) + 1)
    if max(conc_diff, mix_diff) > bound:
        problems.append(f"seed and ours differ by {max(conc_diff, mix_diff)} s > bound {bound} s")

    # Our accounting on the seed's own grid reproduces its samples exactly.
    grid_ivs, grid_until = snapped(nodes, t0, t1)
    grid = ours_accounting_on(grid_ivs, grid_until)
    snap_diff = max(
        *(abs(seed.hist[k] - grid.concurrency_us[k] / SECOND) for k in range(len(seed.hist))),
        *(abs(v - grid.mix_us[SEED_MIX[k]] / SECOND) for k, v in seed.kinds.items()),
    )
    if snap_diff > 1e-6:
        problems.append(f"on the seed's grid ours differs from the seed by {snap_diff} s")
    return Agreement(
        not problems,
        problems,
        conc_diff,
        100 * conc_diff / wall,
        mix_diff,
        snap_diff,
        busy_diff,
        median_diff,
    )


def ours_accounting_on(ivs: Sequence[Interval], until_us: int) -> Snapshot:
    return ours_accounting(ivs, 0, until_us)


# -- the run --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    requests: int
    window_h: float
    dump_mb: float
    seed_s: float | None
    acct_s: float
    report_s: float
    agreement: Agreement | None


def _progress(label: str) -> Progress:
    started = time.perf_counter()
    last = [started]

    def show(done: float, total: float) -> None:
        now = time.perf_counter()
        if now - last[0] < 5.0:
            return
        last[0] = now
        frac = min(done / total, 1.0) if total > 0 else 1.0
        elapsed = now - started
        eta = elapsed / frac - elapsed if frac > 0 else math.inf
        print(
            f"  {label}: {100 * frac:5.1f}% of the window sampled, {elapsed:6.1f} s elapsed, "
            f"~{eta:.0f} s to go",
            file=sys.stderr,
            flush=True,
        )

    return show


def run_size(n: int, *, run_seed: bool, repeat: int, random_seed: int) -> Row:
    log = sys.stderr
    print(f"[{n:,} requests] generating", file=log, flush=True)
    w = generate(n, random_seed + n)
    ivs = intervals(w)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        paths, size = write_dumps(w, Path(tmp))
        reps = repeat if n <= 100_000 else 1
        print(f"[{n:,} requests] ours: accounting", file=log, flush=True)
        acct_s, acct = best_of(reps, lambda: ours_accounting(ivs, w.since_us, w.until_us))
        ivs.clear()  # free a million objects before the next run
        print(
            f"[{n:,} requests] ours: report from {size / 1e6:.1f} MB of dump", file=log, flush=True
        )
        report_s, (rep, _text) = best_of(reps, lambda: ours_report(paths, w.since_us, w.until_us))
        same = (
            acct.concurrency_us == rep.snapshot.concurrency_us
            and acct.mix_us == rep.snapshot.mix_us
            and [a.busy_us for a in acct.nodes] == [b.busy_us for b in rep.snapshot.nodes]
            and not any(b.parse_errors for b in rep.snapshot.nodes)
            and sum(c.requests for nd in rep.snapshot.nodes for c in nd.kinds.values()) == n
        )
        if not same:
            print(f"[{n:,} requests] PROBLEM: the report and the accounting disagree", file=log)
        seed_s: float | None = None
        agree: Agreement | None = None
        if run_seed:
            nodes = seed_inputs(paths)
            t0, t1 = seed_window(seed_time(w.since_us), seed_time(w.until_us))
            print(f"[{n:,} requests] seed: sampling every {STEP} s", file=log, flush=True)
            gc.collect()
            start = time.perf_counter()
            seed = seed_figures(nodes, t0, t1, SPLIT_TOKENS, _progress(f"seed at {n:,}"))
            seed_s = time.perf_counter() - start
            print(f"[{n:,} requests] seed: {seed_s:.1f} s", file=log, flush=True)
            agree = agreement(seed, nodes, t0, t1, rep)
            if not same:
                agree = replace(agree, ok=False, problems=[*agree.problems, "report != accounting"])
    return Row(
        n, (w.until_us - w.since_us) / SECOND / 3600, size / 1e6, seed_s, acct_s, report_s, agree
    )


def seed_time(us: int) -> str:
    """The window bound as the seed's --since and --until take it: ISO text (UTC)."""
    sec, frac = divmod(us, SECOND)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)) + f".{frac:06d}"


def table(rows: Sequence[Row]) -> str:
    head = (
        f"{'requests':>10} {'window':>8} {'dump':>8} {'seed s':>9} {'ours acct s':>12} "
        f"{'ours report s':>14} {'seed/acct':>10} {'seed/report':>12} {'acct us/req':>12} "
        f"{'report us/req':>14}"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        seed = f"{r.seed_s:9.2f}" if r.seed_s is not None else f"{'-':>9}"
        ra = f"{r.seed_s / r.acct_s:9.0f}x" if r.seed_s is not None else f"{'-':>10}"
        rr = f"{r.seed_s / r.report_s:11.0f}x" if r.seed_s is not None else f"{'-':>12}"
        out.append(
            f"{r.requests:>10,} {r.window_h:7.1f}h {r.dump_mb:6.2f}MB {seed} {r.acct_s:12.4f} "
            f"{r.report_s:14.4f} {ra} {rr} {1e6 * r.acct_s / r.requests:12.2f} "
            f"{1e6 * r.report_s / r.requests:14.2f}"
        )
    return "\n".join(out)


def summary(rows: Sequence[Row]) -> list[str]:
    out: list[str] = []
    for r in rows:
        a = r.agreement
        if a is None:
            continue
        verdict = "agree" if a.ok else "DISAGREE: " + "; ".join(a.problems)
        out.append(
            f"  {r.requests:>9,}: {verdict}; concurrency max |seed-ours| {a.conc_diff_s:.1f} s "
            f"({a.conc_diff_pp:.3f} pp of the window), mix {a.mix_diff_s:.1f} s; on the seed's "
            f"0.5 s grid {a.snap_diff_s:.1e} s; busy {a.busy_diff_s:.1e} s, "
            f"medians {a.median_diff_s:.1e} s"
        )
    if out:
        out.insert(0, "same figures (seed vs ours):")
    at_10k = [r for r in rows if r.requests == 10_000 and r.seed_s is not None]
    for r in at_10k:
        assert r.seed_s is not None
        ratio = r.seed_s / r.report_s
        out.append(
            f"goal >= 100x at 10,000 requests: {r.seed_s / r.acct_s:.0f}x (accounting), "
            f"{ratio:.0f}x (full report): {'met' if ratio >= 100 else 'NOT met'}"
        )
    if len(rows) >= 2:
        lo, hi = min(rows, key=lambda r: r.requests), max(rows, key=lambda r: r.requests)
        grow = hi.requests / lo.requests
        out.append(
            f"growth {lo.requests:,} -> {hi.requests:,} requests (x{grow:,.0f}): "
            f"accounting time x{hi.acct_s / lo.acct_s:,.0f}, report time "
            f"x{hi.report_s / lo.report_s:,.0f} (linear: x{grow:,.0f})"
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    group = ap.add_mutually_exclusive_group()
    group.add_argument(
        "--quick", action="store_true", help="1,000 and 3,000 (both) and 100,000 (ours only)"
    )
    group.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        metavar="N",
        help=f"request counts (default {' '.join(map(str, DEFAULT_SIZES))})",
    )
    ap.add_argument(
        "--seed-max",
        type=int,
        default=SEED_MAX,
        metavar="N",
        help=f"run the seed's algorithm up to this many requests (default {SEED_MAX:,})",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="K",
        help="best of K runs of ours up to 100,000 requests (default 3)",
    )
    ap.add_argument("--random-seed", type=int, default=1, metavar="S", help="workload seed")
    args = ap.parse_args(argv)
    sizes: Sequence[int] = QUICK_SIZES if args.quick else args.sizes or DEFAULT_SIZES
    if any(n < len(NODES) for n in sizes):
        ap.error(f"every size needs at least {len(NODES)} requests")

    rows = [
        run_size(
            n, run_seed=n <= args.seed_max, repeat=max(1, args.repeat), random_seed=args.random_seed
        )
        for n in sizes
    ]
    print(
        f"bench/report: seed (0.5 s sampling, every request at every step) vs ours, "
        f"{len(NODES)} nodes, python {sys.version.split()[0]}"
    )
    print(table(rows))
    for line in summary(rows):
        print(line)
    return 0 if all(r.agreement is None or r.agreement.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
