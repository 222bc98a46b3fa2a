"""Issue 27, the accounting: an entry stamped years ahead vouches for no time, a node that never
catches up is held to the stall limit, and a node's per-model figures always add up to its own.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import MAX_MODELS
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Event, EventKind, Interval, LogLine
from exporter.base.times import SECOND, iso
from exporter.checkpoint.codec import parser_state, restore, state_of
from exporter.commands.demo import DemoLine, short_iso
from exporter.exposition.render import Renderer
from exporter.parse.parser import Parser
from exporter.parse.router import OTHER_MODELS

from support.daemon_process import DaemonProcess, file_nodes
from support.scrape import Samples, parse_metrics, sample, total
from support.settings import default_settings
from support.tools import wait_for

KINDS = Kinds(DEFAULT_RULES)
NODE = "node0"
T0 = 1_790_062_375_000_000  # 2026-09-22T07:32:55Z
AHEAD_10Y = 10 * 365 * 86_400 * SECOND
PID = 4242
LAUNCH = "slot launch_slot_: id  {s} | task {t} | processing task, is_child = 0"
TOTAL = "slot print_timing: id  {s} | task {t} |       total time = {ms:10.2f} ms /   500 tokens"
RELEASE = "slot      release: id  {s} | task {t} | stop processing: n_tokens = 500, truncated = 0"
LIVE_REQUESTS = 10
LIVE_REQUEST_S = 0.05  # how long each live request runs (a simulated server's pace)


# -- an entry stamped years ahead ----------------------------------------------------------------


def test_an_entry_stamped_years_ahead_moves_neither_the_newest_entry_nor_the_last_end() -> None:
    """Before, both moved to now + the allowance: the watermark went 5 s past now, and every
    request that began in those 5 s came late."""
    acc = Accounting([NODE], default_settings(KINDS), origin_us=T0)
    now = T0 + 60 * SECOND
    acc.source_state(NODE, up=True, caught_up=False, now_us=now)
    acc.add_all([Interval(NODE, now - 3 * SECOND, now - 2 * SECOND, 7, slot=0, task=1)])
    acc.line_read(NODE, now - 2 * SECOND, now_us=now, ended_us=now - 2 * SECOND)
    future = now + AHEAD_10Y
    acc.add_all([Interval(NODE, future - SECOND, future, 7, slot=1, task=2)])
    acc.line_read(NODE, future, now_us=now, ended_us=future)
    ns = acc.nodes[NODE]
    assert (ns.newest_us, ns.last_end_us) == (now - 2 * SECOND, now - 2 * SECOND)
    assert ns.clock_skew_us == AHEAD_10Y  # (still shown)
    assert sum(c.requests for c in ns.kinds.values()) == 2  # (counted as it is)
    acc.add_all([Interval(NODE, now - SECOND, now, 7, slot=0, task=3)])  # in line again
    acc.line_read(NODE, now, now_us=now, ended_us=now)
    assert (ns.newest_us, ns.last_end_us, ns.clock_skew_us) == (now, now, 0)
    # one batch of both: the requests in line give the last end
    later = now + 10 * SECOND
    acc.add_all(
        [
            Interval(NODE, later - 2 * SECOND, later - SECOND, 7, slot=0, task=4),
            Interval(NODE, later + AHEAD_10Y - SECOND, later + AHEAD_10Y, 7, slot=1, task=5),
            Interval(NODE, later - 3 * SECOND, later - 2 * SECOND, 7, slot=2, task=6),
        ]
    )
    acc.line_read(NODE, later + AHEAD_10Y, now_us=later, ended_us=later + AHEAD_10Y)
    assert (ns.newest_us, ns.last_end_us) == (now, later - SECOND)


def _request(start_us: int, end_us: int, task: int) -> list[DemoLine]:
    total_ms = (end_us - start_us) / 1000
    return [
        DemoLine(start_us, PID, LAUNCH.format(s=0, t=task)),
        DemoLine(end_us, PID, TOTAL.format(s=0, t=task, ms=total_ms)),
        DemoLine(end_us + 100, PID, RELEASE.format(s=0, t=task)),
    ]


def _append(path: Path, lines: list[DemoLine]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.writelines(short_iso(NODE, line) + "\n" for line in lines)


def _now_us() -> int:
    return time.time_ns() // 1000


@pytest.mark.slow
def test_live_requests_after_an_entry_stamped_years_ahead_are_all_counted(tmp_path: Path) -> None:
    """The daemon as a process follows a dump that a simulated llama-server writes as it
    serves: one entry stamped ten years ahead, then 10 live requests. Every one of them counts
    its busy seconds, none late (before: the watermark went to now + 5 s, and what began in
    those 5 s was late)."""
    dump = tmp_path / f"{NODE}.log"
    start = _now_us() - 60 * SECOND
    _append(dump, _request(start, start + SECOND, 0))  # (a server that logs launch lines)
    _append(dump, [DemoLine(start + 2 * SECOND + AHEAD_10Y, PID, TOTAL.format(s=1, t=99, ms=9))])
    with DaemonProcess(
        tmp_path / "d", {"nodes": file_nodes({NODE: dump}), "since": iso(start)}
    ) as d:
        d.start()

        def skew_shown() -> Samples | None:
            m = d.metrics()
            return m if (sample(m, "smllm_source_clock_skew_seconds", node=NODE) or 0) > 0 else None

        wait_for(skew_shown, 30, "the entry stamped ten years ahead read")
        seen = _now_us()

        def moved() -> Samples | None:  # (a caught-up node's figures trail now by 2 s)
            m = d.metrics()
            wm = sample(m, "smllm_accounted_until_timestamp_seconds") or 0
            return m if wm * SECOND > seen - 2 * SECOND else None

        wait_for(moved, 30, "the figures accounted past when that entry was read")
        busy_us = SECOND  # the first request's
        last_end = 0
        for task in range(1, LIVE_REQUESTS + 1):  # each written as it happens
            launched = _now_us()
            _append(dump, [DemoLine(launched, PID, LAUNCH.format(s=0, t=task))])
            time.sleep(LIVE_REQUEST_S)  # (the request runs: the simulated server's pace)
            last_end = _now_us()
            _append(dump, _request(launched, last_end, task)[1:])
            busy_us += last_end - launched

        def accounted() -> Samples | None:
            m = d.metrics()
            wm = sample(m, "smllm_accounted_until_timestamp_seconds") or 0
            counted = total(m, "smllm_requests_total", node=NODE) == 2 + LIVE_REQUESTS
            return m if counted and wm * SECOND > last_end else None

        m = wait_for(accounted, 30, "the live requests read, and the watermark past them")
        assert sample(m, "smllm_late_intervals_total", node=NODE) == 0
        busy = sample(m, "smllm_node_busy_seconds_total", node=NODE)
        assert busy == pytest.approx(busy_us / SECOND, abs=LIVE_REQUESTS * 1e-3)  # (ms lines)
        assert (sample(m, "smllm_source_clock_skew_seconds", node=NODE) or 0) == 0  # in line
        assert d.ready_or_gone() == "ready"


# -- a node that never catches up ----------------------------------------------------------------

STALL = 300 * SECOND
STEP = 10 * SECOND  # how often the sources hand over a batch


def _two_nodes() -> Accounting:
    """`busy`, a node that logs launch lines and is caught up, and `endless`."""
    acc = Accounting(["busy", "endless"], default_settings(KINDS, stall_us=STALL), origin_us=T0)
    acc.add_all([Event("busy", T0, EventKind.STARTED, PID, 0, 1)])
    acc.add_all([Interval("busy", T0, T0 + SECOND, 7, slot=0, task=1)])
    return acc


def _batch(acc: Accounting, t: int, *, endless_caught_up: bool) -> None:
    """Both sources hand over a batch at `t`; `endless` reads entries that bring no time."""
    acc.line_read("busy", t - 3 * SECOND, now_us=t)
    acc.source_state("busy", up=True, caught_up=True, now_us=t)
    acc.line_read("endless", None, 1000, now_us=t)
    acc.source_state("endless", up=True, caught_up=endless_caught_up, now_us=t, lag_us=t - T0)
    acc.advance(t)


def test_a_node_that_never_catches_up_stops_holding_the_watermark_after_stall_seconds() -> None:
    """A source that reads forever without catching up (a dump replaced by /dev/zero) held
    every node's cluster figures back for good: it is held to stall_seconds, as a down one."""
    acc = _two_nodes()
    now = T0 + 60 * SECOND
    for t in range(now, now + STALL + STEP, STEP):
        _batch(acc, t, endless_caught_up=False)
        assert acc.watermark_us == T0  # it holds them (for stall_seconds)
        held = acc.holder(t)
        assert held is not None and held[:2] == ("endless", "backlog")
        assert iso(now + STALL) in held[2]  # the log says until when
    t = now + STALL + STEP
    _batch(acc, t, endless_caught_up=False)
    assert acc.watermark_us == t - 2 * SECOND  # the other's figures go on without it
    assert acc.holder(t) is None
    # what it brings now from behind the watermark is late, as a down node's
    acc.add(Interval("endless", T0, T0 + SECOND, 7))
    assert acc.nodes["endless"].late == 1


