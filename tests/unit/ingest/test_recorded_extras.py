"""Sleep, draft acceptance, live decode and the router's queue, held to a real llama-server.

The runs `sleep`, `long_generation`, `router_queue` and `speculative` in tests/testdata/
llama-server/ are what a real llama-server (b11434) logged for each; the server's own results
and the journal's lines, read independently (support.recorded), are what the parser, the
accounting, /metrics and the report are held to here.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from exporter.accounting.accounting import Accounting
from exporter.base.records import Draft, Event, EventKind, Interval, Record
from exporter.base.times import MAX_TIME_US, SECOND
from exporter.exposition.render import Renderer
from exporter.parse.parser import Parser
from exporter.report import text as report_text
from exporter.startup.llama import DONE, WAKE

from support.dumps import dump_lines, report_of_dumps
from support.recorded import (
    FIXTURES,
    KINDS,
    entries,
    gen_lines,
    occupancies,
    queue_lines,
    results,
    sleeps,
)
from support.scrape import Samples, parse_metrics, sample
from support.settings import default_settings


def parsed(run: str) -> list[Record]:
    p = Parser(run, slots=3)
    lines = tuple(dump_lines(FIXTURES / f"{run}.journal.json", run))
    return p.feed_all(lines) + p.flush(MAX_TIME_US)


def messages(run: str) -> list[str]:
    return [e["MESSAGE"] for e in entries(run) if e["_PID"] != "1"]


def prefix_us(msg: str) -> int:
    """A line's own clock: its `M.SS.mmm.uuu` prefix, in microseconds."""
    m = re.match(r"(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) ", msg)
    assert m is not None, msg
    minutes, secs, millis, micros = map(int, m.groups())
    return ((minutes * 60 + secs) * 1000 + millis) * 1000 + micros


def at(rec: Record) -> int:
    """When a record happened: an interval at its end."""
    return rec.end_us if type(rec) is Interval else rec[1]


def events(recs: list[Record], kind: EventKind) -> list[Event]:
    return [r for r in recs if type(r) is Event and r.kind is kind]


def span(run: str) -> tuple[int, int]:
    times = [int(e["__REALTIME_TIMESTAMP"]) for e in entries(run)]
    return min(times) - SECOND, max(times) + SECOND


def accounted(run: str) -> Accounting:
    """The run through the accounting as the daemon feeds it, advanced past its end."""
    lo, hi = span(run)
    acc = Accounting([run], default_settings(KINDS), origin_us=lo)
    acc.add_all(parsed(run))
    acc.advance(hi)
    return acc


def metrics(run: str) -> Samples:
    return parse_metrics(Renderer("1.2.3").text(accounted(run).snapshot()))


def test_each_draft_is_the_servers_own_accepted_and_proposed_tokens() -> None:
    drafts = [r for r in parsed("speculative") if type(r) is Draft]
    timed = [o for o in occupancies("speculative") if o.total_us is not None]
    served = [r["timings"] for r in results("speculative") if r.get("timings")]
    assert [(d.accepted, d.drafted) for d in drafts] == [o.draft for o in timed]
    assert [(d.accepted, d.drafted) for d in drafts] == [
        (t["draft_n_accepted"], t["draft_n"]) for t in served
    ]
    # each under its request's kind: the tokens its interval counted
    ivs = {(iv.slot, iv.task): iv.tokens for iv in parsed("speculative") if type(iv) is Interval}
    assert [d.tokens for d in drafts] == [ivs[d.slot, d.task] for d in drafts]
    got = metrics("speculative")
    for name, field in (
        ("smllm_draft_tokens_total", "draft_n"),
        (
            "smllm_draft_accepted_tokens_total",
            "draft_n_accepted",
        ),
    ):
        total = sum(sample(got, name, node="speculative", kind=k) or 0 for k in KINDS.names)
        assert total == sum(t[field] for t in served)


