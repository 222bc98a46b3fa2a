"""Every second a slot is occupied, held to a real llama-server's recorded output.

`tests/testdata/llama-server/` holds what a real llama-server (b11434) wrote for each kind of
slot occupancy, as journal dumps, with the server's own per-request results beside them
(`record.py` made them). Here the parser, the report and the daemon are held to them: the
timed requests' tokens and durations are the server's own; a request released without a
timing block spans its launch line to its release line, with the reason its lines give; busy
seconds are the union of every occupancy, slot seconds their sum; and the report and the
daemon agree. The lines' meaning is read here independently, with plain regular expressions.
"""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from typing import Any

import pytest

from exporter.accounting.accounting import Accounting
from exporter.accounting.settings import DEFAULT_BUCKETS_S
from exporter.base.records import Event, EventKind, Interval, LogLine, Record
from exporter.base.times import MAX_TIME_US, SECOND
from exporter.checkpoint.codec import parser_of, parser_state, restore, state_of
from exporter.checkpoint.layout import HISTOGRAM_AT
from exporter.checkpoint.migrations import upgrade
from exporter.parse import parser as parse
from exporter.parse import router, tokens
from exporter.parse.parser import Parser
from exporter.report import text as report_text

from support.dumps import dump_lines, report_of_dumps
from support.recorded import (
    FIXTURES,
    KINDS,
    RUNS,
    T0,
    entries,
    intervals,
    ms,
    occupancies,
    report_json,
    untimed,
    window,
)
from support.settings import default_settings
from support.tools import REPO


def union_us(spans: list[tuple[int, int]]) -> int:
    total, until = 0, None
    for start, end in sorted(spans):
        if until is None or start > until:
            total += end - start
            until = end
        elif end > until:
            total += end - until
            until = end
    return total


def parsed(run: str) -> list[Record]:
    """What the parser makes of the run, read as the report reads a dump."""
    p = Parser(run, slots=3)
    return p.feed_all(tuple(dump_lines(FIXTURES / f"{run}.journal.json", run))) + p.flush(
        MAX_TIME_US
    )


def key_of(iv: Interval) -> tuple[str, int, int, int]:
    """The interval's (model, pid, slot, task), as `Occupancy.key`."""
    assert iv.slot is not None and iv.task is not None
    return (iv.model, iv.pid, iv.slot, iv.task)