def test_a_node_that_catches_up_within_stall_seconds_holds_the_watermark() -> None:
    acc = _two_nodes()
    now = T0 + 60 * SECOND
    _batch(acc, now, endless_caught_up=False)
    _batch(acc, now + STALL - STEP, endless_caught_up=True)  # caught up in time
    for t in range(now + STALL, now + 2 * STALL, STEP):  # behind again, not for stall_seconds
        _batch(acc, t, endless_caught_up=False)
    assert acc.watermark_us == T0  # (its stall_seconds count from when it fell behind again)
    assert acc.holder(now + 2 * STALL - STEP) is not None


def test_a_backlog_that_reads_on_through_its_journal_holds_the_watermark_past_stall() -> None:
    """A long backlog is no endless stream: while each batch brings newer journal times, the
    stall limit counts from its last step forward, so what it reads is never late."""
    acc = _two_nodes()
    now = T0 + 60 * SECOND
    for i, t in enumerate(range(now, now + 3 * STALL, STEP)):
        acc.line_read("busy", t - 3 * SECOND, now_us=t)
        acc.source_state("busy", up=True, caught_up=True, now_us=t)
        acc.line_read("endless", T0 + i * SECOND, 1000, now_us=t)  # a second of journal a batch
        acc.source_state("endless", up=True, caught_up=False, now_us=t, lag_us=t - T0)
        acc.advance(t)
    assert acc.watermark_us <= acc.nodes["endless"].newest_us  # it still holds them
    held = acc.holder(now + 3 * STALL)
    assert held is not None and held[:2] == ("endless", "backlog")
    acc.add(
        Interval(
            "endless", acc.nodes["endless"].newest_us, acc.nodes["endless"].newest_us + SECOND, 7
        )
    )
    assert acc.nodes["endless"].late == 0


