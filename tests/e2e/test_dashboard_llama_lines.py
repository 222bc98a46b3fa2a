"""The dashboard's "llama-server details" row against a real Prometheus holding real llama-server runs.

The demo's llama-servers never sleep, draft, queue in a router or log live decode lines, so its
Prometheus has none of the row's series. Here four recorded runs of a real llama-server
(tests/testdata/llama-server/: `speculative`, `sleep`, `long_generation`, `router_queue`), one
node each, moved to begin on the same whole second, go through the backfill (`sm-llm-exporter
report --format openmetrics`, one sample a second, as a 1 s scrape would have taken them) into
promtool's blocks, read by Debian's `prometheus`. The `sleep` run's two sleeps last 12 and 9 ms,
far shorter than a scrape: every line after a `server is entering sleeping state` is moved
SLEEP_S later, the same server sleeping longer between the same requests.

Every query of every panel of the row, its variables substituted as Grafana would, returns data,
and each panel says what the runs' lines (read with plain regular expressions:
support/recorded.py) and the server's own results say:
- prefill and decode time percentiles: over the whole window, each node's p50, p90 and p99 lie
  in the bucket its requests' own `prompt eval time` and `eval time` put them in, and the
  histograms count exactly those requests and their seconds;
- the draft acceptance rate is the speculative run's accepted over proposed draft tokens, as its
  results.json says;
- the live decode speed is, at each scrape, the `tg_3s` of the long generation's newest `n_gen`
  line while it runs, and 0 before its first and after its end;
- asleep is 1 exactly from each `server is entering sleeping state` to the next `exiting` (or
  systemd's `Stopping`), the node busy or idle panel says asleep then, the share of time asleep
  is 1 within a sleep and 0 before, and the seconds asleep add up to the sleeps;
- the wake-up wait runs from `exiting sleeping state` to the reload's `n_slots` line, its phases
  `wake` and `load_model` split it at `loading model` (the server's lines placed by their own
  log prefixes, as docs/startups.md says), and the start-up panel shows the server's start
  alone (kind="start"), from systemd's `Started` to `listening on`;
- the router queue shows, per model, the requests that queued and waited, and the deepest place.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exporter.base.times import SECOND

from support import dashboard
from support import prometheus as prom
from support.recorded import entries, gen_lines, occupancies, queue_lines, results, sleeps

pytestmark = pytest.mark.slow

RUNS = ("speculative", "sleep", "long_generation", "router_queue")  # each its own node
STEP_S = 1  # the backfill's step, taken as the scrape interval and the panels' step
SLEEP_S = 10  # each sleep of the `sleep` run made this much longer
LEAD_S, TAIL_S = 2, 4  # the window's seconds before the runs begin and after the last ends
QUANTILES = {"A": 0.5, "B": 0.9, "C": 0.99}  # the percentile panels' refIds
HISTOGRAMS = {
    "Prefill (prompt eval) time percentiles per node": ("smllm_prompt_duration_seconds", "prompt"),
    "Generation (decode) time percentiles per node": (
        "smllm_generation_duration_seconds",
        "generated",
    ),
}
_PREFIX = re.compile(r"^(\d+)\.(\d\d)\.(\d\d\d)\.(\d\d\d) [A-Z] ")
_EXITING = re.compile(r"^\S+ I srv +\w+: server is exiting sleeping state$")
_LOADING = re.compile(r"load_model: loading model ")
_SLOTS_LINE = re.compile(r"load_model: initializing, n_slots = \d+")
# a start's milestones, as docs/startups.md lists them
_START_MILESTONES = (
    re.compile(r"llama_server: initializing"),
    _LOADING,
    _SLOTS_LINE,
    re.compile(r"llama_server: model loaded"),
    re.compile(r"llama_server: listening on "),
)


@dataclass(frozen=True)
class Moved:
    """A run moved in time: its first entry at `t0_us`, each sleep made `SLEEP_S` longer."""

    run: str
    t0_us: int

    def at(self, t_us: int) -> int:
        """Where a time of the recorded run is in the moved one."""
        first = min(int(e["__REALTIME_TIMESTAMP"]) for e in entries(self.run))
        longer = sum(SLEEP_S * SECOND for entered, _ in sleeps(self.run) if t_us > entered)
        return t_us - first + self.t0_us + longer

    def write(self, path: Path) -> Path:
        lines = []
        for e in entries(self.run):
            e = dict(e)
            e["__REALTIME_TIMESTAMP"] = str(self.at(int(e["__REALTIME_TIMESTAMP"])))
            lines.append(json.dumps(e))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def end_us(self) -> int:
        return max(self.at(int(e["__REALTIME_TIMESTAMP"])) for e in entries(self.run))

    def first_line(self, pattern: re.Pattern[str], after_us: int = 0, pid1: bool = False) -> int:
        """The moved time of the run's first line matching `pattern` after `after_us` (moved)."""
        return min(
            self.at(int(e["__REALTIME_TIMESTAMP"]))
            for e in entries(self.run)
            if (e["_PID"] == "1") == pid1
            and pattern.search(e["MESSAGE"])
            and self.at(int(e["__REALTIME_TIMESTAMP"])) > after_us
        )