def results(run: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(
        (FIXTURES / f"{run}.results.json").read_text(encoding="utf-8")
    )
    return [r for r in data if r["endpoint"] != "GET /health"]


@pytest.mark.parametrize("run", RUNS)
def test_every_occupancy_of_a_real_server_is_an_interval_with_its_reason(run: str) -> None:
    expected = occupancies(run)
    got = intervals(parsed(run))
    aborted = [o for o in expected if o.release_us is None and o.total_us is None]
    ended = [o for o in expected if o not in aborted]
    assert len(got) == len(ended)
    # (a router's instance that starts again counts its tasks from 0 again: key and end)
    by_end = {(key_of(iv), iv.end_us): iv for iv in got}
    for occ in ended:
        model = occ.key[0]
        end = occ.end_us if occ.total_us is not None else occ.release_us
        assert end is not None
        iv = by_end[occ.key, end]
        assert iv.reason == occ.reason, occ
        if occ.total_us is not None:  # timed: [end - duration, end], inside launch..release
            assert occ.end_us is not None
            assert (iv.start_us, iv.end_us) == (occ.end_us - occ.total_us, occ.end_us)
            assert occ.release_us is not None and iv.end_us <= occ.release_us
            if not model:  # (a router re-logs its instances' lines in chunks, late)
                assert occ.launch_us - 2_000 <= iv.start_us
        else:  # untimed: from its launch line to its release line, exactly
            assert (iv.start_us, iv.end_us) == (occ.launch_us, occ.release_us)
            assert iv.tokens is None and iv.model == model
    # a server killed under a request: aborted, not lost and not counted
    recs = parsed(run)
    assert sum(1 for r in recs if type(r) is Event and r.kind is EventKind.ABORTED) == len(aborted)


@pytest.mark.parametrize("run", RUNS)
def test_timed_requests_have_the_servers_own_tokens_and_times(run: str) -> None:
    got = [iv for iv in intervals(parsed(run)) if not iv.reason]
    completions: list[dict[str, Any]] = []  # every completion whose own timings were returned
    expected_requests = prompt_tokens = 0
    for r in results(run):
        if r["outcome"] != "timed":
            continue
        choices = r.get("choices") or []
        n = max(1, len(choices), int(r.get("n_cmpl") or 1))
        expected_requests += n
        per_choice = [c["timings"] for c in choices if "timings" in c]
        if per_choice:
            completions += per_choice
            prompt_tokens += per_choice[0]["prompt_n"]  # (each child repeats the parent's)
        elif r.get("timings"):
            if n == 1:
                completions.append(r["timings"])
            prompt_tokens += r["timings"]["prompt_n"]
    assert len(got) == expected_requests
    # every completion's own figures, as the server returned them, are an interval's (the log
    # prints milliseconds to 2 decimals: 5 us each way)
    unused = list(got)
    for c in completions:
        iv = next(
            (
                iv
                for iv in unused
                if iv.generated_tokens == c["predicted_n"]
                and iv.generation_us is not None
                and abs(iv.generation_us - c["predicted_ms"] * 1000) <= 6
            ),
            None,
        )
        assert iv is not None, (c, unused)
        unused.remove(iv)
        assert abs(iv.duration_us - (c["prompt_ms"] + c["predicted_ms"]) * 1000) <= 16, (c, iv)
        if iv.prompt_tokens is not None:  # (an n_cmpl child's prompt is its parent's)
            assert iv.prompt_tokens == c["prompt_n"], (c, iv)
            assert iv.prompt_us is not None and abs(iv.prompt_us - c["prompt_ms"] * 1000) <= 6
    # the prompt counted once per request, n_cmpl children not again
    assert sum(iv.prompt_tokens or 0 for iv in got) == prompt_tokens


def test_untimed_occupancies_match_what_the_clients_saw() -> None:
    for run, reason in (("cancel", "cancelled"), ("error", "error")):
        reasons = Counter(iv.reason for iv in intervals(parsed(run)) if iv.reason)
        assert reasons == Counter(r["outcome"] for r in results(run) if r["outcome"] == reason)
    # every embedding input is a task of its own: launch, release, nothing between
    embeddings = [r for r in results("embeddings") if "embedding" in r["endpoint"]]
    got = [iv for iv in intervals(parsed("embeddings")) if iv.reason]
    assert {iv.reason for iv in got} == {"untimed"}
    assert len(got) >= len(embeddings) == 4


def test_n_cmpl_children_count_their_own_completion_and_not_the_prompt_again() -> None:
    occ = {o.key: o for o in occupancies("n_cmpl")}
    children = [iv for iv in intervals(parsed("n_cmpl")) if occ[key_of(iv)].child]
    assert len(children) == 4  # two requests of 3 completions each: 2 children each
    for iv in children:
        o = occ[key_of(iv)]
        assert o.generated is not None and o.prompt is not None  # (its block repeats the prompt)
        assert (iv.prompt_tokens, iv.prompt_us, iv.tokens) == (None, None, o.generated[0])
        assert iv.generated_tokens == o.generated[0]


def test_router_instances_keep_their_own_contexts_and_models() -> None:
    recs = parsed("router")
    got = Counter(iv.model for iv in intervals(recs))
    expected = Counter(r["model"] for r in results("router") if r["outcome"] == "timed")
    assert got == expected == Counter({"tiny-a": 3, "tiny-b": 3})
    # slot and task ids collide across the instances, and each is its instance's own
    keys = [(iv.slot, iv.task) for iv in intervals(recs)]
    assert len(set(keys)) < len(keys)
    # an instance started again is a restart of that instance only
    restarts = [r for r in recs if type(r) is Event and r.kind is EventKind.RESTART]
    assert {r.model for r in restarts} == {"tiny-a", "tiny-b"}
    assert not any(type(r) is Event and r.kind is EventKind.ABORTED for r in recs)


def test_the_start_up_line_gives_the_slots_and_systemd_the_server_state() -> None:
    recs = parsed("restart")
    states = [r.kind for r in recs if type(r) is Event and r.kind.value.startswith("server_")]
    assert states == [EventKind.SERVER_UP, EventKind.SERVER_DOWN] * 2
    assert {r.slot for r in recs if type(r) is Event and r.kind is EventKind.SLOTS} == {3}
    # systemd's lines (PID 1) never make a restart: the two servers' PIDs make one
    restarts = [r for r in recs if type(r) is Event and r.kind is EventKind.RESTART]
    assert len(restarts) == 1 and restarts[0].pid != 1
    # the crash's `Main process exited, code=killed`: the request it held is aborted there
    aborted = [r for r in recs if type(r) is Event and r.kind is EventKind.ABORTED]
    killed = next(e for e in entries("restart") if "Main process exited" in e["MESSAGE"])
    assert [a.time_us for a in aborted] == [int(killed["__REALTIME_TIMESTAMP"])]


@pytest.mark.parametrize("run", RUNS)
def test_a_checkpoint_anywhere_in_a_real_run_changes_nothing(run: str) -> None:
    lines = tuple(dump_lines(FIXTURES / f"{run}.journal.json", run))
    p = Parser(run, slots=3)
    whole = p.feed_all(lines) + p.flush(MAX_TIME_US)
    for cut in range(len(lines) + 1):
        p = Parser(run, slots=3)
        got = p.feed_all(lines[:cut])
        p = parser_of(run, json.loads(json.dumps(parser_state(p))))
        p.slots = 3
        got += p.feed_all(lines[cut:]) + p.flush(MAX_TIME_US)
        assert got == whole, cut


def test_the_report_counts_every_occupancy_by_reason_and_busy_is_their_union() -> None:
    since, until = window()
    nodes = report_json(since, until)["nodes"]
    for run in RUNS:
        occ = [o for o in occupancies(run) if o.release_us is not None or o.total_us is not None]
        spans = [
            (o.end_us - o.total_us, o.end_us)
            if o.total_us is not None and o.end_us is not None
            else (o.launch_us, o.release_us or 0)
            for o in occ
        ]
        node = nodes[run]
        assert node["busy_seconds"] == pytest.approx(union_us(spans) / SECOND, abs=1e-9), run
        assert node["slot_busy_seconds"] == pytest.approx(
            sum(e - s for s, e in spans) / SECOND, abs=1e-9
        )
        for reason in ("cancelled", "error", "untimed"):
            mine = [(s, e) for o, (s, e) in zip(occ, spans, strict=True) if o.reason == reason]
            assert node["untimed"][reason] == {
                "requests": len(mine),
                "seconds": pytest.approx(sum(e - s for s, e in mine) / SECOND, abs=1e-9),
            }, (run, reason)
        assert node["requests"] == sum(1 for o in occ if not o.reason)
        assert node["server_up"] == 0  # every run ends with its unit stopped
        # (a router's: its running instances' 3 each, none once they all exited)
        assert node["slots"] == {"embeddings_mean_abort": None, "router": 0}.get(run, 3)
    assert nodes["router"]["models"].keys() == {"tiny-a", "tiny-b"}


def test_the_reports_text_adds_one_line_for_untimed_occupancy() -> None:
    since, until = window()
    dumps = {run: FIXTURES / f"{run}.journal.json" for run in RUNS}
    text = report_text.to_text(report_of_dumps(dumps, KINDS, since, until))
    line = [row for row in text.splitlines() if "untimed occupancy" in row]
    assert len(line) == 1
    assert line[0].startswith("  untimed occupancy: cancelled 2 (")
    assert "error 2 (" in line[0] and "untimed 5 (" in line[0]
    # and a window of timed requests only has none
    dumps = {"parallel": FIXTURES / "parallel.journal.json"}
    text = report_text.to_text(report_of_dumps(dumps, KINDS, *window(("parallel",))))
    assert "untimed occupancy" not in text


PID = 4242


def lines(*messages: tuple[int, str] | tuple[int, str, int]) -> tuple[LogLine, ...]:
    """(microseconds after T0, message[, PID]) each: llama-server's PID unless given."""
    return tuple(LogLine("n", T0 + m[0], "", m[2] if len(m) > 2 else PID, m[1]) for m in messages)


def launch(slot: int, task: int, child: int = 0) -> str:
    return f"0.01.000.000 I slot launch_slot_: id  {slot} | task {task} | processing task, is_child = {child}"


def release(slot: int, task: int) -> str:
    return f"0.01.000.000 I slot      release: id  {slot} | task {task} | stop processing: n_tokens = 9, truncated = 0"


def cancel(task: int) -> str:
    return f"0.01.000.000 W srv          stop: cancel task, id_task = {task}"


def error(task: int) -> str:
    return f"0.01.000.000 E srv    send_error: task id = {task}, error: request (9 tokens) exceeds the context"


@pytest.mark.parametrize(
    ("between", "after", "reason"),
    [
        ((), (), "untimed"),  # an embedding
        ((cancel(7),), (), "cancelled"),  # a client gone: the cancel line first
        ((error(7),), (cancel(7),), "error"),  # an error, then its cancel after the release
        ((), (cancel(7),), "cancelled"),
        ((cancel(8), error(6)), (), "untimed"),  # other tasks' lines
    ],
)
def test_a_release_without_timing_has_the_reason_its_lines_give(
    between: tuple[str, ...], after: tuple[str, ...], reason: str
) -> None:
    p = Parser("n")
    msgs = [(0, launch(1, 7)), *((100, m) for m in between), (500, release(1, 7))]
    msgs += [(600, m) for m in after]
    recs = p.feed_all(lines(*msgs)) + p.flush(T0 + 10 * SECOND)
    assert untimed(recs) == [(0, 500, reason)]
    assert not parser_state(p)["marks"] or reason == "untimed"


def test_era_b_releases_without_timing_are_cancels_and_a_new_launch_decides_at_once() -> None:
    p = Parser("n")
    recs = p.feed_all(
        lines(
            (0, "slot is processing task id_slot=0 id_task=3"),
            (300, "slot released id_slot=0 id_task=3 n_past=9"),
            (400, launch(0, 4)),
        )
    )
    assert untimed(recs) == [(0, 300, "cancelled")]  # decided by the launch, before the grace


def test_lines_quoting_a_request_at_debug_verbosity_are_no_requests() -> None:
    quoted = 'srv  log_server_r: request: {"prompt": "slot print_timing: id  0 | task 5 |       total time = 5.00 ms / 3 tokens"}'
    for msg in (quoted, "x slot launch_slot_: id  0 | task 5 | processing task"):
        assert tokens.tokenize(msg) is None
        assert Parser("n").feed_all(lines((0, msg))) == []


def test_a_wall_clock_prefix_reads_as_the_elapsed_one() -> None:
    for prefix in ("2025-11-15 14:23:35.060 I ", "0.02.039.123 I "):
        token = tokens.tokenize(prefix + launch(2, 9).split(" I ", 1)[1])
        assert token is not None and token[:3] == (tokens.LAUNCH, 2, 9)


def test_systemd_lines_switch_the_state_never_the_server() -> None:
    p = Parser("n")
    recs = p.feed_all(
        lines(
            (0, "Started sm-llm.service - sm-llm llama-server.", 1),
            (10, launch(0, 1)),
            (20, "Stopping sm-llm.service - sm-llm llama-server...", 1),
            (30, "sm-llm.service: Deactivated successfully.", 1),
            (40, "Started sm-llm.service - sm-llm llama-server.", 1),
        )
    )
    kinds = [r.kind for r in recs if type(r) is Event]
    assert kinds == [
        EventKind.PHASE,  # (`Started`: a start-up's first milestone)
        EventKind.SERVER_UP,
        EventKind.STARTED,
        EventKind.SERVER_DOWN,
        EventKind.ABORTED,  # the unit's process has gone: what it held ends there
        EventKind.PHASE,
        EventKind.SERVER_UP,
    ]
    assert p.pid == PID  # systemd's PID 1 is no llama-server: no restart
    assert not [r for r in recs if type(r) is Event and r.kind is EventKind.RESTART]
    # a unit line from a source without PIDs counts; from llama-server's own PID it is none
    q = Parser("n")
    assert q.feed_all(lines((0, "Started sm-llm.service - sm-llm llama-server.", 0))) == [
        Event("n", T0, EventKind.PHASE, 0, detail="started"),
        Event("n", T0, EventKind.SERVER_UP, 0),
    ]
    assert q.feed_all(lines((5, "Stopping sm-llm.service - x...", PID))) == []


def test_a_request_line_after_a_stop_says_the_server_runs() -> None:
    p = Parser("n")
    p.feed_all(lines((0, "sm-llm.service: Failed with result 'signal'.", 1)))
    recs = p.feed_all(lines((10, launch(0, 1))))
    assert [r.kind for r in recs if type(r) is Event] == [EventKind.SERVER_UP, EventKind.STARTED]


def test_untimed_occupancies_are_busy_and_slot_time_but_in_no_mix() -> None:
    for reference in (False, True):
        acc = Accounting(["n", "m"], default_settings(KINDS), origin_us=T0)
        add = acc.add_all_reference if reference else acc.add_all
        add(
            [
                Interval("n", T0 + 1 * SECOND, T0 + 5 * SECOND, 100, 90, 10),  # timed
                Interval("n", T0 + 3 * SECOND, T0 + 9 * SECOND, reason="untimed"),  # parallel
                Interval("m", T0 + 2 * SECOND, T0 + 4 * SECOND, reason="error"),
                Event("n", T0 + 9 * SECOND, EventKind.LOST, PID, 2, 3),
            ]
        )
        (acc.advance_to_reference if reference else acc.advance_to)(T0 + 10 * SECOND)
        snap = acc.snapshot()
        n, m = snap.nodes
        assert (n.busy_us, n.slot_busy_us) == (8 * SECOND, 10 * SECOND)
        assert (m.busy_us, m.slot_busy_us) == (2 * SECOND, 2 * SECOND)
        assert n.untimed == {
            "cancelled": (0, 0),
            "error": (0, 0),
            "untimed": (1, 6 * SECOND),
            "lost": (1, 0),
        }
        assert m.untimed["error"] == (1, 2 * SECOND)
        assert sum(c.requests for c in n.kinds.values()) == 1
        assert snap.mix_us["reconcile"] == 4 * SECOND  # only the timed request's 4 s
        assert snap.mix_us["idle"] == 6 * SECOND
        assert snap.concurrency_us == (2 * SECOND, 6 * SECOND, 2 * SECOND)
        assert n.last_end_us == T0 + 9 * SECOND


def test_a_checkpoint_from_before_the_reasons_keeps_its_cancels() -> None:
    acc = Accounting(["n"], default_settings(KINDS), origin_us=T0)
    acc.add(Interval("n", T0, T0 + SECOND, reason="untimed"))
    state = state_of(acc)
    saved = state["nodes"]["n"]
    for key in ("untimed", "slots", "server_up", "models", "slot_busy_us", "startups"):
        del saved[key]
    for key in ("asleep_since_us", "asleep_us", "queues"):  # (version 10's)
        del saved[key]
    del state["prompt_buckets_us"], state["generation_buckets_us"]
    for values in saved["kinds"].values():
        del values[HISTOGRAM_AT + 1 :]
    saved["cancelled"] = 7
    fresh = Accounting(["n"], default_settings(KINDS), origin_us=T0)
    old = {"format": 1, "accounting": json.loads(json.dumps(state)), "parsers": {}}
    old |= {"positions": {}, "checkpoint_errors": 0, "written_at_us": T0}  # (an older exporter's)
    restore(fresh, upgrade(old)["accounting"])
    assert fresh.snapshot().nodes[0].untimed["cancelled"] == (7, 0)


def test_the_default_buckets_spread_a_real_servers_requests() -> None:
    """All of a real 3-slot run's requests fell in the old first bucket (1 s): now they spread."""
    captured = REPO / "tests" / "testdata" / "llama-server-b11434"
    durations = [
        ms(m.group(1)) / 1000
        for path in sorted(captured.glob("run*.std*.log"))
        for m in re.finditer(r"total time = +([\d.]+) ms", path.read_text(encoding="utf-8"))
    ]
    assert len(durations) >= 8
    buckets = Counter(next((b for b in DEFAULT_BUCKETS_S if d <= b), "inf") for d in durations)
    assert len(buckets) >= 3 and DEFAULT_BUCKETS_S[0] == 0.05 and DEFAULT_BUCKETS_S[-1] == 1800


def test_a_router_line_from_outside_stays_bounded() -> None:
    p = Parser("n")
    # an instance's line that looks routed again is its own line (no request), not another's
    assert p.feed_all(lines((0, "[1] " * 10_000 + launch(0, 1)))) == []
    assert [port for port, _, _ in parser_state(p)["instances"]] == [1]
    spawns = [
        f"srv  load: spawning server instance with name=m{i}-{'x' * 5000} on port {i}"
        for i in range(100)
    ]
    recs = p.feed_all(lines(*((10 + i, s) for i, s in enumerate(spawns))))
    assert not [r for r in recs if type(r) is Event and r.kind is EventKind.PARSE_ERROR]
    state = parser_state(p)
    assert [port for port, _, _ in state["instances"]] == list(
        range(100 - parse.MAX_INSTANCES, 100)
    )
    assert {len(model) for _, model, _ in state["instances"]} == {router.MAX_MODEL_NAME}


class Stalled(BaseException):
    """(A BaseException: the parser turns an Exception from inside it into a parse error.)"""


def test_router_lines_quoted_in_a_huge_request_path_read_in_linear_time() -> None:
    """A request path logged at INFO may repeat the router's words any number of times: the
    spawn and exit lines are read in time linear in the line (a backtracking pattern took
    seconds at 48 KB, minutes at 1 MB, on the event loop)."""
    huge = (
        "srv  log_server_r: request: GET /"
        + "instance name=spawning server instance with name= on port " * 18_000
        + " exited with status 1.2.3.4 404"
    )

    def stalled(signum: int, frame: object) -> None:
        raise Stalled

    old = signal.signal(signal.SIGALRM, stalled)
    signal.setitimer(signal.ITIMER_REAL, 20)  # (a hang detector: linear takes milliseconds)
    try:
        p = Parser("n")
        recs = p.feed_all(lines(*((i, huge) for i in range(3))))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert len(huge) > 1_000_000
    assert not [r for r in recs if type(r) is Event and r.kind is EventKind.PARSE_ERROR]
    # and the real lines still read: a spawn names its port's model, a second spawn of it
    # restarts it (its exit alone does not)
    recs = p.feed_all(
        lines(
            (10, "srv          load: spawning server instance with name=tiny-a on port 8081"),
            (20, "[ 8081] 0.00.100.000 I srv    load_model: initializing, n_slots = 2, n_ctx = 9"),
            (30, "srv           run: instance name=tiny-a exited with status -9"),
            (40, "srv          load: spawning server instance with name=tiny-a on port 8082"),
        )
    )
    assert [
        (r.kind, r.slot, r.model)
        for r in recs
        if type(r) is Event and r.kind is not EventKind.PHASE
    ] == [
        (EventKind.SLOTS, 0, ""),
        (EventKind.SLOTS, 2, ""),
        (EventKind.SLOTS, 0, ""),
        (EventKind.RESTART, None, "tiny-a"),
        (EventKind.SLOTS, 0, ""),
    ]


def test_systemd_taking_a_pidless_server_down_aborts_what_it_held() -> None:
    p = Parser("n")
    recs = p.feed_all(
        lines(
            (0, launch(2, 5), 0),
            (100, "sm-llm.service: Main process exited, code=killed, status=9/KILL", 1),
        )
    )
    assert [r.kind for r in recs if type(r) is Event] == [
        EventKind.STARTED,
        EventKind.SERVER_DOWN,
        EventKind.ABORTED,
    ]


def test_a_timed_task_leaves_no_cancel_reason_on_either_path() -> None:
    msgs = (
        (0, launch(0, 5)),
        (10, cancel(5)),
        (
            20,
            "0.01.000.000 I slot print_timing: id  0 | task 5 |       total time =  5.00 ms / 9 tokens",
        ),
        (30, release(0, 5)),
    )
    for feed in (Parser.feed_all, Parser.feed_reference):
        p = Parser("n")
        feed(p, lines(*msgs))
        assert parser_state(p)["marks"] == [], feed


def test_a_restored_routers_instances_take_the_configured_slots() -> None:
    p = Parser("n", slots=16)
    p.feed_all(
        lines(
            (0, "srv          load: spawning server instance with name=tiny-a on port 42013"),
            (10, "[42013] " + launch(0, 1)),
        )
    )
    q = parser_of("n", json.loads(json.dumps(parser_state(p))))
    q.slots = 16
    # 18 requests in flight fit in 16 slots + 2: none is lost, in the restored instance too
    recs = q.feed_all(lines(*((20 + i, "[42013] " + launch(i + 1, 100 + i)) for i in range(17))))
    assert not [r for r in recs if type(r) is Event and r.kind is EventKind.LOST]


def test_a_model_name_that_is_no_text_is_made_one() -> None:
    p = Parser("n")
    p.feed_all(lines((0, "srv load: spawning server instance with name=m\udc80x on port 1")))
    (model,) = [m for _, m, _ in parser_state(p)["instances"]]
    assert model.encode("utf-8") and model.startswith("m") and model.endswith("x")


def test_a_model_instances_request_ends_only_its_own_launch() -> None:
    """Slot and task ids of a router's instances collide with each other and with the router's
    own: each end takes only its own launch out of flight."""
    acc = Accounting(["n"], default_settings(KINDS), origin_us=T0)
    acc.add(Event("n", T0, EventKind.STARTED, PID, 0, 5))
    acc.add(Event("n", T0, EventKind.STARTED, PID, 0, 5, model="tiny-a"))
    acc.add(Event("n", T0, EventKind.STARTED, PID, 0, 5, model="tiny-b"))
    acc.add(Interval("n", T0, T0 + SECOND, 10, slot=0, task=5, model="tiny-a"))
    assert acc.snapshot().nodes[0].in_flight == 2
    acc.add(Interval("n", T0, T0 + SECOND, slot=0, task=5, reason="untimed", model="tiny-b"))
    acc.add(Interval("n", T0, T0 + SECOND, 10, slot=0, task=5))
    assert acc.snapshot().nodes[0].in_flight == 0