def test_the_prompt_and_generation_histograms_hold_each_timed_requests_own_times() -> None:
    timed = [o for o in occupancies("parallel") if o.total_us is not None]
    lo, _ = span("parallel")
    acc = Accounting(["parallel"], default_settings(KINDS), origin_us=lo)
    p = Parser("parallel", slots=3)
    acc.add_all(p.feed_all(tuple(dump_lines(FIXTURES / "parallel.journal.json", "parallel"))))
    got = parse_metrics(Renderer("1.2.3").text(acc.snapshot()))
    for family, part in (
        ("smllm_prompt_duration_seconds", "prompt"),
        ("smllm_generation_duration_seconds", "generated"),
    ):
        times = [getattr(o, part)[1] for o in timed]
        count = sum(
            sample(got, f"{family}_count", node="parallel", kind=k) or 0 for k in KINDS.names
        )
        total = sum(sample(got, f"{family}_sum", node="parallel", kind=k) or 0 for k in KINDS.names)
        assert count == len(times)
        assert total == pytest.approx(sum(times) / SECOND, abs=1e-9)
        # the bucket of 10 ms holds those of 10 ms or less
        under = sum(
            sample(got, f"{family}_bucket", node="parallel", kind=k, le="0.01") or 0
            for k in KINDS.names
        )
        assert under == sum(1 for t in times if t <= 10_000)


def test_sleep_and_wake_are_where_the_server_said_and_the_asleep_seconds_add_up() -> None:
    recs = parsed("sleep")
    oracle = sleeps("sleep")
    assert len(oracle) == 2 and oracle[1][1] is None  # (it was stopped asleep)
    assert [e.time_us for e in events(recs, EventKind.SLEEP)] == [s for s, _ in oracle]
    assert [e.time_us for e in events(recs, EventKind.WAKE)] == [e for _, e in oracle if e]
    acc = accounted("sleep")
    ns = acc.nodes["sleep"]
    stopped = max(e.time_us for e in events(recs, EventKind.SERVER_DOWN))
    (first, woke), (second, _) = oracle
    assert woke is not None
    slept = (woke - first) + (stopped - second)
    assert ns.asleep_us == slept and ns.asleep_since_us is None
    got = parse_metrics(Renderer("1.2.3").text(acc.snapshot()))
    assert sample(got, "smllm_server_asleep_seconds_total", node="sleep") == slept / SECOND
    assert sample(got, "smllm_server_sleeping", node="sleep") == 0  # (stopped)


def test_a_node_asleep_says_so_until_it_wakes() -> None:
    recs = parsed("sleep")
    (first_wake,) = [e.time_us for e in events(recs, EventKind.WAKE)]
    lo, _ = span("sleep")
    acc = Accounting(["sleep"], default_settings(KINDS), origin_us=lo)
    acc.add_all([r for r in recs if at(r) < first_wake])
    snap = acc.snapshot()
    assert snap.nodes[0].asleep
    got = parse_metrics(Renderer("1.2.3").text(snap))
    assert sample(got, "smllm_server_sleeping", node="sleep") == 1


def test_the_wake_up_is_a_start_up_of_its_own_ending_at_the_reload_before_the_request() -> None:
    lo, hi = span("sleep")
    r = report_of_dumps({"sleep": FIXTURES / "sleep.journal.json"}, KINDS, lo, hi)
    wakes = [s for s in r.startups if s.kind == WAKE]
    assert len(wakes) == 1 and wakes[0].end == DONE
    wake = wakes[0]
    exited = sleeps("sleep")[0][1]
    assert exited is not None
    # placed by the lines' own prefixes, as every server milestone: never after the journal
    # saw its line, and as far apart as the prefixes say
    assert exited - SECOND < wake.start_us <= exited
    clocks = [prefix_us(m) for m in messages("sleep") if "server is exiting sleeping" in m]
    clocks += [prefix_us(m) for m in messages("sleep") if "n_slots =" in m][1:]
    assert wake.end_us - wake.start_us == clocks[1] - clocks[0]
    assert [m for m, _ in wake.milestones] == ["waking", "loading", "slots"]
    assert [p for p, _, _ in wake.phases()] == ["wake", "load_model"]
    # the request that woke it launched after the reload: it waited the wake-up's seconds
    woken = min(o.launch_us for o in occupancies("sleep") if o.launch_us > exited)
    assert wake.end_us <= woken
    wake_request = [x for x in results("sleep") if x.get("step") == "wake"]
    assert wake_request and wake_request[0]["sent_us"] <= wake.start_us
    # the start of the server is a start-up of the start kind, apart
    assert [s.kind for s in r.startups].count("start") == 1
    got = parse_metrics(Renderer("1.2.3").text(r.snapshot))
    assert sample(got, "smllm_server_startup_seconds", node="sleep", kind="wake") == (wake.seconds)