@dataclass(frozen=True)
class Row:
    """The backfilled runs in a real Prometheus, and the row's panels with their queries."""

    api: prom.Api
    moved: dict[str, Moved]
    since_us: int
    until_us: int
    panels: dict[str, dashboard.Panel]

    @property
    def start(self) -> float:
        return self.since_us / SECOND

    @property
    def end(self) -> float:
        return self.until_us / SECOND

    def queries(self, title: str, step_s: int = STEP_S) -> dict[str, str]:
        """The panel's queries by refId, for a panel of `step_s` per point."""
        values = dashboard.variables(
            ".*",
            ".*",
            dashboard.grafana_regex(list(RUNS)),
            step_s,
            STEP_S,
            round(self.end - self.start),
        )
        return dict(dashboard.queries(self.panels[title], values))

    def ranged(self, expr: str) -> list[dict[str, Any]]:
        return dashboard.range_query(self.api, expr, self.start, self.end, STEP_S)

    def whole(self, title: str) -> dict[str, str]:
        """The panel's queries over the whole window in one point: its rate windows reach back
        past the window's first sample."""
        return self.queries(title, round(self.end - self.start))


def steps(series: dict[str, Any]) -> dict[int, float]:
    """A range query's series: second -> value."""
    return {round(float(t)): float(v) for t, v in series["values"]}