# -- per-model figures add up ----------------------------------------------------------------------

MODELS = 70


def _router_requests(acc: Accounting, models: int) -> None:
    for i in range(models):
        acc.add(Interval(NODE, T0 + i * SECOND, T0 + i * SECOND + 500, 10 + i, model=f"m{i}"))


def _node_requests(acc: Accounting) -> int:
    return sum(c.requests for c in acc.nodes[NODE].kinds.values())


def test_seventy_models_add_up_to_the_node() -> None:
    """Before, only the first 64 model names ever seen counted, silently and for good."""
    acc = Accounting([NODE], default_settings(KINDS), origin_us=T0)
    _router_requests(acc, MODELS)
    _router_requests(acc, MODELS)  # (each model twice: the first 64 keep their own)
    models = acc.snapshot().nodes[0].models
    assert sum(n for n, _, _ in models.values()) == _node_requests(acc) == 2 * MODELS
    assert sum(us for _, us, _ in models.values()) == 2 * MODELS * 500
    assert sum(t for _, _, t in models.values()) == 2 * sum(10 + i for i in range(MODELS))
    assert len(models) == MAX_MODELS + 1 and models[OTHER_MODELS][0] == 2 * (MODELS - MAX_MODELS)
    assert models["m0"][0] == 2 and "m69" not in models
    # as /metrics serves them: the models' requests add up to the node's
    m = parse_metrics(Renderer("0").text(acc.snapshot()))
    served = total(m, "smllm_model_requests_total", node=NODE)
    assert served == total(m, "smllm_requests_total", node=NODE) == 2 * MODELS
    assert sample(m, "smllm_model_requests_total", node=NODE, model=OTHER_MODELS) == 12
    # and a checkpoint keeps it so: a new model still counts under the overflow label
    again = Accounting([NODE], default_settings(KINDS), origin_us=T0)
    restore(again, state_of(acc))
    again.add(Interval(NODE, T0, T0 + 500, 10, model="new"))
    models = again.snapshot().nodes[0].models
    assert sum(n for n, _, _ in models.values()) == _node_requests(again) == 2 * MODELS + 1
    assert models[OTHER_MODELS][0] == 2 * (MODELS - MAX_MODELS) + 1


def test_a_real_model_name_never_takes_the_exporters_own_names() -> None:
    """Names beginning with ":" are the exporter's (`:PORT`, the overflow label): a router's
    model named so is told apart, and two such names stay two."""
    p = Parser(NODE)
    spawns = [":other", "_:other", ":8081"]
    lines = [
        f"srv  load: spawning server instance with name={name} on port {8081 + i}"
        for i, name in enumerate(spawns)
    ]
    p.feed_all(tuple(LogLine(NODE, T0 + i, "", PID, msg) for i, msg in enumerate(lines)))
    models = [m for _, m, _ in parser_state(p)["instances"]]
    assert models == ["_:other", "__:other", "_:8081"]
    assert not any(m.startswith(":") for m in models)