def test_the_report_json_gives_the_asleep_seconds_and_drafts() -> None:
    lo, hi = span("sleep")
    r = report_of_dumps({"sleep": FIXTURES / "sleep.journal.json"}, KINDS, lo, hi)
    recs = parsed("sleep")
    (first, _), (second, _) = sleeps("sleep")
    stopped = max(e.time_us for e in events(recs, EventKind.SERVER_DOWN))
    woke = sleeps("sleep")[0][1]
    assert woke is not None
    slept = woke - first + stopped - second
    assert report_text.to_json(r)["nodes"]["sleep"]["asleep_seconds"] == slept / SECOND
    lo, hi = span("speculative")
    r = report_of_dumps({"speculative": FIXTURES / "speculative.journal.json"}, KINDS, lo, hi)
    draft = report_text.to_json(r)["nodes"]["speculative"]["draft"]
    served = [x["timings"] for x in results("speculative") if x.get("timings")]
    assert sum(d["tokens"] for d in draft.values()) == sum(t["draft_n"] for t in served)


def test_each_n_gen_line_is_the_speed_of_its_request_while_in_flight() -> None:
    recs = parsed("long_generation")
    oracle = gen_lines("long_generation")
    assert len(oracle) >= 2
    decode = events(recs, EventKind.DECODE)
    assert [(e.slot, e.task, e.time_us) for e in decode] == [
        (g.slot, g.task, g.time_us) for g in oracle
    ]
    assert [e.value for e in decode] == [round(g.tg_3s * 100) for g in oracle]
    # while the request runs, the node shows its speed; once it ended, none
    lo, _ = span("long_generation")
    acc = Accounting(["long_generation"], default_settings(KINDS), origin_us=lo)
    acc.add_all([r for r in recs if at(r) <= oracle[-1].time_us])
    assert acc.snapshot().nodes[0].decode_speeds == (oracle[-1].tg_3s,)
    acc.add_all([r for r in recs if at(r) > oracle[-1].time_us])
    assert acc.snapshot().nodes[0].decode_speeds == ()


def test_the_routers_queue_counts_each_request_that_queued_per_model() -> None:
    recs = parsed("router_queue")
    oracle = queue_lines("router_queue")
    queued = Counter(q.model for q in oracle if q.kind in ("queued", "joined"))
    waits = Counter(q.model for q in oracle if q.kind == "waiting")
    assert queued and waits
    assert Counter(e.model for e in events(recs, EventKind.QUEUED)) == queued
    assert Counter(e.model for e in events(recs, EventKind.LOAD_WAIT)) == waits
    got = metrics("router_queue")
    for model, n in queued.items():
        assert (
            sample(got, "smllm_model_queued_requests_total", node="router_queue", model=model) == n
        )
        deepest = max((q.position or 0) for q in oracle if q.model == model)
        assert (
            sample(got, "smllm_model_queue_position_max", node="router_queue", model=model)
            == deepest
        )
    for model, n in waits.items():
        assert sample(got, "smllm_model_load_waits_total", node="router_queue", model=model) == n