def of_node(result: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    return [s for s in result if s["metric"].get("node") == node]


def one_value(result: list[dict[str, Any]], node: str) -> float:
    (found,) = of_node(result, node)
    return float(found["value"][1])


@pytest.fixture(scope="module")
def row(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Row]:
    tmp = tmp_path_factory.mktemp("llama-lines")
    firsts = [min(int(e["__REALTIME_TIMESTAMP"]) for e in entries(run)) for run in RUNS]
    t0_us = (max(firsts) // SECOND + 1) * SECOND  # (a whole second: the steps fall on it)
    moved = {run: Moved(run, t0_us) for run in RUNS}
    since_us = t0_us - LEAD_S * SECOND
    until_us = (max(m.end_us() for m in moved.values()) // SECOND + TAIL_S) * SECOND
    inputs = {run: m.write(tmp / f"{run}.json") for run, m in moved.items()}
    backfill = dashboard.Backfill(inputs, since_us, until_us, STEP_S)
    board = dashboard.load()
    panels = {p.title: p for p in dashboard.panels(board) if p.row == dashboard.DETAILS_ROW}
    panels |= {p.title: p for p in dashboard.panels(board) if p.title == dashboard.STARTUP_PANEL}
    panels |= {p.title: p for p in dashboard.panels(board) if p.title == dashboard.BUSY_PANEL}
    with backfill.served(tmp, rules=False) as api:
        yield Row(api, moved, since_us, until_us, panels)


def test_every_query_of_the_row_returns_data(row: Row) -> None:
    titles = [t for t, p in row.panels.items() if p.row == dashboard.DETAILS_ROW]
    assert len(titles) >= 8, f"the row has lost panels: {titles}"
    reads = " ".join(t["expr"] for x in titles for t in row.panels[x].panel["targets"])
    for name in (
        "smllm_prompt_duration_seconds_bucket",
        "smllm_generation_duration_seconds_bucket",
        "smllm_draft_accepted_tokens_total",
        "smllm_draft_tokens_total",
        "smllm_server_sleeping",
        "smllm_server_asleep_seconds_total",
        "smllm_server_startup_seconds",
        "smllm_model_queued_requests_total",
        "smllm_model_load_waits_total",
        "smllm_model_queue_position_max",
        "smllm_decode_tokens_per_second",
    ):
        assert name in reads, f"no panel of the row reads {name}"
    for title in titles:
        for ref, expr in row.queries(title).items():
            got = row.ranged(expr)
            assert dashboard.finite_nonzero(got), f"no data: {title} / {ref}: {expr}"


# -- prefill and decode time ----------------------------------------------------------------


def bounds(row: Row, family: str, node: str) -> list[float]:
    """The histogram's bucket bounds (`le`), +Inf last."""
    got = row.api.instant(f'{family}_bucket{{node="{node}"}}', row.end)
    return sorted({float(s["metric"]["le"]) for s in got})


def bucket_of(quantile: float, times_us: list[int], les: list[float]) -> tuple[float, float]:
    """The bucket (lower, upper] histogram_quantile must answer in: the first whose cumulative
    count reaches quantile x count (the +Inf bucket answers its lower bound)."""
    rank = quantile * len(times_us)
    lower = 0.0
    for le in les:
        inside = sum(1 for t in times_us if math.isinf(le) or t <= round(le * SECOND))
        if inside >= rank:
            return (lower, lower) if math.isinf(le) else (lower, le)
        lower = le
    raise AssertionError("no +Inf bucket")


@pytest.mark.parametrize("title", sorted(HISTOGRAMS))
def test_the_percentiles_are_where_the_requests_own_times_put_them(row: Row, title: str) -> None:
    family, part = HISTOGRAMS[title]
    queries = row.whole(title)
    assert set(queries) == set(QUANTILES), queries
    for run in RUNS:
        timed = [o for o in occupancies(run) if o.total_us is not None]
        times = [getattr(o, part)[1] for o in timed if getattr(o, part) is not None]
        assert times, run
        # the histogram holds exactly the run's timed requests and their seconds
        count = row.api.instant(f'sum by (node) ({family}_count{{node="{run}"}})', row.end)
        total = row.api.instant(f'sum by (node) ({family}_sum{{node="{run}"}})', row.end)
        assert one_value(count, run) == len(times), run
        assert one_value(total, run) == pytest.approx(sum(times) / SECOND, abs=1e-9), run
        les = bounds(row, family, run)
        for ref, quantile in QUANTILES.items():
            got = one_value(row.api.instant(queries[ref], row.end), run)
            lower, upper = bucket_of(quantile, times, les)
            assert lower <= got <= upper, (run, ref, got, (lower, upper), sorted(times))


# -- speculative decoding -------------------------------------------------------------------


def test_the_draft_acceptance_rate_is_the_servers_own(row: Row) -> None:
    title = "Draft acceptance rate per node"
    served = [r["timings"] for r in results("speculative") if r.get("timings")]
    accepted = sum(t["draft_n_accepted"] for t in served)
    proposed = sum(t["draft_n"] for t in served)
    assert proposed > 0 and accepted > 0, served  # (a rate of 0 would prove little)
    want = accepted / proposed
    (whole,) = row.whole(title).values()
    assert one_value(row.api.instant(whole, row.end), "speculative") == pytest.approx(want)
    # At the panel's own step: both requests end within one step, so every point whose
    # window holds them says the same; no other node drafts.
    ends = [row.moved["speculative"].at(o.end_us) for o in occupancies("speculative") if o.end_us]
    assert len(ends) == len(served) and len({t // SECOND for t in ends}) == 1, ends
    (query,) = row.queries(title).values()
    got = row.ranged(query)
    assert {s["metric"]["node"] for s in got if dashboard.finite_nonzero([s])} == {"speculative"}
    (spec,) = of_node(got, "speculative")
    finite = [v for v in steps(spec).values() if math.isfinite(v)]
    assert finite and all(v == pytest.approx(want) for v in finite), finite


# -- live decode ----------------------------------------------------------------------------


def test_the_live_decode_speed_is_the_newest_n_gen_line_while_the_generation_runs(
    row: Row,
) -> None:
    run = "long_generation"
    moved = row.moved[run]
    lines = [(moved.at(g.time_us), g.tg_3s) for g in gen_lines(run)]
    assert len(lines) >= 2, lines
    (occ,) = [o for o in occupancies(run) if o.total_us is not None]
    assert occ.end_us is not None
    ended = moved.at(occ.end_us)
    (query,) = row.queries("Live decode speed of requests in flight").values()
    got = row.ranged(query)
    for node in RUNS:
        (series,) = of_node(got, node)
        for second, value in steps(series).items():
            t_us = second * SECOND
            said = [tg for at, tg in lines if at <= t_us]
            want = said[-1] if node == run and said and t_us < ended else 0.0
            assert value == pytest.approx(want, abs=1e-9), (node, second, value, want)
    assert dashboard.finite_nonzero(of_node(got, run))


# -- sleep ----------------------------------------------------------------------------------


def sleep_windows(row: Row) -> list[tuple[int, int]]:
    """The moved run's sleeps: from `entering sleeping state` to `exiting`, or to systemd's
    `Stopping` for the sleep the server was stopped in."""
    moved = row.moved["sleep"]
    out = []
    for entered, exited in sleeps("sleep"):
        start = moved.at(entered)
        end = (
            moved.at(exited)
            if exited is not None
            else moved.first_line(re.compile(r"^Stopping "), start, pid1=True)
        )
        out.append((start, end))
    return out


def asleep_at(windows: list[tuple[int, int]]) -> Callable[[int], bool]:
    return lambda t_us: any(a <= t_us < b for a, b in windows)


def test_asleep_exactly_while_the_server_said_it_slept(row: Row) -> None:
    windows = sleep_windows(row)
    assert len(windows) == 2 and all(b - a > SLEEP_S * SECOND for a, b in windows), windows
    asleep = asleep_at(windows)
    (query,) = row.queries("llama-server asleep").values()
    got = row.ranged(query)
    assert sorted(s["metric"]["node"] for s in got) == sorted(RUNS)
    seen = 0
    for series in got:
        node = series["metric"]["node"]
        for second, value in steps(series).items():
            want = 1.0 if node == "sleep" and asleep(second * SECOND) else 0.0
            assert value == want, (node, second, value)
            seen += value == 1
    assert seen >= 2 * SLEEP_S - 2
    # the node state panel: asleep (2) at the same points, else busy (1) or idle (0)
    (busy,) = row.queries(dashboard.BUSY_PANEL).values()
    (states,) = of_node(row.ranged(busy), "sleep")
    for second, value in steps(states).items():
        if asleep(second * SECOND):
            assert value == 2, (second, value)
        else:
            assert value in (0, 1), (second, value)
    mapped = row.panels[dashboard.BUSY_PANEL].panel["fieldConfig"]["defaults"]["mappings"]
    assert mapped[0]["options"]["2"]["text"] == "asleep"


def test_the_time_asleep_adds_up_to_the_sleeps(row: Row) -> None:
    windows = sleep_windows(row)
    slept = sum(b - a for a, b in windows)
    got = row.api.instant('smllm_server_asleep_seconds_total{node="sleep"}', row.end)
    assert one_value(got, "sleep") == pytest.approx(slept / SECOND, abs=1e-6)
    (query,) = row.queries("Share of time asleep per node").values()
    window_s = dashboard.rate_interval(STEP_S, STEP_S)
    (series,) = of_node(row.ranged(query), "sleep")
    inside = outside = 0
    for second, value in steps(series).items():
        t_us, reach = second * SECOND, (second - window_s) * SECOND
        if any(a <= reach and t_us < b for a, b in windows):  # the whole window asleep
            assert value == pytest.approx(1, abs=1e-9), (second, value)
            inside += 1
        elif t_us < windows[0][0]:  # before the first sleep
            assert value == 0, (second, value)
            outside += 1
    assert inside >= 2 and outside >= 2, (inside, outside)


def placed(lines: list[dict[str, str]]) -> dict[str, int]:
    """The journal time of each of the server's lines, by its message, placed as the start-ups'
    are: by its own elapsed prefix, anchored where the journal saw one of them soonest."""
    clock = {e["MESSAGE"]: prefix_us(e["MESSAGE"]) for e in lines}
    anchor = min(int(e["__REALTIME_TIMESTAMP"]) - clock[e["MESSAGE"]] for e in lines)
    return {message: anchor + us for message, us in clock.items()}


def prefix_us(message: str) -> int:
    """A line's elapsed log prefix `M.SS.mmm.uuu`, in microseconds."""
    m = _PREFIX.match(message)
    assert m, message
    minutes, seconds, ms, us = (int(x) for x in m.groups())
    return ((minutes * 60 + seconds) * 1000 + ms) * 1000 + us


def server_lines(run: str, *patterns: re.Pattern[str], after_us: int = 0) -> list[dict[str, str]]:
    """The server's first line after `after_us` (recorded time) matching the first pattern,
    then the first after it matching the second, and so on."""
    found: list[dict[str, str]] = []
    lines = iter(
        e for e in entries(run) if e["_PID"] != "1" and int(e["__REALTIME_TIMESTAMP"]) > after_us
    )
    for pattern in patterns:
        found.append(next(e for e in lines if pattern.search(e["MESSAGE"])))
    return found


def test_the_wake_up_wait_is_from_exiting_sleep_to_the_reloads_n_slots(row: Row) -> None:
    moved = row.moved["sleep"]
    first, _ = sleeps("sleep")
    assert first[1] is not None
    # the wake-up: `exiting sleeping state`, the reload's `loading model`, its `n_slots = N`
    lines = server_lines("sleep", _EXITING, _LOADING, _SLOTS_LINE, after_us=first[1] - 1)
    exiting, loading, slots = (prefix_us(e["MESSAGE"]) for e in lines)
    queries = row.queries("Wake-up wait per node")
    totals = row.api.instant(queries["A"], row.end)
    assert [s["metric"]["node"] for s in totals] == ["sleep"]
    assert one_value(totals, "sleep") == pytest.approx((slots - exiting) / SECOND, abs=1e-9)
    phases = {
        s["metric"]["phase"]: float(s["value"][1]) for s in row.api.instant(queries["B"], row.end)
    }
    want = {"wake": (loading - exiting) / SECOND, "load_model": (slots - loading) / SECOND}
    assert phases == pytest.approx(want, abs=1e-9)
    # before the wake-up, no wake-up to show
    assert not row.api.instant(queries["A"], moved.at(first[1]) / SECOND - 1)


def test_the_start_up_panel_shows_the_start_alone(row: Row) -> None:
    """From systemd's `Started` to `listening on`; the wake-up is no start."""
    moved = row.moved["sleep"]
    started = moved.first_line(re.compile(r"^Started "), 0, pid1=True)
    milestones = server_lines("sleep", *_START_MILESTONES)
    listening = moved.at(placed(milestones)[milestones[-1]["MESSAGE"]])
    start = row.queries(dashboard.STARTUP_PANEL)
    got = [s for ref in ("A", "B") for s in row.api.instant(start[ref], row.end)]
    assert got and {s["metric"].get("kind") for s in got} == {"start"}, got
    total = row.api.instant(start["B"], row.end)
    assert one_value(total, "sleep") == pytest.approx((listening - started) / SECOND, abs=1e-9)


# -- the router's queue ---------------------------------------------------------------------


def by_model(series: list[dict[str, Any]]) -> dict[str, float]:
    """Per model, the series' highest value over the window."""
    out: dict[str, float] = {}
    for s in series:
        values = [v for v in steps(s).values() if math.isfinite(v)]
        out[s["metric"]["model"]] = max(values, default=math.nan)
    return out


def test_the_router_queue_per_model(row: Row) -> None:
    oracle = queue_lines("router_queue")
    queued = Counter(q.model for q in oracle if q.kind in ("queued", "joined"))
    waited = Counter(q.model for q in oracle if q.kind == "waiting")
    deepest = {m: max(q.position or 0 for q in oracle if q.model == m) for m in queued}
    assert len(queued) >= 2 and max(deepest.values()) >= 2, (queued, deepest)
    # the run's requests queue and wait within one step: a model's series begins with them all
    times = [row.moved["router_queue"].at(q.time_us) for q in oracle if q.kind != "loading"]
    assert max(times) // SECOND == min(times) // SECOND, times
    queries = row.queries("Router queue per model")
    got = {ref: row.ranged(expr) for ref, expr in queries.items()}
    for ref, result in got.items():
        assert {s["metric"]["node"] for s in result} == {"router_queue"}, ref
    assert by_model(got["A"]) == dict(queued)
    assert by_model(got["B"]) == dict(waited)
    assert by_model(got["C"]) == deepest
    for name, want in (
        ("smllm_model_queued_requests_total", queued),
        ("smllm_model_load_waits_total", waited),
    ):
        final = row.api.instant(f'{name}{{node="router_queue"}}', row.end)
        assert {s["metric"]["model"]: float(s["value"][1]) for s in final} == dict(want)
