"""bench/soak.py's figures and their tables: memory, scrape latencies, counters compared.

Resident memory over the lines appended (medians, floors, the trend), the scrapes' latencies,
and the daemon's final counters against the report's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import verdict
from _daemon import Samples, total
from _soak_stream import Stream
from _workload import NODE

from exporter.base.times import SECOND

GOAL_GROWTH_PCT = 5.0
GOAL_SCRAPE_MS = 50.0
WINDOW = 0.1  # RSS is the median over the scrapes of a tenth of the lines
MIN_TREND_SCRAPES = 20  # fewer after the warm-up (a short run): the memory goal is not judged
IDLE_SCRAPES = 5  # more scrapes once every line is read: the daemon's idle RSS
TREND_PER = 1_000_000  # the RSS trend, per this many lines
KB_PER_MB = 1024


@dataclass(frozen=True, slots=True)
class Point:
    """One scrape: when (seconds into the stream), how long it took (None: it failed), the
    daemon's RSS after it, the lines appended when it began, and for how long meanwhile some
    task on the machine waited for a CPU (its CPU pressure, /proc/pressure/cpu)."""

    at: float
    ms: float | None
    rss_kb: int
    appended: int
    samples: Samples | None
    stall_ms: float


@dataclass(frozen=True, slots=True)
class Compared:
    """One counter: the daemon's final value, the report's, and the generated one if known."""

    name: str
    daemon: float
    report: float
    generated: float | None = None
    seconds: bool = False

    @property
    def equal(self) -> bool:
        return self.daemon == self.report and self.generated in (None, self.daemon)


def compare(samples: Samples, rep: Mapping[str, Any], s: Stream) -> list[Compared]:
    """Every counter the report's JSON has, against the daemon's."""
    node = rep["nodes"][NODE]
    out: list[Compared] = []
    for kind, requests in node["kinds"].items():
        daemon = total(samples, "smllm_requests_total", node=NODE, kind=kind)
        out.append(Compared(f'requests{{kind="{kind}"}}', daemon, requests))
    out.append(
        Compared(
            "requests",
            total(samples, "smllm_requests_total", node=NODE),
            node["requests"],
            s.requests,
        )
    )
    out.append(
        Compared(
            "tokens", total(samples, "smllm_tokens_total", node=NODE), node["tokens"], s.tokens
        )
    )
    request_us = 0
    for kind, figures in rep["kinds"].items():
        daemon = total(samples, "smllm_request_seconds_total", node=NODE, kind=kind)
        request_us += round(daemon * SECOND)
        out.append(
            Compared(
                f'request seconds{{kind="{kind}"}}',
                daemon,
                figures["request_seconds"],
                seconds=True,
            )
        )
    report_us = sum(round(k["request_seconds"] * SECOND) for k in rep["kinds"].values())
    out.append(Compared("request microseconds", request_us, report_us, s.request_us))
    busy = total(samples, "smllm_node_busy_seconds_total", node=NODE)
    out.append(Compared("busy seconds", busy, node["busy_seconds"], seconds=True))
    for k, v in rep["concurrency_seconds"].items():
        daemon = total(samples, "smllm_concurrency_seconds_total", nodes_busy=k)
        out.append(Compared(f'concurrency seconds{{nodes_busy="{k}"}}', daemon, v, seconds=True))
    for m, v in rep["mix_seconds"].items():
        daemon = total(samples, "smllm_mix_seconds_total", mix=m)
        out.append(Compared(f'mix seconds{{mix="{m}"}}', daemon, v, seconds=True))
    errors = total(samples, "smllm_parse_errors_total", node=NODE)
    out.append(Compared("parse errors", errors, rep["parse_errors"][NODE], 0))
    return out


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class Window:
    """The RSS (kB) of the scrapes that began with a given share of the lines appended: their
    median, their lowest (the floor: no batch in hand), and how many there were."""

    median: float
    floor: float
    scrapes: int


def rss_window(points: Sequence[Point], lines: int, lo: float, hi: float) -> Window:
    """The scrapes that began with between `lo` and `hi` of the lines appended (the last
    window: while the last of them were being appended); with none (a short run), the first
    scrape after."""
    kb = [p.rss_kb for p in points if lo * lines <= p.appended < hi * lines]
    n = len(kb)
    if not kb:
        kb = [p.rss_kb for p in points if p.appended >= lo * lines][:1]
    if not kb:
        return Window(math.nan, math.nan, 0)
    return Window(statistics.median(kb), min(kb), n)


@dataclass(frozen=True, slots=True)
class Trend:
    """The least-squares line of RSS over the lines appended, from the end of the warm-up to the
    last append: its slope (kB a line), its value at the warm-up's end and how many scrapes."""

    slope: float
    at_warm_up: float
    scrapes: int

    def growth_pct(self, lines: int, warm_up: float) -> float:
        """The line's rise over the lines after the warm-up, in % of its value at the start."""
        return 100 * self.slope * (1 - warm_up) * lines / self.at_warm_up


def rss_trend(points: Sequence[Point], lines: int, warm_up: float) -> Trend:
    after = [p for p in points if warm_up * lines <= p.appended < lines]
    if len({p.appended for p in after}) < 2:
        return Trend(math.nan, math.nan, len(after))
    fit = statistics.linear_regression([p.appended for p in after], [p.rss_kb for p in after])
    return Trend(fit.slope, fit.intercept + fit.slope * warm_up * lines, len(after))


def results(
    points: Sequence[Point],
    lines: int,
    final: Point | None,
    warm_up: float,
    compared: Sequence[Compared],
) -> tuple[list[str], list[str]]:
    """The result table of a run's scrapes (`final`: the one that showed every line read), and
    the goals that failed."""
    timed = [p.ms for p in points if p.ms is not None]
    failed = len(points) - len(timed)
    warm = rss_window(points, lines, warm_up, warm_up + WINDOW)
    last = rss_window(points, lines, 1 - WINDOW, 1)
    idle = None
    if final is not None:
        idle = statistics.median(p.rss_kb for p in points if p.at >= final.at)
    trend = rss_trend(points, lines, warm_up)
    growth = trend.growth_pct(lines, warm_up)
    measured = trend.scrapes >= MIN_TREND_SCRAPES
    after = [p.rss_kb for p in points if p.appended >= warm_up * lines]
    medians = 100 * (last.median - warm.median) / warm.median
    floors = 100 * (last.floor - warm.floor) / warm.floor
    idle_growth = math.nan if idle is None else 100 * (idle - warm.median) / warm.median
    worst = max(timed, default=math.nan)
    slow = sum(ms >= GOAL_SCRAPE_MS for ms in timed) + failed
    equal = bool(compared) and all(c.equal for c in compared)
    w0, w1 = round(100 * warm_up), round(100 * (warm_up + WINDOW))
    rows: list[tuple[str, str, str, bool | None]] = [
        (
            f"RSS after the warm-up ({w0}-{w1}% of the lines), median / floor, MB",
            f"{_mb(warm.median)} / {_mb(warm.floor)}",
            "",
            None,
        ),
        (
            f"RSS at the end ({100 - round(100 * WINDOW)}-100%), median / floor, MB",
            f"{_mb(last.median)} / {_mb(last.floor)}",
            "",
            None,
        ),
        (
            "RSS growth, end against warm-up, median / floor, %",
            f"{medians:+.1f} / {floors:+.1f}",
            "",
            None,
        ),
        (
            f"RSS trend after the warm-up, MB per {TREND_PER:,} lines",
            f"{trend.slope * TREND_PER / KB_PER_MB:+.2f}",
            "",
            None,
        ),
        (
            f"RSS growth after the warm-up (trend, {trend.scrapes} scrapes), %",
            f"{growth:+.2f}",
            f"< {GOAL_GROWTH_PCT:g}",
            growth < GOAL_GROWTH_PCT if measured else None,
        ),
        (
            f"RSS idle, every line read (median of {IDLE_SCRAPES + 1}), MB",
            _mb(idle),
            "",
            None,
        ),
        ("RSS growth after the warm-up to idle, %", f"{idle_growth:.2f}", "", None),
        ("RSS peak after the warm-up, MB", _mb(max(after, default=None)), "", None),
        ("/metrics scrapes", f"{len(points)}", "", None),
        ("/metrics p50, ms", f"{statistics.median(timed) if timed else math.nan:.1f}", "", None),
        ("/metrics p99, ms", f"{percentile(timed, 99) if timed else math.nan:.1f}", "", None),
        (
            "/metrics max, ms",
            f"{worst:.1f}",
            f"< {GOAL_SCRAPE_MS:g}",
            worst < GOAL_SCRAPE_MS and slow == 0,
        ),
        (f"/metrics >= {GOAL_SCRAPE_MS:g} ms or failed, scrapes", f"{slow}", "", None),
        ("final counters: daemon = report", "equal" if equal else "DIFFER", "equal", equal),
    ]
    out = [f"{'':64} {'value':>13}  {'goal':>6}  verdict"]
    out += [
        f"{name:64} {value:>13}  {goal:>6}  {'' if ok is None else verdict(ok)}"
        for name, value, goal, ok in rows
    ]
    if not measured:
        out.append(
            f"(the memory goal is not judged: under {MIN_TREND_SCRAPES} scrapes after the warm-up,"
            " too short a run)"
        )
    fails = [name for name, _, _, ok in rows if ok is False]
    return out, fails


def _mb(kb: float | None) -> str:
    return "-" if kb is None or math.isnan(kb) else f"{kb / KB_PER_MB:.1f}"


def counters_table(compared: Sequence[Compared]) -> list[str]:
    out = [f"{'counter':46} {'daemon':>22} {'report':>22} {'generated':>16}  equal"]
    for c in compared:
        out.append(
            f"{c.name:46} {_num(c.daemon, c.seconds):>22} {_num(c.report, c.seconds):>22} "
            f"{'-' if c.generated is None else _num(c.generated, c.seconds):>16}  "
            f"{'yes' if c.equal else 'NO'}"
        )
    return out


def _num(v: float, seconds: bool) -> str:
    return f"{v:,.6f}" if seconds else f"{round(v):,}"


def timeline(points: Sequence[Point], lines: int) -> str:
    """The median and the floor of the RSS over each tenth of the lines appended."""
    parts = []
    for tenth in range(10):
        w = rss_window(points, lines, tenth / 10, (tenth + 1) / 10)
        parts.append(f"{_mb(w.median)} ({_mb(w.floor)})")
    return "RSS, MB, median (floor) over each tenth of the lines appended: " + ", ".join(parts)


def write_csv(path: Path, points: Sequence[Point]) -> None:
    with path.open("w") as out:
        out.write("seconds,lines_appended,scrape_ms,rss_kb,cpu_stall_ms\n")
        for p in points:
            ms = "" if p.ms is None else f"{p.ms:.3f}"
            out.write(f"{p.at:.3f},{p.appended},{ms},{p.rss_kb},{p.stall_ms:.3f}\n")
